"""HTML and XML documents translated with their markup kept, "detag and project" as Firefox Translations (bergamot)
does it: every block element is a paragraph; its inline tags are taken out, its plain text translated
(`translate_markup`), and each inline tag put back around the whole target words aligned to the words it enclosed.
Everything else in a block is an "atom", kept whole at the target position of its source position: comments, PIs,
entity references, void or wordless elements (`<br>`, `<a><img></a>`) and the subtrees never translated (`<code>`,
`<pre>`, `<script>`, `<style>`, `translate="no"`, `class="notranslate"`; as blocks they are left where they are)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, NamedTuple

from lxml import etree
from lxml import html as lxml_html

from ..data import DataError

__all__ = ["AlignedTranslate", "translate_markup"]

AlignedTranslate = Callable[[list[str]], list[tuple[str, list[tuple[int, int]]]]]
"""Block texts in; per block (translation, links): link (i, j) joins source word i to target word j (0-based, words
are str.split() of the block text and of the translation). Words may be left unaligned."""

# Text-level HTML elements (the HTML standard's "phrasing content"); any other HTML element is a block. An unknown
# tag counts as a block: a block taken for inline would merge paragraphs, an inline taken for a block only splits one.
INLINE_TAGS = frozenset(
    "a abbr acronym b bdi bdo big br cite code data del dfn em font i img input ins kbd mark meter nobr output "
    "progress q rp rt ruby s samp small span strike strong sub sup svg math time tt u var wbr".split()
)
# Never translated, copied as they are (matched on the local name, in XML too: DocBook's <code> is code as well).
OPAQUE_TAGS = frozenset("code pre script style kbd samp var textarea svg math template".split())
# Atoms that part the words on either side, as a browser shows them ("a<br>b" is two words, "a<!-- -->b" one).
SEPARATING_TAGS = frozenset("br hr img input".split())
_ITS_TRANSLATE = "{http://www.w3.org/2005/11/its}translate"  # XML's translate="no" (W3C ITS 2.0)
_SPACE = " \t\n\r\f"  # markup's whitespace (a no-break space is text)
_UNALIGNED = -0.01  # an unaligned target word inside a tag's span costs a little: spans stay as short as their links


def translate_markup(text: str, kind: str, translate: AlignedTranslate, *, name: str = "<input>") -> str:
    """`text` translated, markup kept; `kind` "html" (parsed leniently, as a browser would; a fragment stays a
    fragment) or "xml" (malformed XML raises DataError naming `name` and the line). `translate` is called once,
    with every block that has words."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""  # kept, and out of the parsers' way
    text = text[len(bom) :]
    if kind == "xml":
        tree = _parse_xml(text, name)
        blocks: list[_Block] = []
        _xml_blocks(tree.getroot(), blocks)
        serialize: Callable[[], str] = lambda: _xml_text(tree, text)
    elif kind == "html":
        container, serialize = _parse_html(text)
        blocks = []
        if not _opaque(container):
            _html_blocks(container, blocks)
    else:
        raise ValueError(f"unknown markup kind {kind!r} (html, xml)")
    if blocks:
        results = translate([" ".join(block.words) for block in blocks])
        if len(results) != len(blocks):
            raise ValueError(f"translate returned {len(results)} results for {len(blocks)} blocks")
        for block, (translation, links) in zip(blocks, results):
            _put_back(block, translation, links)
    return bom + serialize()


# Parsing and writing ----------------------------------------------------------------------------------------------
def _parse_xml(text: str, name: str) -> Any:
    """The document tree; entity references stay references, nothing is fetched (no DTD, no network)."""
    # The text is already decoded: the parser is told it is UTF-8 whatever its declaration says.
    parser = etree.XMLParser(
        encoding="utf-8", resolve_entities=False, load_dtd=False, no_network=True, strip_cdata=False
    )
    try:
        return etree.fromstring(text.encode("utf-8"), parser).getroottree()
    except etree.XMLSyntaxError as error:
        message = " ".join(str(error.msg).split())
        raise DataError(f"{name}:{error.lineno}: malformed XML: {message}") from None


