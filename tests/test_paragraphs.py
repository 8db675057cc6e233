"""Paragraphs split into sentences and rejoined with their spacing; sentences too long for the model cut into parts,
never truncated (issue 73, items 1 and 2)."""

import pytest
from conftest import run_cli

from transduce.documents import sentences as paragraphs


def test_sentence_spans_cover_every_sentence_without_whitespace():
    text = '  Dr. Smith went to Washington.  He said: "fine!" Then he left.\tOk '
    spans = paragraphs.sentence_spans(text, "en")
    got = [text[a:b] for a, b in spans]
    assert got == ["Dr. Smith went to Washington.", 'He said: "fine!"', "Then he left.", "Ok"]
    assert all(not text[a].isspace() and not text[b - 1].isspace() for a, b in spans)


def test_join_keeps_the_paragraphs_spacing_and_reports_offsets():
    line = "  One.  Two.\tThree. "
    spans = paragraphs.sentence_spans(line, "en")
    text, offsets = paragraphs.join(line, spans, ["Eins.", "Zwei.", "Drei."], "sentences")
    assert text == "  Eins.  Zwei.\tDrei. "
    assert [text[o : o + 5] for o in offsets] == ["Eins.", "Zwei.", "Drei."]
    # a line cut into parts ("lines"): the parts' translations joined by one space
    assert paragraphs.join("a b", [(0, 1), (2, 3)], ["A", "B"], "lines")[0] == "A B"


def test_sentences_that_touched_get_a_space_unless_their_script_writes_none():
    line = "你好。再见。"
    spans = [(0, 3), (3, 6)]
    assert paragraphs.join(line, spans, ["Hello.", "Goodbye."], "sentences")[0] == "Hello. Goodbye."
    assert paragraphs.join(line, spans, ["你好。", "再见。"], "sentences")[0] == "你好。再见。"


def test_units_skip_empty_lines_and_keep_line_numbers():
    units = paragraphs.units(["The cat sat. The dog ran.", "", "   ", "e"], "sentences", "en")
    assert [(u.line, u.text) for u in units] == [(0, "The cat sat."), (0, "The dog ran."), (3, "e")]
    assert [u.text for u in paragraphs.units(["The cat sat. The dog ran."], "lines", "en")] == [
        "The cat sat. The dog ran."
    ]


def test_cut_spans_prefers_clause_punctuation_then_spaces_then_pieces():
    fits = lambda t: len(t) <= 20
    text = "one two three four, five six seven eight"
    parts = [text[a:b] for a, b in paragraphs.cut_spans(text, fits, lambda t: list(t))]
    assert parts == ["one two three four,", "five six seven eight"]
    text = "one two three four five six seven"  # no punctuation: between words, every part fits
    parts = [text[a:b] for a, b in paragraphs.cut_spans(text, fits, lambda t: list(t))]
    assert " ".join(parts) == text and all(fits(p) for p in parts) and len(parts) == 2
    word = "x" * 50  # one word: between pieces (here characters), nothing lost
    parts = [word[a:b] for a, b in paragraphs.cut_spans(word, fits, lambda t: ["▁" + t[0], *t[1:]])]
    assert "".join(parts) == word and all(fits(p) for p in parts)


def _sentences(corpus, n: int) -> list[str]:
    """Toy test lines as sentences (capitalised, a full stop), none ending in a one-letter word ("a." reads as an
    initial, which ends no sentence)."""
    lines = (corpus / "test.en").read_text().splitlines()
    return [s.capitalize() + "." for s in lines if len(s.split()[-1]) > 1][:n]


def test_a_paragraph_is_its_sentences_translated_one_by_one(trained_run):
    from transduce.decoding.translator import Translator

    run, corpus = trained_run
    translator = Translator.from_run(run)
    sentences = _sentences(corpus, 6)
    lines = [" ".join(sentences[:3]), "", "  " + "  ".join(sentences[3:])]
    out = translator.translate(lines, split="sentences", beam=2)
    alone = translator.translate(sentences, beam=2)
    assert out == [" ".join(alone[:3]), "", "  " + "  ".join(alone[3:])]
    # "lines" (the default) takes each line as one sentence: other output for a paragraph
    assert translator.translate(lines, beam=2)[0] == translator.translate([lines[0]], beam=2)[0]


