"""The EVALB scorer (tasks/evalb.py): the distribution's sample reproduced number for number, then each rule."""

import os
import re
from pathlib import Path

import pytest
from conftest import shared_data

from transduce.tasks.evalb import (
    COLLINS,
    ERROR,
    OK,
    SKIP,
    Params,
    default_params,
    evalb_command,
    format_report,
    put_gold_tags,
    read_params,
    read_sentences,
    score_corpus,
)
from transduce.tasks.trees import (
    TreeError,
    normalize,
    parse_tree,
    read_trees,
    tags,
    to_string,
)


def sample_dir() -> Path:
    return shared_data("evalb_sample")


def parse_rsl(text: str) -> tuple[list[list[float]], list[float], dict[str, dict[str, float]]]:
    """EVALB's output as numbers: the rows, the totals row, and each summary block as {name: value}."""
    table, _, summary = text.partition("=== Summary ===")
    rule = "=" * 76
    _, body, totals = table.split(rule)
    rows = [[float(x) for x in line.split()] for line in body.strip("\n").splitlines()]
    blocks: dict[str, dict[str, float]] = {}
    for title, content in re.findall(r"-- (.+?) --\n(.*?)(?=\n\n|\Z)", summary, flags=re.DOTALL):
        blocks[title] = {k.strip(): float(v) for k, v in (line.split("=") for line in content.strip().splitlines())}
    return rows, [float(x) for x in totals.split()], blocks


def sample_result(strict: bool = False):
    d = sample_dir()
    gold = read_sentences(d / "sample.gld", gold=True)
    test = read_sentences(d / "sample.tst", gold=False)
    return score_corpus(gold, test, read_params(d / "sample.prm"), strict=strict)


def score_one(gold: str, test: str, params: Params | None = None, strict: bool = False):
    return score_corpus([parse_tree(gold)], [parse_tree(test)], params, strict=strict)


# ------------------------------------------------------------------------------- the distribution's own sample


def test_sample_every_number_equals_sample_rsl():
    expected_rows, expected_totals, expected_blocks = parse_rsl((sample_dir() / "sample.rsl").read_text())
    result = sample_result()
    ours_rows, ours_totals, ours_blocks = parse_rsl(format_report(result, per_sentence=True))
    assert len(result.rows) == len(expected_rows) == 24
    for row, ours, expected in zip(result.rows, ours_rows, expected_rows):
        assert ours == expected, f"sentence {row.id}"
        assert [
            row.id,
            row.length,
            row.status,
            round(row.recall, 2),
            round(row.precision, 2),
            row.matched,
            row.gold_brackets,
            row.test_brackets,
            row.crossing,
            row.words,
            row.correct_tags,
            round(row.tag_accuracy, 2),
        ] == expected
    # Totals row: every column but crossing, which the 1997 program summed wrongly (16; the rows sum to 1).
    assert ours_totals[:5] + ours_totals[6:] == expected_totals[:5] + expected_totals[6:]
    assert ours_totals[5] == sum(row.crossing for row in result.rows) == 1
    for title in ("All", "len<=40"):
        assert title in ours_blocks
        for name, value in expected_blocks[title].items():
            assert ours_blocks[title][name] == value, (title, name)
    # The FMeasure the file's provenance gives (2 x 86 / (98 + 95) and 2 x 52 / (64 + 61)).
    assert ours_blocks["All"]["Bracketing FMeasure"] == 89.12
    assert ours_blocks["len<=40"]["Bracketing FMeasure"] == 83.20


def test_sample_report_text_equals_evalb_output():
    d = sample_dir()
    ours = evalb_command(d / "sample.gld", d / "sample.tst", d / "sample.prm", per_sentence=True).splitlines()
    old = (d / "sample.rsl").read_text().splitlines()
    new = (d / "sample.rsl-2006").read_text().splitlines()
    assert ours[:28] == old[:28]  # header and rows: the 1997 program's, as sample.rsl
    assert ours[28:] == new[28:]  # totals row and summary: the 2006 program's
    summary_only = evalb_command(d / "sample.gld", d / "sample.tst", d / "sample.prm")
    assert summary_only.splitlines() == new[new.index("=== Summary ===") :]


def test_sample_statuses():
    statuses = [row.status for row in sample_result().rows]
    assert [i + 1 for i, s in enumerate(statuses) if s == SKIP] == [11, 14]
    assert [i + 1 for i, s in enumerate(statuses) if s == ERROR] == [12, 13, 16, 17, 20]