def _xml_text(tree: Any, text: str) -> str:
    """The tree written back with the input's XML declaration (libxml2 would rewrite it), and a line break between
    the nodes outside the root (libxml2 does not keep the whitespace there)."""
    root = tree.getroot()
    nodes = [*reversed(list(root.itersiblings(preceding=True))), root, *root.itersiblings()]
    whole, own = (
        etree.tostring(tree, encoding="unicode"),
        "".join(etree.tostring(n, encoding="unicode") for n in nodes),
    )
    doctype = whole[: len(whole) - len(own)].rstrip("\n") if whole.endswith(own) else tree.docinfo.doctype
    # Each node written out of its document: libxml2 writes one with an XHTML doctype as XHTML (adds a <meta>).
    parts = [etree.tostring(deepcopy(node), encoding="unicode", with_tail=False) for node in nodes]
    return _declaration(text) + (doctype + "\n" if doctype else "") + "\n".join(parts) + _trailing_space(text)


def _declaration(text: str) -> str:
    """The XML declaration `text` starts with, and the whitespace after it ("" if none)."""
    if not text.startswith("<?xml") or "?>" not in text:
        return ""
    end = text.index("?>") + 2
    return text[:end] + text[end : len(text) - len(text[end:].lstrip(_SPACE))]


def _parse_html(text: str) -> tuple[Any, Callable[[], str]]:
    """The element whose content is the document (the <html> element, or a <div> made to hold a fragment), and a
    function that writes it back: a fragment without the <div>, the input's outer whitespace and XML declaration
    (XHTML's; libxml2's HTML parser would make it a comment) kept."""
    decl = _declaration(text)
    text = text[len(decl) :]
    # No doctype made up where the input has none (libxml2 adds HTML 4.0's by default).
    parser = lxml_html.HTMLParser(encoding="utf-8", default_doctype=False)
    data = text.encode("utf-8")
    lead, trail = decl + text[: len(text) - len(text.lstrip(_SPACE))], _trailing_space(text)

    def restore_space(core: str) -> str:
        return lead + core.strip(_SPACE) + trail

    if _is_html_document(text):
        tree = lxml_html.document_fromstring(data, parser=parser).getroottree()
        return tree.getroot(), lambda: restore_space(lxml_html.tostring(tree, encoding="unicode"))
    if not text.strip(_SPACE):  # libxml2 refuses an empty document
        return lxml_html.Element("div"), lambda: decl + text
    holder = lxml_html.fragment_fromstring(data, create_parent="div", parser=parser)
    # Written with the holder and cut out of it: libxml2 escapes the text the same way as everywhere else.
    return holder, lambda: restore_space(lxml_html.tostring(holder, encoding="unicode")[len("<div>") : -len("</div>")])


def _is_html_document(text: str) -> bool:
    """Whether `text` is a whole document: a doctype or <html> first, after any comments and an XML declaration."""
    rest = text.lstrip()
    while rest.startswith(("<!--", "<?")):  # (an unclosed one leaves nothing: not a document)
        rest = rest.partition("-->" if rest.startswith("<!--") else ">")[2].lstrip()
    return rest[:9].lower() == "<!doctype" or rest[:5].lower() == "<html"


def _trailing_space(text: str) -> str:
    return text[len(text.rstrip(_SPACE)) :]


# Which elements are blocks --------------------------------------------------------------------------------------
def _local(element: Any) -> str:
    """The tag without its namespace, lower-cased."""
    return str(element.tag).rpartition("}")[2].lower()


def _opaque(element: Any) -> bool:
    """Whether the subtree is never translated: comments, PIs, entities, code-like tags, translate="no" (HTML's
    attribute or ITS's) and the "notranslate" class."""
    if not isinstance(element.tag, str) or _local(element) in OPAQUE_TAGS:
        return True
    if "no" in (element.get("translate", "").strip().lower(), element.get(_ITS_TRANSLATE, "").strip().lower()):
        return True
    return "notranslate" in element.get("class", "").split()


def _html_block(element: Any) -> bool:
    """Whether an HTML element ends the paragraph around it: a block tag, or an inline one holding a block."""
    if not isinstance(element.tag, str) or _local(element) not in INLINE_TAGS:
        return isinstance(element.tag, str)
    return not _opaque(element) and any(_html_block(child) for child in element)


def _html_blocks(container: Any, out: list[_Block]) -> None:
    """The paragraphs of an HTML container: each run of its content between block children, then theirs."""
    before: Any = None
    members: list[Any] = []
    for child in container:
        if _html_block(child):
            _add_block(container, before, members, out)
            before, members = child, []
            if not _opaque(child):
                _html_blocks(child, out)
        else:
            members.append(child)
    _add_block(container, before, members, out)


