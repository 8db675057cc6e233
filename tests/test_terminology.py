"""Terminology at the level of text (transduce.terminology): constraints and prefix files read line by line with
errors naming file:line, and glossary terms found by the rules of glossary.py's docstring (whole words, case ignored,
leftmost-longest, do-not-translate entries kept as written in the sentence, a request's glossary over the server's)."""

import pytest

from transduce.data import DataError
from transduce.terminology import (
    Constraints,
    Glossary,
    Term,
    check_count,
    parse_constraints,
    read_constraints,
    read_glossary,
    read_prefixes,
)


def write(tmp_path, name: str, content: str | bytes):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def found(glossary: Glossary, text: str) -> list[tuple[str, str]]:
    """(matched text, target) of every term found, checking that each span is the matched text."""
    terms = glossary.find(text)
    assert all(text[t.start : t.end] == t.source for t in terms)
    return [(t.source, t.target) for t in terms]


# Constraints ------------------------------------------------------------------------------------------------------
def test_constraints_are_true_when_they_hold_a_phrase():
    assert not Constraints()
    assert Constraints(include=("a",))
    assert Constraints(exclude=("b",))


def test_a_line_without_separator_is_all_phrases_to_include_stripped():
    assert parse_constraints(" Bundesrat \tGesetz", "c:1") == Constraints(include=("Bundesrat", "Gesetz"))


def test_the_separator_splits_include_from_exclude():
    assert parse_constraints("a b\tc\t##\td", "c:1") == Constraints(include=("a b", "c"), exclude=("d",))
    assert parse_constraints("##\td", "c:1") == Constraints(exclude=("d",))
    assert parse_constraints("a\t##", "c:1") == Constraints(include=("a",))


@pytest.mark.parametrize("line", ["", "   ", " \t "])
def test_an_empty_line_has_no_constraints(line):
    assert parse_constraints(line, "c:1") == Constraints()
    assert not parse_constraints(line, "c:1")


def test_repeated_phrases_are_kept_once_in_order():
    assert parse_constraints("b\ta\tb\ta\t##\tx\tx", "c:1") == Constraints(include=("b", "a"), exclude=("x",))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a\t\tb", "cons.txt:3: field 2 is empty (two tabs in a row"),
        ("a\tb\t", "cons.txt:3: field 3 is empty"),
        ("\ta", "cons.txt:3: field 1 is empty"),
        ("a\t  \tb", "cons.txt:3: field 2 is empty"),
        ("a\t##\tb\t##\tc", "cons.txt:3: a second ## (field 4)"),
        ("a\t##\ta", "cons.txt:3: 'a' is both a phrase to include and a phrase to exclude"),
        ("a\t" + "x" * 201, "cons.txt:3: field 2 has 201 characters, at most 200"),
        ("\t".join(f"p{i}" for i in range(33)), "cons.txt:3: 33 phrases, at most 32"),
    ],
)
def test_bad_constraint_lines_are_refused_naming_the_line(line, message):
    with pytest.raises(DataError) as err:
        parse_constraints(line, "cons.txt:3")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_the_limits_themselves_are_accepted():
    phrases = [f"p{i}" for i in range(32)]
    assert parse_constraints("\t".join(phrases[:16] + ["##"] + phrases[16:]), "c:1").exclude == tuple(phrases[16:])
    assert parse_constraints("x" * 200, "c:1").include == ("x" * 200,)


def test_read_constraints_gives_one_entry_per_line(tmp_path):
    path = write(tmp_path, "cons.txt", "\ufeffa\t##\tb\n\nc\r\n")
    assert read_constraints(path) == [Constraints(("a",), ("b",)), Constraints(), Constraints(("c",))]
    assert read_constraints(write(tmp_path, "empty.txt", "")) == []


def test_read_constraints_names_the_file_and_line(tmp_path):
    path = write(tmp_path, "cons.txt", "a\n\nb\t\tc\n")
    with pytest.raises(DataError, match=r"^.*cons\.txt:3: field 2 is empty"):
        read_constraints(path)


def test_read_constraints_refuses_bad_utf8_unless_told_to_replace(tmp_path):
    path = write(tmp_path, "cons.txt", b"a\nb\xff\n")
    with pytest.raises(DataError, match=r"cons\.txt:2: invalid UTF-8"):
        read_constraints(path)
    assert read_constraints(path, errors="replace")[1] == Constraints(("b\ufffd",))


def test_check_count_refuses_a_file_of_another_length():
    check_count("--constraints", "cons.txt", 3, 3, "input.en")  # equal: nothing to say
    with pytest.raises(DataError) as err:
        check_count("--constraints", "cons.txt", 2, 3, "input.en")
    assert str(err.value) == "cons.txt has 2 lines but input.en has 3: --constraints needs one line per input line"