def test_strict_counts_error_and_skip_sentences_as_zero_matched():
    result = sample_result(strict=True)
    # 7 unscored sentences with 4 gold brackets each; test brackets of the 5 error sentences 5+5+4+6+4 = 24.
    assert (result.all.matched, result.all.gold_brackets, result.all.test_brackets) == (86, 98 + 28, 95 + 24)
    assert round(result.all.recall, 2) == round(100 * 86 / 126, 2)
    assert round(result.all.precision, 2) == round(100 * 86 / 119, 2)
    assert result.all.words == 108 + 28 and result.all.correct_tags == 106
    assert (result.all.errors, result.all.skipped, result.all.valid) == (5, 2, 17)
    assert result.all.complete_match == sample_result().all.complete_match  # sentence figures: valid ones only
    assert "strict" in format_report(result)


# ------------------------------------------------------------------------------------------------- parameters


def test_default_params_are_collins_prm_plus_root():
    collins = read_params(sample_dir() / "COLLINS.prm")
    assert collins == COLLINS
    assert default_params() == Params(**{**collins.__dict__, "delete_labels": (*collins.delete_labels, "ROOT")})


def test_read_params_rules_and_errors(tmp_path):
    prm = tmp_path / "p.prm"
    prm.write_text("# comment\n\nXY\nLABELED 0\nCUTOFF_LEN 100\nDELETE_LABEL ROOT  \nEQ_WORD\tA  a\n")
    assert read_params(prm) == Params(labeled=False, cutoff_len=100, delete_labels=("ROOT",), eq_words=(("A", "a"),))
    for text, reason in [
        ("DELETE_LABLE X\n", "3: unknown keyword 'DELETE_LABLE'"),
        ("EQ_LABEL A\n", "3: EQ_LABEL needs two values"),
        ("CUTOFF_LEN forty\n", "3: CUTOFF_LEN needs a whole number"),
        ("DELETE_LABEL\n", "3: DELETE_LABEL has no value"),
    ]:
        prm.write_text("# c\nDEBUG 0\n" + text)
        with pytest.raises(TreeError) as info:
            read_params(prm)
        assert str(info.value) == f"{prm}:{reason}" or str(info.value).startswith(f"{prm}:{reason}")


# ------------------------------------------------------------------------------------------------------ rules


def test_punctuation_and_root_are_not_scored_with_default_params():
    gold = "(ROOT (S (NP (PRP It)) (VP (VBZ works)) (. .)))"
    r = score_one(gold, "(ROOT (S (NP (PRP It)) (VP (VBZ works) (. .))))")
    row = r.rows[0]
    assert (row.status, row.matched, row.gold_brackets, row.test_brackets, row.words, row.length) == (OK, 3, 3, 3, 2, 3)
    assert r.all.fmeasure == 100.0
    # A word tagged as punctuation is deleted from the test only: a length mismatch, i.e. an error sentence.
    assert score_one(gold, "(ROOT (S (NP (PRP It)) (VP (, works)) (. .)))").rows[0].status == ERROR


def test_labels_truncated_and_eq_label():
    r = score_one(
        "(ROOT (S (NP-SBJ-1 (PRP It)) (VP (VBZ goes) (PRT (RP on)))))",
        "(ROOT (S (NP (PRP It)) (VP (VBZ goes) (ADVP (RP on)))))",
    )
    assert r.rows[0].matched == 4  # NP-SBJ-1 = NP; ADVP = PRT in COLLINS.prm
    unlabeled = Params(labeled=False)
    assert score_one("(S (A (P a)) (B (Q b)))", "(S (C (P a)) (D (Q b)))", unlabeled).rows[0].matched == 3


def test_multiset_matching_crossing_and_complete_match():
    gold = "(S (A (P a) (P b)) (B (P c) (P d)))"
    r = score_one(gold, "(S (A (A (P a) (P b))) (B (P c) (P d)))", Params())
    assert (r.rows[0].matched, r.rows[0].test_brackets) == (3, 4)  # the second A[0,2] matches nothing
    crossing = score_one(gold, "(S (P a) (A (P b) (P c)) (P d))", Params()).rows[0]
    assert (crossing.crossing, crossing.matched) == (1, 1)
    r = score_one(gold, gold, Params())
    assert r.all.complete == 1 and r.all.no_crossing == 1