def _xml_blocks(element: Any, out: list[_Block]) -> None:
    """The paragraphs of an XML subtree: an element with non-blank text of its own is one (whatever it holds: its
    elements are inline); an element holding only elements is structure."""
    if _opaque(element):
        return
    if (element.text or "").strip() or any((child.tail or "").strip() for child in element):
        _add_block(element, None, list(element), out)
        return
    for child in element:
        _xml_blocks(child, out)


# A block's source side ------------------------------------------------------------------------------------------
@dataclass(eq=False)
class _Node:
    """An inline element that encloses words (element None: the block itself): its source words [start, end),
    its inline children that enclose words, and its atoms."""

    element: Any
    start: int = 0
    end: int = 0
    children: list[_Node] = field(default_factory=list)
    atoms: list[_Atom] = field(default_factory=list)
    # As read, in order: (start, end) in the block's text, the element, and its _Node unless it is kept whole.
    content: list[tuple[int, int, Any, _Node | None]] = field(default_factory=list)


class _Atom(NamedTuple):
    """Something kept whole: its source gap (the words before it) and whether space stood before and after it."""

    gap: int
    element: Any
    space_before: bool
    space_after: bool


@dataclass(eq=False)
class _Block:
    """One paragraph: the content of `parent` after `before` (its text if None) through `members`' last tail."""

    parent: Any
    before: Any
    members: list[Any]
    root: _Node
    words: list[str]
    lead: str  # whitespace before the first word, kept as it is
    trail: str


