"""Word alignments from attention (issue 73, item 3): Pharaoh links over the raw words, the translation unchanged by
asking for them, the same links from the torch engine and from CTranslate2."""

import numpy as np
import pytest
from conftest import run_cli

from transduce.documents import words


def test_pieces_map_to_the_words_that_hold_them():
    assert words.piece_words(["▁The", "▁ca", "t", "▁sat", "."]) == [0, 1, 1, 2, 2]
    assert words.piece_words(["ca", "t", "▁sat"]) == [0, 0, 1]  # a part starting inside a word


def weights(*rows: list[float]) -> np.ndarray:
    return np.array(rows, dtype=np.float32)


def test_links_come_from_the_attention_mass_of_whole_words():
    source, target = ["▁a", "b", "▁c"], ["▁X", "▁Y", "y"]  # source words: ab 0, c 1; target words: X 0, Yy 1
    # X: piece "▁c" alone weighs most (0.4), but word ab holds 0.6; Yy: "▁Y" points at c and "y" at a, their mean
    # at c (0.55 against 0.45): one link per target word, not one per piece
    attention = weights([0.25, 0.35, 0.4], [0.1, 0.1, 0.8], [0.4, 0.3, 0.3])
    assert words.word_links(source, target, attention, rule="target") == [(0, 0), (1, 1)]
    # the default reads each piece alone: X to c, Y to c, y to ab
    assert words.word_links(source, target, attention) == [(0, 1), (1, 0), (1, 1)]


def test_the_rules_read_one_direction_both_or_grow_them_together():
    source, target = ["▁a", "▁b", "▁c"], ["▁X", "▁Y"]
    attention = weights([0.7, 0.2, 0.1], [0.6, 0.3, 0.05])  # both target words weigh source word a most
    assert words.word_links(source, target, attention, rule="target") == [(0, 0), (0, 1)]
    # each source word's heaviest target word: a X, b Y, c X; only (a, X) is the best both ways
    assert words.word_links(source, target, attention, rule="both") == [(0, 0)]
    # grow-diag-final-and from (a, X): (a, Y), (b, Y) and then (c, X) join words not yet linked, next to a link
    assert words.word_links(source, target, attention, rule="grow") == [(0, 0), (0, 1), (1, 1), (2, 0)]


def test_a_tag_and_the_end_of_sentence_are_no_word():
    pieces = ["▁runs", "▁near", "▁tree"]  # the model read [tag, ▁runs, ▁near, ▁tree, EOS]
    attention = weights([0.9, 0.02, 0.05, 0.03, 0], [0.1, 0.1, 0.1, 0.7, 0], [0.1, 0.1, 0.1, 0.2, 0.5])
    assert words.word_links(pieces, ["▁A", "▁B"], attention, first=1) == [(2, 1)]  # A's piece points at the tag
    assert words.word_links(pieces, ["▁A", "▁B"], attention, first=1, rule="target") == [(1, 0), (2, 1)]
    # C weighs the end of sentence (the last column) most: it is no word, C's heaviest word is tree
    assert words.word_links(pieces, ["▁A", "▁B", "▁C"], attention, first=1) == [(2, 1), (2, 2)]
    assert words.word_links(pieces, [], np.zeros((0, 5)), first=1) == []


def test_a_units_links_move_into_its_lines_numbering():
    line = "Hi there. The cat sat."
    target = "Salut. Le chat"
    links = words.relocate(
        [(0, 0), (2, 1)], ("The cat sat.", 10, words.word_offsets(line)), ("Le chat", 7, words.word_offsets(target))
    )
    assert links == [(2, 1), (4, 2)]
    assert words.pharaoh(links) == "2-1 4-2"


def _in_range(source: str, target: str, links) -> bool:
    return all(0 <= i < len(source.split()) and 0 <= j < len(target.split()) for i, j in links)


def test_alignment_leaves_the_translation_unchanged_and_links_stay_in_range(trained_run):
    from transduce.decoding.translator import Translator

    run, corpus = trained_run
    translator = Translator.from_run(run)
    lines = (corpus / "test.en").read_text().splitlines()[:8]
    lines.insert(3, "")
    plain = translator.decode_lines(lines, beam=3, nbest=2)
    aligned = translator.decode_lines(lines, beam=3, nbest=2, alignment=True)
    assert [[h.text for h in hyps] for hyps in plain.hypotheses] == [
        [h.text for h in hyps] for hyps in aligned.hypotheses
    ]
    assert all(h.alignment is None for hyps in plain.hypotheses for h in hyps)
    for line, hyps in zip(lines, aligned.hypotheses):
        for h in hyps:
            assert h.alignment and _in_range(line, h.text, h.alignment)
            assert {j for _, j in h.alignment} == set(range(len(h.text.split())))  # every target word is linked


def test_a_paragraphs_links_count_the_words_of_the_whole_line(trained_run):
    from transduce.decoding.translator import Translator

    run, corpus = trained_run
    translator = Translator.from_run(run)
    first, second = (s.capitalize() + "." for s in ("red dog near the house", "the cat sees over"))
    paragraph = translator.decode_lines([f"{first} {second}"], split="sentences", alignment=True).hypotheses[0][0]
    alone = translator.decode_lines([first, second], alignment=True).hypotheses
    n_src, n_tgt = len(first.split()), len(alone[0][0].text.split())
    shifted = [(i + n_src, j + n_tgt) for i, j in alone[1][0].alignment]
    assert paragraph.alignment == sorted(alone[0][0].alignment + shifted)


