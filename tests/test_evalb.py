"""The EVALB scorer (tasks/evalb.py): the distribution's sample reproduced number for number, then each rule."""

import os
import re
from pathlib import Path

import pytest
from conftest import shared_data

from transduce.data.trees import (
    TreeError,
    normalize,
    parse_tree,
    read_trees,
    tags,
    to_string,
)
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


# ------------------------------------------------------------------------------------------- QUOTE_LABEL (nk.prm)

# The settings of EVALB's nk.prm (nikitakit/self-attentive-parser, EVALB/nk.prm: new.prm with MAX_ERROR 10000).
NK_PRM = """DEBUG 0
MAX_ERROR 10000
CUTOFF_LEN 40
LABELED 1
DELETE_LABEL TOP
DELETE_LABEL S1
DELETE_LABEL -NONE-
DELETE_LABEL ,
DELETE_LABEL :
DELETE_LABEL ``
DELETE_LABEL ''
DELETE_LABEL .
DELETE_LABEL ?
DELETE_LABEL !
DELETE_LABEL_FOR_LENGTH -NONE-
QUOTE_LABEL ``
QUOTE_LABEL ''
QUOTE_LABEL POS
QUOTE_LABEL NN
QUOTE_LABEL CD
QUOTE_LABEL VBZ
QUOTE_LABEL :
EQ_LABEL ADVP PRT
"""

# Gold and test lines where a quote terminal (', " or / tagged with a QUOTE_LABEL) is deleted on one side only.
QUOTE_PAIRS = [
    # 1. possessive ' tagged '' in the test (deleted there): put back into the test
    (
        "(TOP (S (NP (NP (NNS dogs) (POS ')) (NNS bones)) (VP (VBP are) (ADJP (JJ big))) (. .)))",
        "(TOP (S (NP (NNS dogs)) ('' ') (NP (NNS bones)) (VP (VBP are) (ADJP (JJ big))) (. .)))",
    ),
    # 2. closing quote ' deleted in the gold, POS in the test: put back into the gold, inside its open brackets
    (
        "(TOP (S (NP (PRP He)) (VP (VBD said) (`` `) (S (NP (PRP it)) (VP (VBD rained))) ('' ')) (. .)))",
        "(TOP (S (NP (PRP He)) (VP (VBD said) (`` `) (S (NP (PRP it)) (VP (VBD rained) (POS ')))) (. .)))",
    ),
    # 3. the word / as : (deleted) against CD: brackets opened after it move right
    (
        "(TOP (S (NP (CD 1) (: /) (CD 2)) (VP (VBZ remains)) (. .)))",
        "(TOP (S (NP (CD 1)) (CD /) (NP (CD 2)) (VP (VBZ remains)) (. .)))",
    ),
    # 4. two misquotes that cancel out: equal word counts, so no repair and the words differ (error)
    (
        "(TOP (S (NP (NP (NP (NNS boys) (POS ')) (NNS toys)) (CC and) (NP (NNS girls) ('' '))) (VP (VBP wait)) (. .)))",
        "(TOP (S (NP (NP (NNS boys) ('' ') (NNS toys)) (CC and) (NP (NP (NNS girls) (POS ')))) (VP (VBP wait)) (. .)))",
    ),
    # 5. two misquotes in the test: both put back, the second at its shifted position
    (
        "(TOP (S (NP (NP (NP (NNS boys) (POS ')) (NNS toys)) (CC and) (NP (NP (NNS girls) (POS ')) (NNS games)))"
        " (VP (VBD broke)) (. .)))",
        "(TOP (S (NP (NP (NNS boys) ('' ') (NNS toys)) (CC and) (NP (NNS girls) ('' ') (NNS games))) (VP (VBD broke))"
        " (. .)))",
    ),
    # 6. the quote is missing from the test: nothing to put back (error)
    (
        "(TOP (S (NP (NP (NNS dogs) (POS ')) (NNS bones)) (VP (VBP are) (ADJP (JJ big))) (. .)))",
        "(TOP (S (NP (NNS dogs) (NNS bones)) (VP (VBP are) (ADJP (JJ big))) (. .)))",
    ),
    # 7. the word " tagged NN in the test: the gold '' is put back
    (
        "(TOP (S (NP (NNP Ann)) (VP (VBD wrote) (NP ('' \") (NN hi) ('' \"))) (. .)))",
        "(TOP (S (NP (NNP Ann)) (VP (VBD wrote) (NP ('' \") (NN hi) (NN \"))) (. .)))",
    ),
    # 8. a gold bracket over a deleted quote only (PRN) spans a word once the quote is back, and is scored
    (
        "(TOP (S (NP (NNS dogs)) (VP (VBP bark)) (PRN ('' ')) (. .)))",
        "(TOP (S (NP (NNS dogs)) (VP (VBP bark) (POS ')) (. .)))",
    ),
    # 9. the PTB closing quote '' is no quote word to EVALB (error)
    (
        "(TOP (S (NP (PRP I)) (VP (VBD agreed)) ('' '') (. .)))",
        "(TOP (S (NP (PRP I)) (VP (VBD agreed) (POS '')) (. .)))",
    ),
    # 10. nor is the possessive 's (error)
    (
        "(TOP (S (NP (NP (NNP John) (POS 's)) (NN dog)) (VP (VBZ runs)) (. .)))",
        "(TOP (S (NP (NNP John)) ('' 's) (NP (NN dog)) (VP (VBZ runs)) (. .)))",
    ),
    # 11. no quote: punctuation attached elsewhere, deleted on both sides
    ("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))", "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (. .))))"),
]

