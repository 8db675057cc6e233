"""Constituency trees in Penn Treebank bracket notation, and their linearization for a sequence-to-sequence parser.

The paper's §6.3 parses English by translating a sentence into a linearized tree, following Vinyals et al. (2015),
"Grammar as a Foreign Language". This module holds everything about trees that needs no model:

- reading the bracket format (one tree per line, as in `gum_const/`; a tree may also span several lines, as in the
  Treebank's own .mrg files), with errors that name the file and line;
- normalization for training: -NONE- elements and the constituents they leave empty are removed, function tags and
  indices are stripped (NP-SBJ-1 -> NP), the root gets one label (ROOT);
- linearization into target tokens and its exact inverse, and the closed target vocabulary.

Words are kept in the treebank's escaped form: round brackets inside words are written -LRB- / -RRB- (the Treebank's
convention, which GUM follows too: `Spouse-LRB-s-RRB-`), because a bare bracket would break the notation.
`escape_word` turns raw text into that form on the way in and `unescape_word` turns it back on the way out.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Target-side special tokens, in the id order the project's tokenizer fixes (PAD 0, UNK 1, BOS 2, EOS 3), so that a
# parsing model's target vocabulary shares the search's special ids.
SPECIALS: tuple[str, ...] = ("<pad>", "<unk>", "<s>", "</s>")
CLOSE = ")"
OPEN_PREFIX = "("
# The single preterminal symbol of Vinyals et al. (2015), who normalized all POS tags to "XX".
XX = "XX"
ROOT = "ROOT"

_TOKEN = re.compile(r"\(([^\s()]*)|\)|[^\s()]+")


class TreeError(ValueError):
    """A malformed tree or tree file. `str()` reads `FILE:LINE: what is wrong` when the place is known, so the
    command line can print it as one line."""

    def __init__(self, reason: str, *, source: str | None = None, line: int | None = None) -> None:
        self.reason, self.source, self.line = reason, source, line
        place = f"{source}:{line}: " if source is not None and line is not None else f"{source}: " if source else ""
        super().__init__(place + reason)

    def at(self, source: str, line: int) -> TreeError:
        """The same error, placed in a file (for errors raised where the file is not known)."""
        return TreeError(self.reason, source=source, line=line)


@dataclass(eq=True)
class Tree:
    """A constituent: a label and its children. A child is a `Tree` or a word (`str`); a preterminal is a tree whose
    only child is a word (its label is the POS tag). Trees are treated as immutable by every function here."""

    label: str
    children: list[Tree | str] = field(default_factory=list)

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def subtrees(self) -> Iterator[Tree]:
        """Every constituent, preterminals included, in depth-first (pre-)order."""
        stack: list[Tree] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed([c for c in node.children if isinstance(c, Tree)]))

    def preterminals(self) -> Iterator[Tree]:
        return (node for node in self.subtrees() if node.is_preterminal)

    def __str__(self) -> str:
        return to_string(self)


# ---------------------------------------------------------------------------------------------------------- reading


def parse_trees(text: str, *, source: str = "<string>", line: int = 1, allow_empty: bool = False) -> list[Tree]:
    """All top-level trees in `text` (usually one). `line` is the line number where `text` starts in `source`.

    A label is what follows "(" directly (so "( (S" has an empty root label, as in the Treebank, and "(S(NP" reads
    like "(S (NP"), the same reading as EVALB's. A constituent holds either one word (a preterminal) or constituents.
    With `allow_empty`, constituents without words ("(X)") are accepted, as EVALB accepts them (it drops them)."""
    stack: list[Tree] = []
    roots: list[Tree] = []
    tree_start = 0

    def fail(reason: str, pos: int) -> TreeError:
        return TreeError(reason, source=source, line=line + text.count("\n", 0, pos))

    for m in _TOKEN.finditer(text):
        tok, pos = m.group(0), m.start()
        if tok.startswith("("):
            node = Tree(m.group(1), [])
            if stack:
                parent = stack[-1]
                if parent.children and isinstance(parent.children[0], str):
                    raise fail(
                        f"word {parent.children[0]!r} outside a preterminal: ({parent.label} ...) also holds "
                        "a constituent; each word needs its own (TAG word) bracket",
                        pos,
                    )
                parent.children.append(node)
            else:
                tree_start = pos
            stack.append(node)
        elif tok == CLOSE:
            if not stack:
                raise fail("unbalanced brackets: ')' closes nothing", pos)
            node = stack.pop()
            if not node.children and not allow_empty:
                raise fail(
                    f"empty tree ({node.label})" if not stack else f"empty constituent ({node.label}): it has no words",
                    pos,
                )
            if not stack:
                roots.append(node)
        else:
            if not stack:
                raise fail(f"word {tok!r} outside any bracket", pos)
            parent = stack[-1]
            if parent.children:
                raise fail(
                    f"word {tok!r} outside a preterminal: ({parent.label} ...) already has a child; "
                    "each word needs its own (TAG word) bracket",
                    pos,
                )
            parent.children.append(tok)
    if stack:
        raise fail(f"unbalanced brackets: {len(stack)} bracket(s) still open at the end of the tree", tree_start)
    return roots


def parse_tree(text: str, *, source: str = "<string>", line: int = 1) -> Tree:
    """Exactly one tree from `text` (see `parse_trees`)."""
    trees = parse_trees(text, source=source, line=line)
    if len(trees) != 1:
        what = "empty tree: no brackets" if not trees else f"{len(trees)} trees where one was expected"
        raise TreeError(what, source=source, line=line)
    return trees[0]


def read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for every line of a UTF-8 file, plain or .gz; invalid UTF-8 is a TreeError."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    text = raw.decode("utf-8").rstrip("\r\n")
                    yield number, text.removeprefix("\ufeff") if number == 1 else text  # a byte-order mark is no word
                except UnicodeDecodeError as e:
                    raise TreeError(f"invalid UTF-8 ({e.reason})", source=str(path), line=number) from None
    except OSError as e:
        raise TreeError(f"cannot read: {e.strerror or e}", source=str(path)) from None


def _tree_chunks(path: str | Path) -> Iterator[tuple[int, str]]:
    """(first line, text) of each tree: lines are joined while brackets stay open, so a tree may span lines (its
    continuation lines indented, as in the Penn Treebank's files). A line that starts with "(" at its first column
    while a tree is open begins a tree of its own: the open one lacks a ")", and is refused naming its first line
    (joined, it would swallow the trees up to the next extra ")"). Blank lines between trees are skipped. A malformed
    chunk is passed on whole for the parser to report."""
    chunk: list[str] = []
    start, depth = 0, 0
    for number, text in read_lines(path):
        if not chunk and not text.strip():
            continue
        if chunk and text.startswith("("):
            missing = f"{depth} closing bracket{'s' * (depth > 1)} missing"
            raise TreeError(
                f"unbalanced brackets: the tree is not closed ({missing}) where line {number} begins a new one",
                source=str(path),
                line=start,
            )
        if not chunk:
            start = number
        chunk.append(text)
        depth += text.count("(") - text.count(")")
        if depth <= 0:
            yield start, "\n".join(chunk)
            chunk, depth = [], 0
    if chunk:
        yield start, "\n".join(chunk)


def read_trees(path: str | Path, *, normalized: bool = False) -> list[Tree]:
    """The trees of a bracket file, in order (one per line, or spanning lines). With `normalized`, each tree goes
    through `normalize`; errors of either step name the file and the tree's line."""
    trees = []
    for start, text in _tree_chunks(path):
        found = parse_trees(text, source=str(path), line=start)
        if len(found) != 1:
            raise TreeError(f"{len(found)} trees on one line; expected one tree per line", source=str(path), line=start)
        try:
            trees.append(normalize(found[0]) if normalized else found[0])
        except TreeError as e:
            raise e.at(str(path), start) from None
    if not trees:
        raise TreeError("no trees in the file", source=str(path))
    return trees


# ------------------------------------------------------------------------------------------------------- writing


def escape_word(word: str) -> str:
    """A raw word in the treebank's form: round brackets become -LRB- / -RRB- (Penn Treebank convention)."""
    return word.replace("(", "-LRB-").replace(")", "-RRB-")


def unescape_word(word: str) -> str:
    """The inverse of `escape_word`: -LRB- / -RRB- become round brackets again (for plain-text output)."""
    return word.replace("-LRB-", "(").replace("-RRB-", ")")


def to_string(tree: Tree) -> str:
    """The tree in one-line PTB notation. Words are escaped (a bracket in a word would break the notation); an empty
    root label is written "((S ...))" as in the Treebank's files."""
    parts: list[str] = []

    def write(node: Tree) -> None:
        if node.is_preterminal:
            parts.append(f"({node.label} {escape_word(node.children[0])})")  # type: ignore[arg-type]
            return
        parts.append("(" + node.label + (" " if node.label else ""))
        for i, child in enumerate(node.children):
            if i:
                parts.append(" ")
            if isinstance(child, Tree):
                write(child)
            else:  # a word beside constituents cannot come from the reader; keep it readable anyway
                parts.append(escape_word(child))
        parts.append(")")

    write(tree)
    return "".join(parts)


def words(tree: Tree) -> list[str]:
    """The words of the tree, in order, in the treebank's (escaped) form."""
    return [node.children[0] for node in tree.preterminals()]  # type: ignore[misc]


def tags(tree: Tree) -> list[str]:
    """The POS tags (preterminal labels), in word order."""
    return [node.label for node in tree.preterminals()]


# ------------------------------------------------------------------------------------------------- normalization


def strip_function_tags(label: str) -> str:
    """NP-SBJ-1 -> NP, NP=2 -> NP, S-TPC-2 -> S: the category before the first '-' or '='. Labels that begin with
    '-' are whole symbols (-NONE-, -LRB-, -RRB-) and stay as they are."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


def _strip(node: Tree) -> Tree | None:
    """`node` without -NONE- elements, without the constituents left empty by their removal, and without function
    tags; None when nothing is left."""
    if node.is_preterminal:
        return None if node.label == "-NONE-" else Tree(strip_function_tags(node.label), list(node.children))
    kept: list[Tree | str] = [
        c for c in (_strip(child) for child in node.children if isinstance(child, Tree)) if c is not None
    ]
    return Tree(strip_function_tags(node.label), kept) if kept else None


def normalize(tree: Tree, *, root: str = ROOT) -> Tree:
    """The tree as the parser is trained on it: -NONE- elements and the constituents they leave empty removed,
    function tags and indices stripped, and one root label (`root`). A root labelled "", TOP or ROOT (the Treebank's
    empty outer bracket, GUM's ROOT) is relabelled; any other root is wrapped in a new `root` constituent."""
    stripped = _strip(tree)
    if stripped is None:
        raise TreeError("the tree has no words once -NONE- elements are removed")
    if stripped.label in ("", "TOP", ROOT, root) and not stripped.is_preterminal:
        return Tree(root, stripped.children)
    return Tree(root, [stripped])


# ------------------------------------------------------------------------------------------------- linearization


def linearize(tree: Tree, *, keep_tags: bool = True) -> list[str]:
    """Target tokens of a tree, depth first: "(LABEL" opens a constituent, ")" closes it, and each preterminal is one
    token, its POS tag (or "XX" with `keep_tags=False`, as Vinyals et al. 2015).

    Departure from Vinyals et al. (2015), who write ")LABEL": the closing bracket is unlabelled, since the open
    constituent it closes is known, so the label would be a token the decoder can get wrong. The words are not
    in the target: each leaf token stands for the next input word, which is what lets `delinearize` rebuild
    the tree exactly and lets a constrained search count words (decoding/constraints.py)."""
    out: list[str] = []
    stack: list[Tree | str] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, str):  # the CLOSE marker pushed below
            out.append(item)
        elif item.is_preterminal:
            out.append(item.label if keep_tags else XX)
        else:
            if not item.children:
                raise TreeError(f"empty constituent ({item.label}) cannot be linearized")
            if any(isinstance(c, str) for c in item.children):
                raise TreeError(f"({item.label} ...) mixes words and constituents")
            out.append(OPEN_PREFIX + item.label)
            stack.append(CLOSE)
            stack.extend(reversed(item.children))
    return out


def delinearize(tokens: Sequence[str], sentence: Sequence[str]) -> Tree:
    """The tree that `linearize` turned into `tokens`, with `sentence` (its words, in order) as the leaves: the exact
    inverse, `delinearize(linearize(t), words(t)) == t`. Raises TreeError when the tokens do not form one tree over
    exactly these words (a constrained search never produces such tokens)."""
    stack: list[Tree] = []
    result: Tree | None = None
    used = 0
    for i, tok in enumerate(tokens):
        if result is not None:
            raise TreeError(f"token {i} ({tok!r}) after the tree is complete")
        if tok == CLOSE:
            if not stack:
                raise TreeError(f"token {i}: ')' closes nothing")
            node = stack.pop()
            if not node.children:
                raise TreeError(f"token {i}: ')' closes the empty constituent ({node.label}")
            result = None if stack else node
            continue
        if tok.startswith(OPEN_PREFIX):
            node = Tree(tok[len(OPEN_PREFIX) :], [])
        elif used == len(sentence):
            raise TreeError(f"token {i} ({tok!r}): more leaves than the {len(sentence)} words")
        else:
            node, used = Tree(tok, [sentence[used]]), used + 1
        if stack:
            stack[-1].children.append(node)
        elif node.is_preterminal:
            result = node  # the whole tree is one preterminal
        if not node.is_preterminal:
            stack.append(node)
    if stack:
        raise TreeError(f"the tokens end with {len(stack)} constituent(s) open")
    if result is None:
        raise TreeError("no tree in the tokens")
    if used != len(sentence):
        raise TreeError(f"{used} leaves for {len(sentence)} words")
    return result


def build_vocab(trees: Iterable[Tree], *, keep_tags: bool = True) -> list[str]:
    """The closed target vocabulary: SPECIALS (ids 0-3), ")", then every "(LABEL" and every leaf token seen in
    `trees`, each group sorted, so the same trees always give the same ids."""
    opens: set[str] = set()
    leaves: set[str] = set()
    for tree in trees:
        for tok in linearize(tree, keep_tags=keep_tags):
            if tok.startswith(OPEN_PREFIX):
                opens.add(tok)
            elif tok != CLOSE:
                leaves.add(tok)
    return [*SPECIALS, CLOSE, *sorted(opens), *sorted(leaves)]
