"""Trees: reading the bracket format, normalization, linearization and its exact inverse (tasks/trees.py)."""

import gzip
from pathlib import Path

import pytest
from conftest import shared_data

from transduce.data.trees import (
    CLOSE,
    SPECIALS,
    XX,
    Tree,
    TreeError,
    build_vocab,
    delinearize,
    escape_word,
    linearize,
    normalize,
    parse_tree,
    parse_trees,
    read_lines,
    read_trees,
    strip_function_tags,
    tags,
    to_string,
    unescape_word,
    words,
)


def corpus(name: str) -> Path:
    return shared_data(name)


# --------------------------------------------------------------------------------------------------- reading


def test_parse_reads_labels_words_and_preterminals():
    tree = parse_tree("(ROOT (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)))")
    assert tree.label == "ROOT" and not tree.is_preterminal
    assert words(tree) == ["The", "dog", "barks", "."]
    assert tags(tree) == ["DT", "NN", "VBZ", "."]
    assert to_string(tree) == "(ROOT (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)))"


def test_empty_root_bracket_and_whitespace_forms():
    # The Treebank's "( (S ...) )": an empty root label. A label is what follows "(" directly.
    a = parse_tree("( (S (NP (NNP Pierre)) (VP (VBD left)) ) )")
    b = parse_tree("((S(NP (NNP Pierre))(VP (VBD left))))")
    assert a == b and a.label == "" and a.children[0].label == "S"
    assert to_string(a) == "((S (NP (NNP Pierre)) (VP (VBD left))))"
    multi = parse_tree("(ROOT\n  (S\n    (NP (PRP It))\n    (VP (VBZ works))))")
    assert words(multi) == ["It", "works"]


@pytest.mark.parametrize(
    "text, reason, line",
    [
        ("(S (NP (DT a) (NN b))", "unbalanced brackets: 1 bracket(s) still open", 1),
        ("(S (NP (DT a)))) ", "')' closes nothing", 1),
        ("()", "empty tree ()", 1),
        ("(S (NP) (VP (VB go)))", "empty constituent (NP)", 1),
        ("(S (NP the dog))", "word 'dog' outside a preterminal", 1),
        ("(S the (NP (NN dog)))", "word 'the' outside a preterminal", 1),
        ("(NP (DT the)\n dog)", "word 'dog' outside a preterminal", 2),
        ("dog (NP (NN dog))", "word 'dog' outside any bracket", 1),
        ("(S (NN a) (NN b) x)", "word 'x' outside a preterminal", 1),
    ],
)
def test_parse_errors_name_source_line_and_problem(text, reason, line):
    with pytest.raises(TreeError) as info:
        parse_tree(text, source="f.trees", line=1)
    assert str(info.value).startswith(f"f.trees:{line}: ")
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError)


def test_word_next_to_constituent_is_refused():
    with pytest.raises(TreeError, match="word 'the' outside a preterminal: .* also holds a constituent"):
        parse_tree("(NP (DT the) (NN dog))".replace("(DT the)", "(DT the (X y))"))


def test_parse_tree_wants_exactly_one_tree():
    with pytest.raises(TreeError, match="empty tree: no brackets"):
        parse_tree("   ")
    with pytest.raises(TreeError, match="2 trees"):
        parse_tree("(A (B x)) (A (B y))")
    assert len(parse_trees("(P this) (Q is)")) == 2
    assert parse_trees("(S (A) (B x))", allow_empty=True)[0].children[0] == Tree("A", [])