def test_prefixes_are_taken_as_written(tmp_path):
    path = write(tmp_path, "prefix.txt", "\ufeffDer \n\n  Die Katze\r\n")
    assert read_prefixes(path) == ["Der ", "", "  Die Katze"]


def test_a_prefix_too_long_is_refused_naming_the_line(tmp_path):
    assert read_prefixes(write(tmp_path, "ok.txt", "x" * 1000 + "\n")) == ["x" * 1000]
    path = write(tmp_path, "prefix.txt", "a\n" + "x" * 1001 + "\n")
    with pytest.raises(DataError, match=r"prefix\.txt:2: the prefix has 1001 characters, at most 1000"):
        read_prefixes(path)


# Glossary: where a term is found ----------------------------------------------------------------------------------
def test_a_term_is_found_as_a_whole_word_only():
    g = Glossary([("cat", "Katze")])
    assert found(g, "category bobcat cats") == []
    assert found(g, "The Cat.") == [("Cat", "Katze")]
    assert found(g, "(cat), cat-like, 'cat'") == [("cat", "Katze")] * 3


def test_terms_ending_in_punctuation_need_no_boundary_on_that_side():
    g = Glossary([("C++", "C++"), ("e-mail", "E-Mail"), (".NET", ".NET")])
    assert found(g, "I write C++ and C++11.") == [("C++", "C++"), ("C++", "C++")]
    assert found(g, "XC++ is no C++") == [("C++", "C++")]  # the side ending in a letter still needs its boundary
    assert found(g, "Send an e-mail, not e-mails.") == [("e-mail", "E-Mail")]
    assert found(g, "ASP.NET") == [(".NET", ".NET")]


def test_wide_characters_make_no_boundary_fail():
    g = Glossary([("東京", "Tokyo"), ("iPhone", "iPhone"), ("タワー", "tower")])
    assert found(g, "我住在東京都") == [("東京", "Tokyo")]
    assert found(g, "我的iPhone很好") == [("iPhone", "iPhone")]
    assert found(g, "東京タワーです") == [("東京", "Tokyo"), ("タワー", "tower")]
    assert found(g, "我的iPhones很好") == []  # a narrow letter after a narrow term still counts


def test_case_is_ignored_but_forms_are_not():
    g = Glossary([("Apple", "Apfel"), ("mouse", "Maus")])
    assert found(g, "APPLE apple mice mouses") == [("APPLE", "Apfel"), ("apple", "Apfel")]


def test_whitespace_in_a_term_matches_any_run_of_whitespace():
    g = Glossary([("New York", "New York City Hall")])
    assert found(g, "New  York and New\nYork, not NewYork") == [
        ("New  York", "New York City Hall"),
        ("New\nYork", "New York City Hall"),
    ]


def test_the_leftmost_then_longest_term_wins_and_terms_do_not_overlap():
    g = Glossary([("York", "Y"), ("New York", "NY"), ("New York City", "NYC"), ("a b", "1"), ("b c d", "2")])
    assert found(g, "New York City, New York, York") == [("New York City", "NYC"), ("New York", "NY"), ("York", "Y")]
    assert found(g, "New York Cityscape") == [("New York", "NY")]  # the longer one is no whole word here
    assert found(g, "a b c d") == [("a b", "1")]  # leftmost first, even over a longer term starting later


def test_a_term_found_has_its_offsets():
    assert Glossary([("cat", "Katze")]).find("a cat") == [Term(2, 5, "cat", "Katze")]


def test_do_not_translate_entries_keep_the_text_as_it_appears():
    g = Glossary([("Roger Stone", "Roger Stone"), ("apple", "apple"), ("pear", "Pear")])
    assert found(g, "ROGER   STONE met Roger Stone") == [
        ("ROGER   STONE", "ROGER STONE"),
        ("Roger Stone", "Roger Stone"),
    ]
    assert found(g, "APPLE") == [("APPLE", "APPLE")]
    # the comparison is case-sensitive: "pear" -> "Pear" is a translation, its target as written
    assert found(g, "PEAR") == [("PEAR", "Pear")]


def test_constraints_are_the_distinct_targets_in_order_of_first_occurrence():
    g = Glossary([("cat", "Katze"), ("dog", "Hund"), ("kitty", "Katze")])
    assert g.constraints("dog, cat, kitty, dog") == ("Hund", "Katze")
    assert g.constraints("nothing here") == ()


def test_case_folding_that_differs_from_lower_still_finds_the_entry():
    # re folds final sigma with sigma, str.lower() does not: the entry is found by trying the entries
    assert found(Glossary([("λόγος", "Wort")]), "ΛΌΓΟΣ") == [("ΛΌΓΟΣ", "Wort")]


def test_an_empty_glossary_finds_nothing():
    g = Glossary([])
    assert len(g) == 0 and g.find("anything") == [] and g.constraints("x") == ()


