"""documents/markup.py: HTML and XML translated with their markup kept, on fake translators with exact links."""

import random
from collections import Counter

import pytest

etree = pytest.importorskip("lxml.etree")
from lxml import html as lxml_html

from transduce.data import DataError
from transduce.documents.markup import translate_markup


class Reverser:
    """Translates a block by reversing and upper-casing its words, with exact links; records its calls."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, blocks: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
        self.calls.append(list(blocks))
        out = []
        for block in blocks:
            words = block.split()
            n = len(words)
            out.append((" ".join(w.upper() for w in reversed(words)), [(i, n - 1 - i) for i in range(n)]))
        return out


def table(entries: dict[str, tuple[str, list[tuple[int, int]]]]):
    """A translator that knows a few blocks by heart."""
    return lambda blocks: [entries[block] for block in blocks]


def parse(text: str, kind: str):
    """The output parsed again: XML strictly (a recovered parse would hide a broken output), HTML as a fragment."""
    if kind == "xml":
        return etree.fromstring(text.encode(), etree.XMLParser(resolve_entities=False))
    return lxml_html.fragment_fromstring(text, create_parent="div")


def tags(root) -> Counter:
    """The multiset of elements: name and attributes."""
    return Counter((e.tag, tuple(sorted(e.attrib.items()))) for e in root.iter() if isinstance(e.tag, str))


def to_xml(text: str) -> str:
    """An HTML fragment made strictly parsable as XML (void elements closed), for the well-formedness check."""
    return etree.tostring(lxml_html.fragment_fromstring(text, create_parent="div"), encoding="unicode", method="xml")


def test_a_tag_lands_around_the_target_words_aligned_to_its_source_words():
    translate = table({"the red car": ("la voiture rouge", [(0, 0), (1, 2), (2, 1)])})
    assert translate_markup("<p>the <b>red</b> car</p>", "html", translate) == "<p>la voiture <b>rouge</b></p>"
    assert translate_markup('<p>the <a href="x">red car</a></p>', "html", translate) == (
        '<p>la <a href="x">voiture rouge</a></p>'
    )


def test_nested_tags_stay_nested():
    out = translate_markup("<p>a <b>big <i>red</i></b> car</p>", "html", Reverser())
    assert out == "<p>CAR <b><i>RED</i> BIG</b> A</p>"
    out = translate_markup("<p><b><i>deep</i> words</b> here</p>", "html", Reverser())
    assert out == "<p>HERE <b>WORDS <i>DEEP</i></b></p>"


def test_tags_and_attributes_come_back_once_each_and_the_output_is_well_formed():
    source = (
        '<div class="c"><h1 id="t">A <em>fine</em> title</h1>\n<p>Some <a href="/x" title="T">linked <b>bold '
        '<i>and</i> italic</b></a> text, <span style="color:red">red</span> too.<br>Next<img src="i.png" alt="A">'
        " line.</p>\n<table><tr><td>cell <u>one</u></td><th>two</th></tr></table></div>"
    )
    out = translate_markup(source, "html", Reverser())
    assert tags(parse(out, "html")) == tags(parse(source, "html"))
    etree.fromstring(to_xml(out))  # nests properly


def test_untranslated_subtrees_are_copied_byte_for_byte():
    kept = [
        "<code>x &lt; y &amp;&amp; z</code>",
        '<span translate="no">Keep <b>this</b> as is</span>',
        '<em class="brand notranslate big">ACME <i>Widget</i></em>',
        "<pre>  two\n  lines  </pre>",
        '<script>if (a < b) { f("<p>"); }</script>',
        "<style>p > b { color: red }</style>",
    ]
    source = (
        f"<p>Run {kept[0]} now, {kept[1]} and {kept[2]} too.</p>\n{kept[3]}\n<div>{kept[4]}{kept[5]}</div>"
        '<p translate="no">A whole <b>block</b> kept</p>'
    )
    out = translate_markup(source, "html", Reverser())
    for piece in [*kept, '<p translate="no">A whole <b>block</b> kept</p>']:
        assert piece in out
    assert "RUN" in out and "Keep" in out and "KEEP" not in out and "ACME" in out and "WIDGET" not in out


def test_untranslated_subtrees_in_xml_and_its_translate():
    source = (
        '<doc xmlns:its="http://www.w3.org/2005/11/its"><p>Call <code>f(&amp;x)</code> and <term its:translate="no">'
        'Foo <x a="1"/></term> now</p><p translate="no">Whole <b>one</b></p></doc>'
    )
    out = translate_markup(source, "xml", Reverser())
    root, original = parse(out, "xml"), parse(source, "xml")
    for path in ("p/code", "p/term", "p[@translate]"):
        assert etree.tostring(root.find(path), with_tail=False) == etree.tostring(original.find(path), with_tail=False)
    assert root.find("p").text.startswith("NOW AND")


def test_the_text_without_tags_is_the_translation_of_the_text_without_tags():
    tagged = '<p>The <b>quick <i>brown</i></b> fox <a href="#">jumps</a> over the <u>lazy dog</u>.</p>'
    plain = "<p>The quick brown fox jumps over the lazy dog.</p>"
    words = plain[3:-4].split()
    order = [3, 1, 2, 0, 4, 8, 5, 7, 6]  # target word j is source word order[j]
    translate = table(
        {" ".join(words): (" ".join(words[i].upper() for i in order), [(i, j) for j, i in enumerate(order)])}
    )
    out_tagged, out_plain = translate_markup(tagged, "html", translate), translate_markup(plain, "html", translate)
    assert parse(out_tagged, "html").text_content() == parse(out_plain, "html").text_content()
    assert (
        parse(out_tagged, "html").find(".//i").text == "BROWN"
        and parse(out_tagged, "html").find(".//a").text == "JUMPS"
    )


def test_malformed_xml_is_refused_naming_the_file_and_line():
    with pytest.raises(DataError) as caught:
        translate_markup("<doc>\n  <p>one</p>\n  <p>two</b>\n</doc>\n", "xml", Reverser(), name="doc.xml")
    message = str(caught.value)
    assert message.startswith("doc.xml:3: malformed XML: ") and "\n" not in message
    with pytest.raises(DataError, match=r"^in\.xml:1: malformed XML"):
        translate_markup("", "xml", Reverser(), name="in.xml")


def test_empty_blocks_are_not_sent_and_all_blocks_go_in_one_call():
    translate = Reverser()
    source = "<div><p></p><p>  \n</p><p><img src=x></p><p><code>only code</code></p><p>Hi there</p><li>Two</li></div>"
    out = translate_markup(source, "html", translate)
    assert translate.calls == [["Hi there", "Two"]]
    assert "<p></p><p>  \n</p><p><img src=x></p>" in out.replace('"x"', "x") and "<p>THERE HI</p>" in out
    no_words = Reverser()
    assert translate_markup("<p> <br> </p>", "html", no_words) == "<p> <br> </p>" and no_words.calls == []


def test_a_tag_whose_words_are_unaligned_still_appears_around_something():
    whole = table({"hello world": ("bonjour le monde", [])})
    assert translate_markup("<p><b>hello world</b></p>", "html", whole) == "<p><b>bonjour le monde</b></p>"
    part = table({"the very big house": ("das große Haus", [(0, 0), (2, 1), (3, 2)])})
    out = translate_markup("<p>the <b>very</b> big house</p>", "html", part)
    assert parse(out, "html").text_content() == "das große Haus" and parse(out, "html").find(".//b").text in {
        "das",
        "große",
    }
    none = table({"a b c d": ("w x y z", [])})  # no links at all: the same share of the way
    assert translate_markup("<p>a b <i>c d</i></p>", "html", none) == "<p>w x <i>y z</i></p>"


def test_more_tags_than_target_words_are_kept_nested_and_not_empty():
    one = table({"a b c": ("x", [(0, 0), (1, 0), (2, 0)])})
    out = translate_markup("<p><b>a</b> <i>b</i> <u>c</u></p>", "html", one)
    root = parse(out, "html")
    assert tags(root) == tags(parse("<p><b>a</b> <i>b</i> <u>c</u></p>", "html"))
    assert all(e.text_content() == "x" for e in root.iter("b", "i", "u"))


def test_crossing_links_give_disjoint_tags():
    crossing = table({"a b c d": ("w x y z", [(0, 0), (0, 2), (2, 1), (3, 3)])})
    out = translate_markup("<p><b>a b</b> <i>c</i> d</p>", "html", crossing)
    root = parse(out, "html")
    b, i = root.find(".//b"), root.find(".//i")
    assert b.text and i.text and b.find("i") is None and i.find("b") is None and root.text_content() == "w x y z"


def test_void_elements_stay_between_the_words_they_stood_between():
    same = lambda blocks: [(b.upper(), [(k, k) for k in range(len(b.split()))]) for b in blocks]
    assert translate_markup("<p>one<br>two <img src=a.png> three</p>", "html", same) == (
        '<p>ONE <br>TWO <img src="a.png"> THREE</p>'
    )
    assert translate_markup('<p>see <a href="h"><img src=i.png></a> here</p>', "html", same) == (
        '<p>SEE <a href="h"><img src="i.png"></a> HERE</p>'
    )


def test_html_fragments_stay_fragments_and_documents_keep_their_structure():
    assert translate_markup("  Just <b>bold</b> text\n", "html", Reverser()) == "  TEXT <b>BOLD</b> JUST\n"
    assert translate_markup("<li>a b</li>", "html", Reverser()) == "<li>B A</li>"
    document = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n  <title>My page</title>\n'
        "  <script>var x = 1;</script>\n</head>\n<body>\n  <ul>\n    <li>One item</li>\n    <li>Two</li>\n  </ul>\n"
        "</body>\n</html>\n"
    )
    out = translate_markup(document, "html", Reverser())
    assert out == document.replace("My page", "PAGE MY").replace("One item", "ITEM ONE").replace("Two", "TWO")


def test_entities_round_trip():
    same = lambda blocks: [(b, [(k, k) for k in range(len(b.split()))]) for b in blocks]
    assert translate_markup("<p>fish &amp; chips &lt;3 caf&eacute;&#x21;</p>", "html", same) == (
        "<p>fish &amp; chips &lt;3 café!</p>"
    )
    # A no-break space parts words (str.split): between words, the translation's own separator replaces it.
    assert translate_markup("<p>a&nbsp;b <code>c&nbsp;d</code></p>", "html", same) == "<p>a b <code>c\xa0d</code></p>"
    xml = '<!DOCTYPE d [\n<!ENTITY co "Acme">\n]>\n<d><p>At &co; we &amp; &lt;you&gt;</p></d>'
    assert translate_markup(xml, "xml", same) == xml


def test_xml_blocks_are_the_elements_with_text_of_their_own():
    translate = Reverser()
    source = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<!-- intro -->\n<book>\n  <title>Hello world</title>\n  <chapter>\n'
        '    <para>Some <emph role="x">nice</emph> text<?pi x?></para>\n    <!-- c -->\n  </chapter>\n</book>\n'
    )
    out = translate_markup(source, "xml", translate)
    assert translate.calls == [["Hello world", "Some nice text"]]
    assert out == source.replace("Hello world", "WORLD HELLO").replace(
        'Some <emph role="x">nice</emph> text<?pi x?>', 'TEXT <emph role="x">NICE</emph> SOME<?pi x?>'
    )


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown markup kind"):
        translate_markup("<p>x</p>", "svg", Reverser())
    with pytest.raises(ValueError, match="1 blocks"):
        translate_markup("<p>x</p>", "html", lambda blocks: [])


INLINE = ["b", "i", "em", "strong", "span", "u", "sub"]  # not <a>: HTML splits an <a> in an <a>


def random_block(rng: random.Random, words: list[str], depth: int = 0) -> str:
    """Words with random, properly nested inline tags (some empty-of-words ones, some void) around runs of them."""
    out, k = [], 0
    while k < len(words):
        roll = rng.random()
        if roll < 0.3 and depth < 3:
            size = rng.randint(1, min(4, len(words) - k))
            tag = rng.choice(INLINE)
            inner = random_block(rng, words[k : k + size], depth + 1)
            out.append(f'<{tag} data-n="{rng.randint(0, 9)}">{inner}</{tag}>')
            k += size
        elif roll < 0.35:
            out.append(rng.choice(["<br>", '<img src="p.png">', "<!-- note -->", "<span></span>"]))
        else:
            out.append(words[k])
            k += 1
    return " ".join(out)


def random_translator(rng: random.Random):
    """Per block a random permutation of its words (renamed so every target word is unique), a word sometimes
    dropped or doubled, and a third of the links left out."""

    def translate(blocks: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
        out = []
        for block in blocks:
            n = len(block.split())
            sources = [i for i in range(n) for _ in range(rng.choice([0, 1, 1, 1, 2]))]
            rng.shuffle(sources)
            words = [f"T{j}" for j in range(len(sources))]
            out.append((" ".join(words), [(i, j) for j, i in enumerate(sources) if rng.random() < 0.67]))
        return out

    return translate


@pytest.mark.parametrize("seed", range(40))
def test_random_documents_keep_tags_text_and_whole_words(seed):
    rng = random.Random(seed)
    paragraphs = [random_block(rng, [f"w{k}" for k in range(rng.randint(1, 12))]) for _ in range(3)]
    source = "<div>\n" + "\n".join(f"<p>{p}</p>" for p in paragraphs) + "\n</div>"
    out = translate_markup(source, "html", random_translator(rng))
    root, original = parse(out, "html"), parse(source, "html")
    assert tags(root) == tags(original)
    etree.fromstring(to_xml(out))
    for p, p_source in zip(root.iter("p"), original.iter("p")):
        pieces = [p.text or ""] + [piece for e in p.iterdescendants() for piece in (e.text or "", e.tail or "")]
        words = [w for piece in pieces for w in piece.split() if w != "note"]
        assert all(w.startswith("T") and w[1:].isdigit() for w in words)  # no tag cut a word in two
        assert p.text_content().split() == [f"T{j}" for j in range(len(words))]
        if words:  # no tag emptied (the source has some: <span></span>)
            assert empty_inline(p) == empty_inline(p_source)


def empty_inline(root) -> Counter:
    return Counter(
        (e.tag, tuple(e.attrib.items())) for e in root.iter(*INLINE) if len(e) + len(e.text_content().split()) == 0
    )


def test_the_benchmark_scores_an_exact_translator_perfectly():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "markup_eval.py"
    spec = importlib.util.spec_from_file_location("markup_eval", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sentences = [f"a man number {k} rides a bike & waves at the <camera>" for k in range(20)]
    translate = Reverser()
    first = bench.evaluate(sentences, translate, seed=1, ref_align=None)
    assert len(translate.calls) == 1 and first["figures"]["spans_cover"] is None
    reversal = [
        " ".join(f"{i}-{n - 1 - i}" for i in range(n))
        for n in (len(r["plain_source"].split()) for r in first["records"])
    ]
    figures = bench.evaluate(sentences, Reverser(), seed=1, ref_align=reversal)["figures"]
    assert figures["tags_kept"] == figures["text_kept"] == figures["spans_cover"] == 1.0
    assert figures["spans_judged"] > 10
    wrong = [" ".join(f"{i}-{i}" for i in range(len(r["plain_source"].split()))) for r in first["records"]]
    assert bench.evaluate(sentences, Reverser(), seed=1, ref_align=wrong)["figures"]["spans_cover"] < 1.0


def test_xhtml_read_as_xml_is_written_as_xml():
    source = (
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">\n'
        '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>A title</title></head>'
        "<body><p>Hi <b>there</b><br/></p></body></html>"
    )
    out = translate_markup(source, "xml", Reverser())  # libxml2 alone would add a <meta> and write <br />
    assert out == source.replace("A title", "TITLE A").replace("Hi <b>there</b>", "<b>THERE</b> HI")