# EVALB 2006's output for QUOTE_PAIRS, the reference: evalb.c of nikitakit/self-attentive-parser (folder EVALB/, commit
# 7b1da8fa406e50e3f25bc7dcab0a434965d0b73a), compiled with gcc -O2 and run as `evalb -p nk.prm gold test`, then with
# nk.prm less its QUOTE_LABEL lines. Rows: ID Len Stat Recall Prec Matched Gold Test Cross Words Tags Accuracy. The
# 2006 program shows 0 words in an error row; ours shows the gold word count there (1997 rows, see the module).
NK_ROWS_2006 = [
    [1, 6, 0, 60.00, 60.00, 3, 5, 5, 0, 5, 4, 80.00],
    [2, 7, 0, 66.67, 66.67, 4, 6, 6, 1, 5, 4, 80.00],
    [3, 5, 0, 66.67, 50.00, 2, 3, 4, 0, 4, 3, 75.00],
    [4, 8, 1, 0.00, 0.00, 0, 0, 0, 0, 0, 0, 0.00],
    [5, 9, 0, 71.43, 100.00, 5, 7, 5, 0, 8, 6, 75.00],
    [6, 6, 1, 0.00, 0.00, 0, 0, 0, 0, 0, 0, 0.00],
    [7, 6, 0, 100.00, 100.00, 4, 4, 4, 0, 4, 3, 75.00],
    [8, 4, 0, 50.00, 66.67, 2, 4, 3, 0, 3, 2, 66.67],
    [9, 4, 1, 0.00, 0.00, 0, 0, 0, 0, 0, 0, 0.00],
    [10, 5, 1, 0.00, 0.00, 0, 0, 0, 0, 0, 0, 0.00],
    [11, 4, 0, 100.00, 100.00, 3, 3, 3, 0, 3, 3, 100.00],
]
NK_TOTALS_2006 = [71.88, 76.67, 23, 32, 30, 1, 32, 25, 78.12]
NK_SUMMARY_2006 = {
    "Number of sentence": 11,
    "Number of Error sentence": 4,
    "Number of Skip  sentence": 0,
    "Number of Valid sentence": 7,
    "Bracketing Recall": 71.88,
    "Bracketing Precision": 76.67,
    "Bracketing FMeasure": 74.19,
    "Complete match": 28.57,
    "Average crossing": 0.14,
    "No crossing": 85.71,
    "2 or less crossing": 100.00,
    "Tagging accuracy": 78.12,
}
# Without QUOTE_LABEL every pair but the last is an error sentence (length or words differ); their lengths:
NO_QUOTE_LENGTHS_2006 = [6, 7, 5, 8, 9, 6, 6, 4, 4, 5]
NO_QUOTE_ROWS_2006 = [[i, n, 1, 0.0, 0.0, 0, 0, 0, 0, 0, 0, 0.0] for i, n in enumerate(NO_QUOTE_LENGTHS_2006, 1)]
NO_QUOTE_ROWS_2006.append(NK_ROWS_2006[10])
NO_QUOTE_TOTALS_2006 = [100.00, 100.00, 3, 3, 3, 0, 3, 3, 100.00]
NO_QUOTE_SUMMARY_2006 = {
    **{k: 100.00 for k in NK_SUMMARY_2006 if not k.startswith(("Number", "Average"))},
    "Number of sentence": 11,
    "Number of Error sentence": 10,
    "Number of Skip  sentence": 0,
    "Number of Valid sentence": 1,
    "Average crossing": 0.00,
}