def test_long_terms_sharing_prefixes_compile():
    g = Glossary([("a" * n, str(n)) for n in range(1, 201)])  # a trie 200 levels deep
    assert found(g, "x " + "a" * 150 + " y") == [("a" * 150, "150")]


def test_many_terms_are_each_found():
    pairs = [(f"term{i} word{i % 7}", f"T{i}") for i in range(5000)]
    g = Glossary(pairs)
    text = " ; ".join(source for source, _ in pairs[::97])
    assert [target for _, target in found(g, text)] == [target for _, target in pairs[::97]]


# Glossary: what is refused ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("a", "b"), (" ", "x")], "glossary: entry 2: the source term is empty"),
        ([("a", "")], "glossary: entry 1: the target term is empty"),
        ([("x" * 201, "y")], "glossary: entry 1: the source term has 201 characters, at most 200"),
        ([("x", "y" * 201)], "glossary: entry 1: the target term has 201 characters, at most 200"),
        (
            [("Apple", "Apfel"), ("pear", "Birne"), ("APPLE", "Äpfel")],
            "glossary: entry 3: the source term 'APPLE' is already in the glossary (glossary: entry 1) with another "
            "target: 'Apfel' there, 'Äpfel' here",
        ),
    ],
)
def test_bad_entries_are_refused(pairs, message):
    with pytest.raises(DataError) as err:
        Glossary(pairs)
    assert str(err.value) == message


def test_the_same_entry_twice_is_kept_once():
    g = Glossary([("cat", "Katze"), ("CAT", "Katze"), ("Roger Stone", "Roger Stone"), ("roger  stone", "roger stone")])
    assert len(g) == 2
    assert g.pairs == (("cat", "Katze"), ("Roger Stone", "Roger Stone"))
    assert Glossary([("x" * 200, "y" * 200)]).find("x" * 200)[0].target == "y" * 200


def test_too_many_entries_are_refused():
    with pytest.raises(DataError, match=r"^big: 100001 entries, at most 100000$"):
        Glossary([("a", "b")] * 100_001, "big")


# Glossary: merged -------------------------------------------------------------------------------------------------
def test_merged_entries_override_the_same_source_term():
    server = Glossary([("bank", "Bank"), ("cat", "Katze")], "server")
    request = Glossary([("BANK", "Ufer")], "request")
    merged = server.merged(request)
    assert found(merged, "the bank and the cat") == [("bank", "Ufer"), ("cat", "Katze")]
    assert len(merged) == 2 and merged.name == "server+request"
    assert found(server, "bank") == [("bank", "Bank")]  # the originals are unchanged


def test_merged_glossaries_find_leftmost_longest_across_both():
    server = Glossary([("New York", "NY"), ("a b", "1"), ("b c d", "2")])
    request = Glossary([("York", "Y"), ("New York City", "NYC"), ("x a", "3")])
    merged = server.merged(request)
    assert found(merged, "New York, New York City, York") == [
        ("New York", "NY"),
        ("New York City", "NYC"),
        ("York", "Y"),
    ]
    # the request's "x a" is leftmost; the server's "a b" overlaps it, so the server's next term is "b c d"
    assert found(merged, "x a b c d") == [("x a", "3"), ("b c d", "2")]


# Glossary files ---------------------------------------------------------------------------------------------------
def test_read_glossary_skips_empty_lines_and_the_bom(tmp_path):
    path = write(tmp_path, "terms.tsv", "\ufeffcat\tKatze\n\n  \nRoger Stone\tRoger Stone\r\n")
    g = read_glossary(path)
    assert g.pairs == (("cat", "Katze"), ("Roger Stone", "Roger Stone"))
    assert g.name == str(path)
    assert len(read_glossary(write(tmp_path, "empty.tsv", ""))) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a\tb\n\nc\td\nlonely\n", "terms.tsv:4: 1 field, expected 2: source term<TAB>target term"),
        ("a\tb\tc\n", "terms.tsv:1: 3 fields, expected 2: source term<TAB>target term"),
        ("a\tb\n\t b\n", "terms.tsv:2: the source term is empty"),
        (
            "a\tb\n\nA\tc\n",
            "terms.tsv:3: the source term 'A' is already in the glossary (terms.tsv:1) with another target: "
            "'b' there, 'c' here",
        ),
    ],
)
def test_bad_glossary_lines_are_refused_naming_file_and_line(tmp_path, content, message):
    path = write(tmp_path, "terms.tsv", content)
    with pytest.raises(DataError) as err:
        read_glossary(path)
    assert str(err.value) == message.replace("terms.tsv", str(path))


def test_read_glossary_refuses_bad_utf8_naming_the_line(tmp_path):
    path = write(tmp_path, "terms.tsv", b"a\tb\nc\t\xe9\n")
    with pytest.raises(DataError, match=r"terms\.tsv:2: invalid UTF-8"):
        read_glossary(path)