def test_tagging_accuracy_and_gold_tags_put_back():
    gold = parse_tree("(ROOT (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)))")
    test = parse_tree("(ROOT (S (NP (DT The) (VB dog)) (VP (NNS barks)) (. .)))")
    r = score_corpus([gold], [test])
    assert r.rows[0].correct_tags == 1 and r.rows[0].words == 3  # "." is deleted
    fixed = put_gold_tags(test, gold)
    assert tags(fixed) == tags(gold) and to_string(test).count("VB dog") == 1  # the input is not modified
    assert score_corpus([gold], [fixed]).all.tagging_accuracy == 100.0
    other = parse_tree("(ROOT (S (NP (DT A) (NN cat)) (VP (VBZ barks)) (. .)))")
    assert put_gold_tags(other, gold) is other  # different words: left for the scorer to report
    traced = parse_tree("((S (NP-SBJ (-NONE- *)) (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)))")
    assert tags(put_gold_tags(test, traced)) == tags(gold)


def test_cutoff_length_counts_punctuation_but_not_traces():
    params = Params(cutoff_len=3, delete_labels=(".", "-NONE-"), delete_labels_for_length=("-NONE-",))
    gold = "(S (NP (-NONE- *)) (NP (DT a) (NN b)) (. .))"
    r = score_one(gold, "(S (NP (DT a) (NN b)) (. .))", params)
    assert r.rows[0].length == 3 and r.short.sentences == 1
    r = score_one(gold.replace("(NN b)", "(NN b) (NN c)"), "(S (NP (DT a) (NN b) (NN c)) (. .))", params)
    assert r.rows[0].length == 4 and r.short.sentences == 0 and r.all.sentences == 1


def test_max_error_stops_like_evalb_and_strict_does_not():
    gold = [parse_tree("(S (A (P a)))")] * 5
    test = [parse_tree("(S (A (P b)))")] * 5
    assert score_corpus(gold[:3], test[:3], Params(max_error=2)).all.errors == 3  # EVALB goes on
    with pytest.raises(TreeError, match="sentence 4: more than 3 error sentences"):
        score_corpus(gold[:4], test[:4], Params(max_error=2))
    assert score_corpus(gold, test, Params(max_error=2), strict=True).all.errors == 5


def test_files_lines_and_unreadable_input(tmp_path):
    gold, test = tmp_path / "gold.txt", tmp_path / "test.txt"
    gold.write_text("(ROOT (S (NN a) (VB b)))\n(ROOT (S (NN c) (VB d)))\n(ROOT (S (NN e) (VB f)))\n")
    test.write_text("(ROOT (S (NN a) (VB b)))\n(ROOT (S (NN c) (VB d))\n\n")
    report = evalb_command(gold, test, per_sentence=True)
    statuses = [int(line.split()[2]) for line in report.splitlines()[3:6]]
    assert statuses == [OK, ERROR, SKIP]  # an unbalanced test line is an error sentence, an empty one is skipped
    test.write_text("(ROOT (S (NN a) (VB b)))\n")
    with pytest.raises(TreeError, match=r"gold.txt has 3 lines but .*test.txt has 1"):
        evalb_command(gold, test)
    gold.write_text("(ROOT (S (NN a) (VB b))))\n")
    with pytest.raises(TreeError, match=r"gold.txt:1: unbalanced brackets"):
        evalb_command(gold, test)


def test_normalization_does_not_change_evalb_scores():
    root = os.environ.get("TRANSDUCE_DATA")
    if not root or not (Path(root) / "gum_const" / "dev.trees").exists():
        pytest.skip("TRANSDUCE_DATA not set or gum_const missing")
    raw = read_trees(Path(root) / "gum_const" / "dev.trees")
    result = score_corpus(raw, [normalize(t) for t in raw])
    assert result.all.valid == len(raw) == 438
    assert (result.all.recall, result.all.precision, result.all.tagging_accuracy) == (100.0, 100.0, 100.0)


def test_two_empty_files_are_refused_not_scored_as_zero(tmp_path, capsys):
    from transduce.cli import main

    gold, test = tmp_path / "gold.trees", tmp_path / "test.trees"
    gold.write_text("")
    test.write_text("")
    assert main(["evalb", str(gold), str(test)]) == 1
    err = capsys.readouterr().err
    assert f"{gold}: the file is empty" in err and len(err.strip().splitlines()) == 1