def test_read_params_quote_label_and_nk_prm(tmp_path):
    prm = tmp_path / "nk.prm"
    prm.write_text(NK_PRM)
    params = read_params(prm)
    assert params.quote_labels == ("``", "''", "POS", "NN", "CD", "VBZ", ":")
    assert params.delete_labels == ("TOP", "S1", "-NONE-", ",", ":", "``", "''", ".", "?", "!")
    assert (params.max_error, params.cutoff_len, params.labeled) == (10000, 40, True)
    assert params.delete_labels_for_length == ("-NONE-",) and params.eq_labels == (("ADVP", "PRT"),)
    prm.write_text("QUOTE_LABEL POS\n")
    assert read_params(prm) == Params(quote_labels=("POS",))
    prm.write_text("QUOTE_LABELS POS\n")
    with pytest.raises(TreeError, match="unknown keyword 'QUOTE_LABELS'.*QUOTE_LABEL"):
        read_params(prm)


def quote_report(tmp_path, prm_text: str) -> tuple[str, Params]:
    """Our per-sentence report on QUOTE_PAIRS with these settings, and the settings as read."""
    gold, test, prm = tmp_path / "gold.txt", tmp_path / "test.txt", tmp_path / "p.prm"
    gold.write_text("".join(g + "\n" for g, _ in QUOTE_PAIRS))
    test.write_text("".join(t + "\n" for _, t in QUOTE_PAIRS))
    prm.write_text(prm_text)
    return evalb_command(gold, test, prm, per_sentence=True), read_params(prm)


@pytest.mark.parametrize("quote_label", [True, False])
def test_quote_label_matches_evalb_2006(tmp_path, quote_label):
    rows, totals, summary = NK_ROWS_2006, NK_TOTALS_2006, NK_SUMMARY_2006
    prm_text = NK_PRM
    if not quote_label:  # the same settings less QUOTE_LABEL: a scorer that ignored the keyword would give these
        rows, totals, summary = NO_QUOTE_ROWS_2006, NO_QUOTE_TOTALS_2006, NO_QUOTE_SUMMARY_2006
        prm_text = "".join(line + "\n" for line in NK_PRM.splitlines() if not line.startswith("QUOTE_LABEL"))
    report, params = quote_report(tmp_path, prm_text)
    ours_rows, ours_totals, ours_blocks = parse_rsl(report)
    assert len(ours_rows) == len(rows) == len(QUOTE_PAIRS)
    for ours, expected, (gold, _) in zip(ours_rows, rows, QUOTE_PAIRS):
        if expected[2] != OK:  # an error row's Words column: the gold word count (1997 program), not 0 (2006)
            assert ours[9] == sum(t.label not in params.delete_labels for t in parse_tree(gold).preterminals())
            ours = ours[:9] + [0.0] + ours[10:]
        assert ours == expected, f"sentence {expected[0]}"
    assert ours_totals == totals
    for title in ("All", "len<=40"):
        assert ours_blocks[title] == summary, title
    assert (ours_blocks["All"]["Bracketing FMeasure"] == 74.19) == quote_label


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


def test_a_line_count_mismatch_names_the_empty_lines(tmp_path):
    gold, test = tmp_path / "gold.txt", tmp_path / "test.txt"
    gold.write_text("(ROOT (S (NN a) (VB b)))\n\n(ROOT (S (NN c) (VB d)))\n")
    test.write_text("(ROOT (S (NN a) (VB b)))\n(ROOT (S (NN c) (VB d)))\n")
    with pytest.raises(TreeError, match=r"has 3 lines but .* has 2; .*gold.txt:2 is empty: an empty line counts"):
        evalb_command(gold, test)
    test.write_text("\n\n(ROOT (S (NN a) (VB b)))\n\n(ROOT (S (NN c) (VB d)))\n")
    with pytest.raises(TreeError, match=r"gold.txt:2 is empty; .*test.txt has empty lines 1, 2, 4:"):
        evalb_command(gold, test)