def test_read_trees_file_errors_and_formats(tmp_path):
    good = tmp_path / "good.trees.gz"
    with gzip.open(good, "wt") as f:
        f.write("(ROOT (NP (NN one)))\n\n(ROOT\n (NP (NN two)\n  (NN words)))\n")
    trees = read_trees(good)
    assert [words(t) for t in trees] == [["one"], ["two", "words"]]

    bad = tmp_path / "bad.trees"
    bad.write_text("(ROOT (NP (NN one)))\n(ROOT (NP (NN two))\n(ROOT (NP (NN three)))\n")
    with pytest.raises(TreeError, match=r"bad.trees:2: unbalanced brackets"):
        read_trees(bad)
    two = tmp_path / "two.trees"
    two.write_text("(ROOT (NN a))\n(ROOT (NN b)) (ROOT (NN c))\n")
    with pytest.raises(TreeError, match=r"two.trees:2: 2 trees on one line"):
        read_trees(two)
    utf = tmp_path / "utf.trees"
    utf.write_bytes(b"(ROOT (NN a))\n(ROOT (NN \xff))\n")
    with pytest.raises(TreeError, match=r"utf.trees:2: invalid UTF-8"):
        read_trees(utf)
    empty = tmp_path / "empty.trees"
    empty.write_text("\n\n")
    with pytest.raises(TreeError, match="no trees"):
        read_trees(empty)
    with pytest.raises(TreeError, match="cannot read"):
        read_trees(tmp_path / "missing.trees")
    # issue 65, 12: a tree lacking its ")" is not joined with the trees after it up to an extra ")" (195 trees of a
    # 200-line file were read): refused at its own line; a byte-order mark is no part of the first word
    shifted = tmp_path / "shifted.trees"
    lines = ["(ROOT (NN w))"] * 12
    lines[4], lines[9] = "(ROOT (NP (NN w))", "(ROOT (NN w)))"
    shifted.write_text("\n".join(lines) + "\n")
    with pytest.raises(TreeError, match=r"shifted.trees:5: unbalanced brackets: .*1 closing bracket missing.* line 6"):
        read_trees(shifted)
    bom = tmp_path / "bom.trees"
    bom.write_bytes("\ufeff(ROOT (RB The))\n".encode())
    assert words(read_trees(bom)[0]) == ["The"]
    traces = tmp_path / "traces.trees"
    traces.write_text("(ROOT (NN a))\n((S (NP-SBJ (-NONE- *))))\n")
    with pytest.raises(TreeError, match=r"traces.trees:2: the tree has no words"):
        read_trees(traces, normalized=True)


# --------------------------------------------------------------------------------------------- normalization


@pytest.mark.parametrize(
    "label, expected",
    [
        ("NP-SBJ-1", "NP"),
        ("NP-SBJ=1-3", "NP"),
        ("NP=2", "NP"),
        ("S-TPC-2", "S"),
        ("PP-LOC-PRD", "PP"),
        ("-NONE-", "-NONE-"),
        ("-LRB-", "-LRB-"),
        ("-RRB-", "-RRB-"),
        ("PRP$", "PRP$"),
        ("ADVP|PRT", "ADVP|PRT"),
        ("NP", "NP"),
        ("", ""),
    ],
)
def test_strip_function_tags(label, expected):
    assert strip_function_tags(label) == expected


def test_normalize_strips_traces_empties_function_tags_and_sets_root():
    raw = parse_tree(
        "((S (NP-SBJ-1 (NNP Rudolph)) (VP (VBD was) (VP (VBN named) (S (NP-SBJ (-NONE- *-1)) "
        "(NP-PRD (DT a) (NN director))))) (SBAR (-NONE- 0) (S (-NONE- *T*-1))) (. .)))"
    )
    assert to_string(normalize(raw)) == (
        "(ROOT (S (NP (NNP Rudolph)) (VP (VBD was) (VP (VBN named) (S (NP (DT a) (NN director))))) (. .)))"
    )
    assert normalize(parse_tree("(TOP (S (NN x)))")).label == "ROOT"
    assert to_string(normalize(parse_tree("(S (NN x))"))) == "(ROOT (S (NN x)))"
    assert to_string(normalize(parse_tree("(NN x)"))) == "(ROOT (NN x))"
    kept = parse_tree("(ROOT (S (-LRB- -LRB-) (NP (NN x)) (-RRB- -RRB-)))")
    assert normalize(kept) == kept
    with pytest.raises(TreeError, match="no words"):
        normalize(parse_tree("(S (-NONE- *))"))


def test_escaping_round_trips_and_keeps_output_parseable():
    assert escape_word("(") == "-LRB-" and escape_word(")") == "-RRB-"
    assert escape_word("Spouse(s)") == "Spouse-LRB-s-RRB-"
    for w in ["(", ")", "a(b)c", ":)", "plain"]:
        assert unescape_word(escape_word(w)) == w
    tree = Tree("ROOT", [Tree("NP", [Tree("-LRB-", ["("]), Tree("NN", ["x"]), Tree("-RRB-", [")"])])])
    text = to_string(tree)
    assert text == "(ROOT (NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-)))"
    assert [unescape_word(w) for w in words(parse_tree(text))] == ["(", "x", ")"]