class _Reader:
    """Concatenates a block's text, noting where atoms split words."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.length = 0
        self.breaks: set[int] = set()

    def add(self, text: str | None) -> None:
        if text:
            self.pieces.append(text)
            self.length += len(text)

    def visit(self, element: Any, parent: _Node) -> None:
        if _opaque(element):
            parent.content.append((self.length, self.length, element, None))
            if isinstance(element.tag, str) and (
                _local(element) in SEPARATING_TAGS or "".join(element.itertext()).strip()
            ):
                self.breaks.add(self.length)  # an atom with text, or a line break or image, parts words
            return
        node, start = _Node(element), self.length
        self.add(element.text)
        for child in element:
            self.visit(child, node)
            self.add(child.tail)
        parent.content.append((start, self.length, element, node))
        if _local(element) in SEPARATING_TAGS:
            self.breaks.add(self.length)


def _word_spans(text: str, breaks: set[int]) -> list[tuple[int, int]]:
    """(start, end) of each word: a run of non-space characters (str.split's), also cut at `breaks`."""
    spans, start = [], None
    for k, char in enumerate(text + " "):  # the space ends the last word
        if start is not None and (char.isspace() or k in breaks):
            spans.append((start, k))
            start = None
        if start is None and not char.isspace():
            start = k
    return spans


def _add_block(parent: Any, before: Any, members: list[Any], out: list[_Block]) -> None:
    """Reads one run of content into a _Block, appended to `out` if it has words."""
    reader, root = _Reader(), _Node(None)
    reader.add(parent.text if before is None else before.tail)
    for member in members:
        reader.visit(member, root)
        reader.add(member.tail)
    text = "".join(reader.pieces)
    spans = _word_spans(text, reader.breaks)
    if not spans:
        return
    starts, ends = [s for s, _ in spans], [e for _, e in spans]

    def settle(node: _Node) -> None:
        for start, end, element, child in node.content:
            if child is not None:
                child.start, child.end = bisect_right(ends, start), bisect_left(starts, end)
            if child is not None and child.start < child.end:
                settle(child)
                node.children.append(child)
            else:  # an atom, or an element that encloses no word: kept whole
                space = text[start - 1 : start].isspace(), text[end : end + 1].isspace()
                node.atoms.append(_Atom(bisect_right(ends, start), element, *space))

    root.end = len(spans)
    settle(root)
    words = [text[s:e] for s, e in spans]
    # The block's outer whitespace stops at its outer atoms: the space between an atom and the words is the atom's.
    kept = [(start, end) for start, end, _, child in root.content if child not in root.children]
    lead_end = min([starts[0]] + [start for start, _ in kept if start <= starts[0]])
    trail_start = max([ends[-1]] + [end for start, end in kept if start >= ends[-1]])
    out.append(_Block(parent, before, members, root, words, text[:lead_end], text[trail_start:]))


# Projection onto the translation -----------------------------------------------------------------------------------
@dataclass
class _Target:
    """A block's translation: its words, the text between them (seps[j] precedes word j) and the links."""

    words: list[str]
    seps: list[str]
    from_source: list[list[int]]  # per source word, its target words
    to_source: list[list[int]]  # per target word, its source words
    gaps: list[int]  # per source gap (0..n), the target gap where an atom there goes


def _target(translation: str, links: list[tuple[int, int]], n: int) -> _Target:
    spans = _word_spans(translation, set())
    m = len(spans)
    words = [translation[s:e] for s, e in spans]
    seps = [""] + [translation[spans[j - 1][1] : spans[j][0]] for j in range(1, m)]
    from_source: list[list[int]] = [[] for _ in range(n)]
    to_source: list[list[int]] = [[] for _ in range(m)]
    for i, j in sorted({(i, j) for i, j in links}):  # lists from JSON too
        if 0 <= i < n and 0 <= j < m:  # a link past either end is ignored, not an error: the text still comes back
            from_source[i].append(j)
            to_source[j].append(i)
    return _Target(words, seps, from_source, to_source, [_gap(g, n, m, from_source) for g in range(n + 1)])


def _gap(g: int, n: int, m: int, from_source: list[list[int]]) -> int:
    """Where source gap g (after word g - 1) goes: after the target of the nearest aligned word before it, or before
    that of the nearest after it; the ends stay ends; with no links at all, the same fraction of the way."""
    if g == 0 or g == n:
        return 0 if g == 0 else m
    for distance in range(n):
        left, right = g - 1 - distance, g + distance
        if left >= 0 and from_source[left]:
            return max(from_source[left]) + 1
        if right < n and from_source[right]:
            return min(from_source[right])
    return round(g * m / n)


def _claims(kid: _Node, node: _Node, lo: int, hi: int, t: _Target) -> list[int]:
    """The target words in [lo, hi) that `kid` wants: those aligned to its words; if none, all of [lo, hi) when it
    enclosed all of its parent's words, else those of the nearest aligned source word, else the same share."""
    own = {j for i in range(kid.start, kid.end) for j in t.from_source[i] if lo <= j < hi}
    if own:
        return sorted(own)
    if (kid.start, kid.end) == (node.start, node.end):
        return list(range(lo, hi))
    n = len(t.from_source)
    for distance in range(1, n):
        for i in (kid.start - distance, kid.end - 1 + distance):
            near = [j for j in t.from_source[i] if lo <= j < hi] if 0 <= i < n else []
            if near:
                return near
    span, width = node.end - node.start, hi - lo
    first = lo + (kid.start - node.start) * width // span
    last = lo - (-(kid.end - node.start) * width // span)
    return list(range(min(first, hi - 1), max(min(last, hi), first + 1)))


def _place(node: _Node, lo: int, hi: int, t: _Target) -> tuple[list[tuple[_Node, int, int]], list[tuple[_Node, Any]]]:
    """Target spans for `node`'s children inside its span [lo, hi): disjoint, non-empty, each as close to the words
    it claims as can be (a dynamic programme over the children ordered by their claims' centre). Children left
    without room (more of them than words) come back as (child, host): it is wrapped around its nearest placed
    sibling, or with hi == lo (no words) around nothing."""
    kids, width = node.children, hi - lo
    if width == 0:
        return [], [(kid, None) for kid in kids]
    claims = [_claims(kid, node, lo, hi, t) for kid in kids]
    centres = [sum(c) / len(c) for c in claims]
    order = sorted(range(len(kids)), key=lambda k: (centres[k], k))
    kept = sorted(sorted(order, key=lambda k: (-len(claims[k]), k))[:width], key=order.index)
    best = [0.0] * (width + 1)  # best[p]: the best score of the children so far placed inside [lo, lo + p)
    choices = []
    for k in kept:
        kid, own = kids[k], set(claims[k])
        weights = [
            1.0 if j in own else -1.0 if any(not kid.start <= i < kid.end for i in t.to_source[j]) else _UNALIGNED
            for j in range(lo, hi)
        ]
        prefix = [0.0, *accumulate(weights)]
        scores, choice = [float("-inf")] * (width + 1), [-1] * (width + 1)  # choice[p]: the span's start, or -1
        open_best, open_start = float("-inf"), -1
        for p in range(1, width + 1):
            if best[p - 1] - prefix[p - 1] >= open_best:  # the later start on a tie: the shorter span
                open_best, open_start = best[p - 1] - prefix[p - 1], p - 1
            if open_best + prefix[p] > scores[p - 1]:
                scores[p], choice[p] = open_best + prefix[p], open_start
            else:
                scores[p] = scores[p - 1]
        best = scores
        choices.append(choice)
    placed, p = [], width
    for k, choice in zip(reversed(kept), reversed(choices)):
        while choice[p] < 0:
            p -= 1
        placed.append((kids[k], lo + choice[p], lo + p))
        p = choice[p]
    placed.reverse()
    nearest = lambda k: kids[min(kept, key=lambda h: (abs(centres[h] - centres[k]), h))]
    return placed, [(kids[k], nearest(k)) for k in order if k not in kept]


def _render(node: _Node, lo: int, hi: int, t: _Target) -> list[Any]:
    """`node`'s content over target words [lo, hi): words, the text between them, atoms and child elements (already
    filled), in order."""
    placed, squeezed = _place(node, lo, hi, t)
    starts = {s: (kid, e) for kid, s, e in placed}
    atoms: dict[int, list[_Atom]] = {}
    for atom in node.atoms:
        g = min(max(t.gaps[atom.gap], lo), hi)
        for _, s, e in placed:
            if s < g < e:  # not inside a child's span: the atom belongs here, at the nearer end of it
                g = s if g - s < e - g else e
        atoms.setdefault(g, []).append(atom)
    outer = node.element is None  # the block itself: at its ends, an atom's inner space is one space
    out: list[Any] = []
    j = lo
    while j < hi:
        if j > lo:
            out.extend(_between(atoms.get(j, []), t.seps[j], t.seps[j], inside=True))
        elif j in atoms:
            out.extend(_between(atoms[j], "", " " if outer else "", inside=False))
        if j in starts:
            kid, e = starts[j]
            element = _fill(kid.element, _render(kid, j, e, t))
            for other, host in squeezed:
                if host is kid:
                    element = _squeeze(other, element)
            out.append(element)
            j = e
        else:
            out.append(t.words[j])
            j += 1
    if hi in atoms:
        out.extend(_between(atoms[hi], " " if outer and hi > lo else "", "", inside=False))
    if hi == lo:  # no target words here: the children stay, empty
        out.extend(_fill(kid.element, _render(kid, lo, lo, t)) for kid, _ in squeezed)
    return out


def _squeeze(node: _Node, inner: Any) -> Any:
    """`node`'s element, left without words of its own, wrapped around `inner`: its atoms first, then its children
    each around the next (siblings nest here: there was no room to keep them apart, and none may be empty)."""
    for kid in reversed(node.children):
        inner = _squeeze(kid, inner)
    return _fill(node.element, [*(atom.element for atom in node.atoms), inner])


def _between(atoms: list[_Atom], before: str, after: str, *, inside: bool) -> list[Any]:
    """The atoms at one gap with the text around them: `before` where the source had space before them, `after`
    where it had space after them; `inside` (between two words: both are the translation's separator), `before` also
    where there was space on neither side, so that no text between words is lost."""
    if not atoms:
        return [before]
    space_before = atoms[0].space_before or (inside and not atoms[-1].space_after)
    return [before if space_before else "", *(atom.element for atom in atoms), after if atoms[-1].space_after else ""]


def _fill(element: Any, items: list[Any]) -> Any:
    """`element` (its tag and attributes kept) with `items` (strings and elements) as its new content."""
    for child in list(element):
        element.remove(child)
    element.text = None
    last: Any = None
    for item in items:
        if not isinstance(item, str):
            item.tail, last = None, item
            element.append(item)
        elif last is None:
            element.text = (element.text or "") + item or None
        else:
            last.tail = (last.tail or "") + item or None
    return element


def _put_back(block: _Block, translation: str, links: list[tuple[int, int]]) -> None:
    """Replaces the block's run of content in its parent with the translation, its inline elements and atoms put
    back."""
    parent, before = block.parent, block.before
    # Taken out first: rendering moves the elements, and the run's place must be known before.
    index = parent.index(block.members[0]) if block.members else 0 if before is None else parent.index(before) + 1
    for member in block.members:
        parent.remove(member)
    t = _target(translation, links, len(block.words))
    holder = _fill(etree.Element("holder"), [block.lead, *_render(block.root, 0, len(t.words), t), block.trail])
    if before is None:
        parent.text = holder.text
    else:
        before.tail = holder.text
    for k, child in enumerate(list(holder)):
        parent.insert(index + k, child)  # with its tail