def test_translate_cli_prints_text_then_links(trained_run):
    run, corpus = trained_run
    lines = (corpus / "test.en").read_text().splitlines()[:4]
    text = "\n".join(lines) + "\n"
    plain = run_cli("translate", str(run), "--beam", "2", "--quiet", input=text).stdout.splitlines()
    out = run_cli("translate", str(run), "--beam", "2", "--quiet", "--alignment", input=text).stdout.splitlines()
    assert len(out) == len(lines)
    for source, translation, row in zip(lines, plain, out):
        got, links = row.split(" ||| ")
        assert got == translation  # byte-identical text
        pairs = [tuple(map(int, link.split("-"))) for link in links.split()]
        assert pairs and _in_range(source, translation, pairs)
    nbest = run_cli(
        "translate", str(run), "--beam", "2", "--nbest", "2", "--alignment", "--quiet", input=lines[0] + "\n"
    )
    assert all(" ||| " in row and row.startswith("0\t") for row in nbest.stdout.splitlines())


def test_torch_and_ctranslate2_give_the_same_links(trained_run, tmp_path):
    pytest.importorskip("ctranslate2")
    run, corpus = trained_run
    src, tgt = corpus / "test.en", corpus / "test.xx"
    torch_rows = run_cli("score-pairs", str(run), "--src", str(src), "--tgt", str(tgt), "--alignment").stdout
    ct2_rows = run_cli(
        "score-pairs", str(run), "--src", str(src), "--tgt", str(tgt), "--alignment", "--engine", "ctranslate2"
    ).stdout
    torch_links = [row.split("\t")[3] for row in torch_rows.splitlines()]
    ct2_links = [row.split("\t")[3] for row in ct2_rows.splitlines()]
    assert len(torch_links) == len(src.read_text().splitlines()) and all(torch_links)
    assert torch_links == ct2_links
    # the links CTranslate2 prints for its own translations are those torch reads for the same pairs
    sources = src.read_text().splitlines()[:6]
    rows = run_cli(
        "translate", str(run), "--engine", "ctranslate2", "--beam", "2", "--length-penalty", "length",
        "--alignment", "--quiet", input="\n".join(sources) + "\n",
    ).stdout.splitlines()  # fmt: skip
    texts, links = zip(*(row.split(" ||| ") for row in rows))
    (tmp_path / "hyp.txt").write_text("\n".join(texts) + "\n")
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n")
    scored = run_cli("score-pairs", str(run), "--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "hyp.txt"),
                     "--alignment").stdout  # fmt: skip
    assert [row.split("\t")[3] for row in scored.splitlines()] == list(links)


def test_the_models_link_rule_is_read_by_both_engines(trained_run):
    import dataclasses

    from transduce.config import ConfigError, ModelConfig
    from transduce.decoding.translator import Translator

    with pytest.raises(ConfigError, match="model.alignment_links must be one of pieces, target, both, grow"):
        ModelConfig(alignment_links="intersect")
    run, corpus = trained_run
    translator = Translator.from_run(run)
    sources = (corpus / "test.en").read_text().splitlines()[:12]
    targets = (corpus / "test.xx").read_text().splitlines()[:12]
    read = {}
    for rule in ("pieces", "target", "both", "grow"):
        translator.model.config = dataclasses.replace(translator.model.config, alignment_links=rule)
        read[rule] = translator.pair_alignments(sources, targets)
    for target, one_way, both, grow in zip(targets, read["target"], read["both"], read["grow"]):
        assert {j for _, j in one_way} == set(range(len(target.split())))  # every target word, once
        assert len(one_way) == len(target.split())
        assert set(both) <= set(one_way) and set(both) <= set(grow)
    assert read["both"] != read["target"]  # the rule changes what is read
    pytest.importorskip("ctranslate2")
    from transduce.export.ct2_translator import CTranslate2Translator

    engine = CTranslate2Translator.from_run(run)
    engine.manifest["model"]["alignment_links"] = "both"  # as an export of a run with that setting records it
    assert engine.pair_alignments(sources, targets) == read["both"]


def test_an_export_records_its_alignment_heads(trained_run, tmp_path):
    pytest.importorskip("ctranslate2")
    from transduce.export.ctranslate2 import export_ctranslate2
    from transduce.outputs import read_manifest

    run, _ = trained_run
    folder = export_ctranslate2(run, tmp_path / "ct2")
    model = read_manifest(folder)["model"]
    assert "alignment_layer" in model and "alignment_heads" in model


def test_the_search_reads_each_source_with_its_end_of_sentence(trained_run):
    """The paragraph front hands the engine pieces without EOS: the torch engine must add it, as training saw it."""
    from transduce.decoding.search import beam_search
    from transduce.decoding.translator import Translator

    run, corpus = trained_run
    translator = Translator.from_run(run)
    lines = (corpus / "test.en").read_text().splitlines()[:5]
    src = translator._padded(translator.encode_sources(lines))  # pieces + EOS, padded
    direct = beam_search(translator.model, src, beam=2, nbest=1, alpha=0.6, max_len_a=1.0, max_len_b=10)
    expected = translator.tokenizer.decode([hyps[0].tokens for hyps in direct])
    assert translator.translate(lines, beam=2, alpha=0.6) == expected
    assert [h[0].text for h in translator.decode_lines(lines, beam=2, alpha=0.6, alignment=True).hypotheses] == expected