# --------------------------------------------------------------------------------------------- linearization


def test_linearize_scheme():
    tree = parse_tree("(ROOT (S (NP (DT The) (NN dog)) (VP (VBZ barks))))")
    assert linearize(tree) == ["(ROOT", "(S", "(NP", "DT", "NN", ")", "(VP", "VBZ", ")", ")", ")"]
    assert linearize(tree, keep_tags=False) == ["(ROOT", "(S", "(NP", XX, XX, ")", "(VP", XX, ")", ")", ")"]
    assert delinearize(linearize(tree), words(tree)) == tree
    untagged = delinearize(linearize(tree, keep_tags=False), words(tree))
    assert tags(untagged) == [XX] * 3 and words(untagged) == words(tree)
    assert delinearize(["NN"], ["x"]) == Tree("NN", ["x"])


@pytest.mark.parametrize(
    "tokens, sentence, reason",
    [
        (["(S", "NN", ")", ")"], ["a"], "after the tree is complete"),
        ([")"], [], "closes nothing"),
        (["(S", ")"], [], "empty constituent"),
        (["(S", "NN", "NN", ")"], ["a"], "more leaves"),
        (["(S", "NN", ")"], ["a", "b"], "1 leaves for 2 words"),
        (["(S", "(NP", "NN", ")"], ["a"], "1 constituent(s) open"),
        ([], [], "no tree"),
        (["NN", "NN"], ["a", "b"], "after the tree is complete"),
    ],
)
def test_delinearize_refuses_what_is_not_one_tree(tokens, sentence, reason):
    with pytest.raises(TreeError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        delinearize(tokens, sentence)


def test_linearize_refuses_empty_constituents():
    with pytest.raises(TreeError, match="empty constituent"):
        linearize(Tree("S", [Tree("NP", []), Tree("NN", ["x"])]))


def test_vocab_is_closed_and_ordered():
    trees = [parse_tree("(ROOT (S (NP (NN a)) (VP (VB b))))"), parse_tree("(ROOT (NP (DT c) (NN d)))")]
    assert build_vocab(trees) == [*SPECIALS, CLOSE, "(NP", "(ROOT", "(S", "(VP", "DT", "NN", "VB"]
    assert build_vocab(trees, keep_tags=False) == [*SPECIALS, CLOSE, "(NP", "(ROOT", "(S", "(VP", XX]


def test_specials_share_the_tokenizer_ids():
    from transduce.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

    assert [SPECIALS.index(s) for s in ("<pad>", "<unk>", "<s>", "</s>")] == [PAD_ID, UNK_ID, BOS_ID, EOS_ID]


# ------------------------------------------------------------------------------------------ the real corpora


@pytest.mark.parametrize(
    "name", ["gum_const/train.trees.gz", "gum_const/dev.trees", "ptb_sample_nltk/treebank.trees.gz"]
)
def test_every_corpus_tree_reads_reprints_and_round_trips(name):
    path = corpus(name)
    lines = [text for _, text in read_lines(path)]
    raw = read_trees(path)
    assert (
        len(raw)
        == len(lines)
        == {"gum_const/train.trees.gz": 3707, "gum_const/dev.trees": 438, "ptb_sample_nltk/treebank.trees.gz": 3669}[
            name
        ]
    )
    assert [to_string(t) for t in raw] == lines  # the reader loses nothing
    normalized = [normalize(t) for t in raw]
    for tree in normalized:
        assert tree.label == "ROOT"
        assert all(not label.startswith("-NONE-") for label in tags(tree))
        sentence = words(tree)
        assert delinearize(linearize(tree), sentence) == tree
        untagged = delinearize(linearize(tree, keep_tags=False), sentence)
        assert words(untagged) == sentence and linearize(untagged) == linearize(tree, keep_tags=False)
    if name.startswith("ptb"):
        labels = {node.label for t in normalized for node in t.subtrees()}
        assert not any("-" in label[1:-1] and not label.startswith("-") for label in labels)
        assert "-NONE-" not in labels and "" not in labels