def test_a_line_longer_than_the_model_is_cut_never_truncated(trained_run):
    from transduce.decoding.translator import Translator

    run, _ = trained_run
    translator = Translator.from_run(run)
    max_len = translator.model.config.max_len
    long = " ".join(["red dog near the house"] * 120)  # 600 words, far past the model's 64 positions
    decoded = translator.decode_lines([long, "the dog"], beam=2)
    assert decoded.cut == [0] and decoded.n_cut == 1
    words = decoded.hypotheses[0][0].text.split()
    assert len(words) > 2 * max_len  # several parts' translations: a truncated source could give at most max_len
    assert decoded.hypotheses[1][0].text == translator.translate("the dog", beam=2)


def test_translate_cli_splits_paragraphs_and_says_what_was_cut(trained_run):
    run, corpus = trained_run
    sentences = _sentences(corpus, 4)
    text = f"{sentences[0]} {sentences[1]}\n\n{sentences[2]}\n" + " ".join(["dog"] * 600) + "\n"
    proc = run_cli("translate", str(run), "--beam", "2", "--split", "sentences", "--quiet", input=text)
    out = proc.stdout.split("\n")
    assert len(out) == 5 and out[1] == "" and out[-1] == ""
    assert "1 sentence(s) on 1 line(s)" in proc.stderr and "truncat" not in proc.stderr
    one_by_one = run_cli("translate", str(run), "--beam", "2", "--quiet", input="\n".join(sentences[:2]) + "\n")
    assert out[0] == " ".join(one_by_one.stdout.splitlines())


def test_sampling_draws_do_not_depend_on_the_split_for_one_sentence_lines(trained_run):
    from transduce.decoding.translator import Translator

    run, corpus = trained_run
    translator = Translator.from_run(run)
    lines = (corpus / "test.en").read_text().splitlines()[:5]
    lines.insert(2, "")
    drawn = translator.translate(lines, sampling_topk=0, seed=7, split="sentences")
    assert drawn == translator.translate(lines, sampling_topk=0, seed=7)  # each line seeded by its own index


def test_translate_document_keeps_each_formats_layout(trained_run):
    from transduce import ConfigError
    from transduce.decoding.translator import Translator

    run, corpus = trained_run
    translator = Translator.from_run(run)
    first, second = _sentences(corpus, 2)
    text = f"{first}  {second}\n\n{first}\n"
    out = translator.translate_document(text, "text", beam=2)
    alone = translator.translate([first, second], beam=2)
    assert out == f"{alone[0]}  {alone[1]}\n\n{alone[0]}\n"
    srt = f"1\n00:00:01,000 --> 00:00:02,000\n{first}\n\n2\n00:00:03,000 --> 00:00:04,500\n{second}\n"
    done = translator.translate_document(srt, "srt", beam=2).split("\n")
    assert done[:2] == ["1", "00:00:01,000 --> 00:00:02,000"] and done[4:6] == ["2", "00:00:03,000 --> 00:00:04,500"]
    assert done[2] == alone[0] and done[6] == alone[1]
    with pytest.raises(ConfigError, match="nbest"):
        translator.translate_document(srt, "srt", nbest=2)


def test_translate_cli_reads_documents_by_their_extension(trained_run, tmp_path):
    run, corpus = trained_run
    first, second = _sentences(corpus, 2)
    srt = tmp_path / "film.srt"
    srt.write_text(
        f"1\r\n00:00:01,000 --> 00:00:02,000\r\n{first}\r\n\r\n2\r\n00:00:03,5 --> 00:00:04,000\r\n{second}\r\n"
    )
    out = run_cli("translate", str(run), "--input", str(srt), "--beam", "2", "--quiet").stdout
    # text mode would turn \r\n into \n: compare the lines that are not cue text
    lines = out.split("\n")
    assert lines[:2] == ["1", "00:00:01,000 --> 00:00:02,000"] and lines[4:6] == ["2", "00:00:03,5 --> 00:00:04,000"]
    html = tmp_path / "page.html"
    html.write_text(f'<p>{first} <a href="/x" title="t">{second}</a></p><pre>{first}</pre>')
    page = run_cli("translate", str(run), "--input", str(html), "--beam", "2", "--quiet").stdout
    assert page.count('<a href="/x" title="t">') == 1 and f"<pre>{first}</pre>" in page
    bad = tmp_path / "bad.xml"
    bad.write_text("<doc>\n<p>a <b>dog</p>\n</doc>\n")
    proc = run_cli("translate", str(run), "--input", str(bad), "--quiet", check=False)
    assert proc.returncode == 1 and f"{bad}:2: malformed XML" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    refused = run_cli("translate", str(run), "--input", str(html), "--nbest", "2", check=False)
    assert refused.returncode == 1 and "--nbest" in refused.stderr
