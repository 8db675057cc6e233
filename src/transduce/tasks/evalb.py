# Over 500 lines on purpose: one port of EVALB's evalb.c (parameters, scoring, report), kept whole to compare with it.
"""Bracket scoring exactly as EVALB (Sekine and Collins 1997, revised 2006), the scorer behind every published WSJ F1.

The rules, as EVALB's README and program define them, and as this module applies them:
- Parameters come from a .prm file: DEBUG, MAX_ERROR, CUTOFF_LEN, LABELED, DELETE_LABEL, DELETE_LABEL_FOR_LENGTH,
  QUOTE_LABEL, EQ_LABEL, EQ_WORD (`read_params`). COLLINS.prm is the standard file; `default_params` adds
  DELETE_LABEL ROOT so that trees rooted in ROOT (GUM, this project's parser) are scored in the usual setting.
- A preterminal whose tag is a DELETE_LABEL (COLLINS.prm: punctuation and -NONE-) is removed with its word, in both
  trees. The length of a sentence (for the CUTOFF_LEN block) counts the gold words whose tag is not a
  DELETE_LABEL_FOR_LENGTH, so punctuation counts there even though it is not scored.
- A constituent's label is cut at its first '-' or '=' (NP-SBJ-1 -> NP). Constituents that span no word once words
  are removed are dropped, and so are those whose label is a DELETE_LABEL (the root: TOP, ROOT).
- Brackets match as a multiset: each gold bracket takes the first unmatched test bracket with the same span and an
  equal label (EQ_LABEL pairs count as equal; LABELED 0 ignores labels).
- A test sentence without words is skipped (status 2); one whose words differ from the gold words in number or
  spelling (EQ_WORD pairs are equal) is an error sentence (status 1), unless QUOTE_LABEL repairs it (below). Both
  are left out of every total; EVALB stops after MAX_ERROR + 1 error sentences. `strict=True` (this project's
  addition) keeps them in: their gold brackets and words count, with nothing matched, so a parser cannot gain by
  failing on hard sentences.
- Crossing brackets: test brackets that overlap some gold bracket without nesting. Tagging accuracy compares the tags
  of the (undeleted) words.
- QUOTE_LABEL (EVALB 2006, new.prm and nk.prm): a quote word (', " or /) whose tag is a QUOTE_LABEL is a quote
  terminal. When the two sides differ in word count, a quote terminal that one side deletes (tag a DELETE_LABEL) and
  the other keeps, at the same word position and with a different tag, is put back into the side that deleted it,
  inside the brackets that were open around it (`_fix_quotes`); the sentence is then scored if the words agree.

The per-sentence rows follow EVALB's 1997 program, whose output is the distribution's `sample.rsl` (an error or
skipped sentence shows its gold word count in the Words column); the totals row and the summary follow the 2006
program (crossing total = sum of the rows; an FMeasure line). Departures, none of which changes a score that EVALB
prints: no fixed limits on sentence length, bracket count or quote terminals; no debug printout; FMeasure is 0.00
where EVALB prints nan (no bracket at all); an unreadable test line is an error sentence, a gold file that cannot be
read, or test and gold files with different numbers of lines, stop with a TreeError (EVALB prints an error and goes
on, or loops).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..data.trees import Tree, TreeError, parse_trees, read_lines

# A sentence to score: one tree, the top-level trees of one line, None for an empty line, or (test side only) the
# TreeError that reading its line raised.
Sentence = Tree | Sequence[Tree] | TreeError | None

OK, ERROR, SKIP = 0, 1, 2  # EVALB's status column


@dataclass(frozen=True)
class Params:
    """EVALB's parameters; the defaults are the program's own when no parameter file is given."""

    debug: int = 0
    max_error: int = 10
    cutoff_len: int = 40
    labeled: bool = True
    delete_labels: tuple[str, ...] = ()
    delete_labels_for_length: tuple[str, ...] = ()
    quote_labels: tuple[str, ...] = ()
    eq_labels: tuple[tuple[str, str], ...] = ()
    eq_words: tuple[tuple[str, str], ...] = ()

    def label_equal(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_labels or (b, a) in self.eq_labels

    def word_equal(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_words or (b, a) in self.eq_words


# EVALB's COLLINS.prm, the standard setting of published WSJ results (comments dropped, settings in file order).
COLLINS = Params(
    debug=0,
    max_error=10,
    cutoff_len=40,
    labeled=True,
    delete_labels=("TOP", "-NONE-", ",", ":", "``", "''", "."),
    delete_labels_for_length=("-NONE-",),
    eq_labels=(("ADVP", "PRT"),),
)


def default_params() -> Params:
    """COLLINS.prm plus DELETE_LABEL ROOT: the root bracket of a ROOT-rooted tree is not scored, as TOP is not."""
    return replace(COLLINS, delete_labels=(*COLLINS.delete_labels, "ROOT"))


_INT_KEYS = {"DEBUG": "debug", "MAX_ERROR": "max_error", "CUTOFF_LEN": "cutoff_len", "LABELED": "labeled"}


def read_params(path: str | Path) -> Params:
    """Parameters from an EVALB .prm file: one `KEYWORD value` per line; lines starting with '#' and lines shorter
    than 3 characters are ignored (EVALB's rules). Unknown keywords and malformed values are refused (EVALB only
    warns, which would let a misspelt DELETE_LABEL change scores silently)."""
    values: dict[str, int] = {}
    lists: dict[str, list[str]] = {"DELETE_LABEL": [], "DELETE_LABEL_FOR_LENGTH": [], "QUOTE_LABEL": []}
    pairs: dict[str, list[tuple[str, str]]] = {"EQ_LABEL": [], "EQ_WORD": []}
    for number, text in read_lines(path):
        text = text.rstrip()
        if text.startswith("#") or len(text) < 3:
            continue
        parts = text.split(None, 1)  # EVALB: the value starts after the blanks that follow the keyword
        key, value = parts[0], parts[1].strip() if len(parts) == 2 else ""

        def fail(reason: str, number: int = number) -> TreeError:
            return TreeError(reason, source=str(path), line=number)

        if not value:
            raise fail(f"{key} has no value")
        if key in _INT_KEYS:
            if not re.fullmatch(r"[+-]?\d+", value.strip()):
                raise fail(f"{key} needs a whole number, not {value!r}")
            values[_INT_KEYS[key]] = int(value)
        elif key in pairs:
            pair = value.split()
            if len(pair) != 2:
                raise fail(f"{key} needs two values, not {len(pair)}")
            pairs[key].append((pair[0], pair[1]))
        elif key in lists:
            lists[key].append(value)
        else:
            raise fail(
                f"unknown keyword {key!r} (DEBUG, MAX_ERROR, CUTOFF_LEN, LABELED, DELETE_LABEL, "
                "DELETE_LABEL_FOR_LENGTH, QUOTE_LABEL, EQ_LABEL, EQ_WORD)"
            )
    defaults = Params()
    return Params(
        debug=values.get("debug", defaults.debug),
        max_error=values.get("max_error", defaults.max_error),
        cutoff_len=values.get("cutoff_len", defaults.cutoff_len),
        labeled=values["labeled"] != 0 if "labeled" in values else defaults.labeled,
        delete_labels=tuple(lists["DELETE_LABEL"]),
        delete_labels_for_length=tuple(lists["DELETE_LABEL_FOR_LENGTH"]),
        quote_labels=tuple(lists["QUOTE_LABEL"]),
        eq_labels=tuple(pairs["EQ_LABEL"]),
        eq_words=tuple(pairs["EQ_WORD"]),
    )


# --------------------------------------------------------------------------------------------------------- scoring


_QUOTE_WORDS = ("'", '"', "/")  # the only words EVALB takes for quote terminals, whatever QUOTE_LABEL lists

_Bracket = tuple[int, int, str]


@dataclass
class _Quote:
    """A quote terminal as read: its word and tag, the word position where it stands (where it would stand, if its
    tag is deleted), how many brackets opened before it, and the brackets open around it (indices into spans)."""

    word: str
    tag: str
    position: int
    brackets_before: int
    enclosing: tuple[int, ...]


@dataclass
class _Side:
    """One sentence as EVALB sees it: the undeleted words and tags, every bracket [start, end, label] in the order
    the brackets open (empty and deleted ones too: `_scored_brackets` leaves them out), the length used for the
    CUTOFF_LEN block, and the quote terminals (QUOTE_LABEL)."""

    words: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    spans: list[list] = field(default_factory=list)
    length: int = 0
    quotes: list[_Quote] = field(default_factory=list)


def _truncate(label: str) -> str:
    """EVALB cuts a constituent label at its first '-' or '=', wherever it is (so a label that starts with '-' is
    cut to nothing)."""
    return re.split(r"[-=]", label, maxsplit=1)[0]


def _read_side(sentence: Tree | Sequence[Tree] | None, params: Params) -> _Side:
    roots = [] if sentence is None else [sentence] if isinstance(sentence, Tree) else list(sentence)
    side = _Side()
    open_spans: list[int] = []

    def visit(node: Tree) -> None:
        if node.is_preterminal:
            # EVALB compares tags with the deletion and quote lists as they are written: no truncation, no EQ_LABEL.
            word: str = node.children[0]  # type: ignore[assignment]
            side.length += node.label not in params.delete_labels_for_length
            if node.label in params.quote_labels and word in _QUOTE_WORDS:
                side.quotes.append(_Quote(word, node.label, len(side.words), len(side.spans), tuple(open_spans)))
            if node.label not in params.delete_labels:
                side.words.append(word)
                side.tags.append(node.label)
            return
        span = [len(side.words), 0, node.label]
        open_spans.append(len(side.spans))
        side.spans.append(span)
        for child in node.children:
            if isinstance(child, Tree):
                visit(child)
        open_spans.pop()
        span[1] = len(side.words)

    for root in roots:
        visit(root)
    return side


def _scored_brackets(side: _Side, params: Params) -> list[_Bracket]:
    """The brackets EVALB scores: labels truncated; those that span no word, or whose label is a DELETE_LABEL
    (EQ_LABEL applies), left out."""
    brackets = []
    for start, end, label in side.spans:
        label = _truncate(label)
        if start == end or any(params.label_equal(label, d) for d in params.delete_labels):
            continue
        brackets.append((start, end, label))
    return brackets


def _reinsert(side: _Side, quote: _Quote) -> None:
    """EVALB's reinsert_term: the quote's word and tag go back in at its position; brackets opened after it move one
    word right, and those open around it grow by one word."""
    side.words.insert(quote.position, quote.word)
    side.tags.insert(quote.position, quote.tag)
    for span in side.spans[quote.brackets_before :]:
        span[0] += 1
        span[1] += 1
    for k in quote.enclosing:
        side.spans[k][1] += 1


def _fix_quotes(gold: _Side, test: _Side, params: Params) -> None:
    """EVALB's fix_quote (run only when the word counts differ), in place. Each test quote in turn is paired with
    every gold quote that has its position and another tag; where exactly one of the two tags is a DELETE_LABEL,
    that quote is put back into its side, and the positions of its side's quotes from it on move one word right.
    As in EVALB, the position compared is the test quote's when its turn comes, each side counting its own words."""
    deleted = params.delete_labels
    for t_index, t_quote in enumerate(test.quotes):
        position = t_quote.position
        for g_index, g_quote in enumerate(gold.quotes):
            if g_quote.position != position or g_quote.tag == t_quote.tag:
                continue
            if g_quote.tag in deleted and t_quote.tag not in deleted:
                side, quote, later = gold, g_quote, gold.quotes[g_index:]
            elif t_quote.tag in deleted and g_quote.tag not in deleted:
                side, quote, later = test, t_quote, test.quotes[t_index:]
            else:
                continue
            _reinsert(side, quote)
            for q in later:
                q.position += 1


def _align(gold: _Side, test: _Side, params: Params) -> tuple[_Side, _Side] | None:
    """The two sides with the same words (EQ_WORD pairs are equal), or None: an error sentence. Where the word counts
    differ, the QUOTE_LABEL repair is tried first, on copies (an error row shows the sentence as read)."""
    if len(gold.words) != len(test.words) and gold.quotes and test.quotes:
        gold, test = copy.deepcopy(gold), copy.deepcopy(test)
        _fix_quotes(gold, test, params)
    if len(gold.words) != len(test.words) or not all(map(params.word_equal, gold.words, test.words)):
        return None
    return gold, test


def _match(gold: list[_Bracket], test: list[_Bracket], params: Params) -> int:
    """Multiset matching in EVALB's order: each gold bracket takes the first unmatched test bracket with its span
    and an equal label (the order matters only when EQ_LABEL pairs chain, A=B and B=C but not A=C)."""
    by_span: dict[tuple[int, int], list[int]] = {}
    for j, (start, end, _) in enumerate(test):
        by_span.setdefault((start, end), []).append(j)
    used = [False] * len(test)
    matched = 0
    for start, end, label in gold:
        for j in by_span.get((start, end), ()):
            if not used[j] and (not params.labeled or params.label_equal(label, test[j][2])):
                used[j] = True
                matched += 1
                break
    return matched


def _crossing(gold: list[_Bracket], test: list[_Bracket]) -> int:
    """Test brackets that overlap a gold bracket without either containing the other (counted per test bracket)."""
    return sum(any(g0 < t0 < g1 < t1 or t0 < g0 < t1 < g1 for g0, g1, _ in gold) for t0, t1, _ in test)


@dataclass(frozen=True)
class SentenceScore:
    """One row of EVALB's table."""

    id: int
    length: int  # gold words not in DELETE_LABEL_FOR_LENGTH
    status: int  # OK, ERROR or SKIP
    matched: int
    gold_brackets: int
    test_brackets: int
    crossing: int
    words: int
    correct_tags: int

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test_brackets if self.test_brackets else 0.0

    @property
    def tag_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words else 0.0


def score_sentence(
    ident: int, gold: Sentence, test: Sentence, params: Params, *, strict: bool = False
) -> SentenceScore:
    """Score one sentence (`ident` is its row number). An unreadable gold sentence is the caller's error."""
    if isinstance(gold, TreeError):
        raise gold
    g = _read_side(gold, params)
    t = None if isinstance(test, TreeError) else _read_side(test, params)
    aligned = None if t is None or not t.words else _align(g, t, params)
    if aligned is not None:
        g_fixed, t_fixed = aligned
        gold_b, test_b = _scored_brackets(g_fixed, params), _scored_brackets(t_fixed, params)
        return SentenceScore(
            ident,
            g.length,
            OK,
            _match(gold_b, test_b, params),
            len(gold_b),
            len(test_b),
            _crossing(gold_b, test_b),
            len(g_fixed.words),
            sum(map(params.label_equal, g_fixed.tags, t_fixed.tags)),
        )
    status = SKIP if t is not None and not t.words else ERROR
    # Not scored: EVALB shows zeros (and, in its 1997 program, the gold word count); strict mode keeps the counts.
    gold_n = len(_scored_brackets(g, params)) if strict else 0
    test_n = len(_scored_brackets(t, params)) if strict and t is not None else 0
    return SentenceScore(ident, g.length, status, 0, gold_n, test_n, 0, len(g.words), 0)


@dataclass
class Summary:
    """Totals over a set of sentences, and the figures of EVALB's summary block."""

    sentences: int = 0
    errors: int = 0
    skipped: int = 0
    matched: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    complete: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less_crossing: int = 0
    words: int = 0
    correct_tags: int = 0

    def add(self, row: SentenceScore, *, strict: bool) -> None:
        self.sentences += 1
        self.errors += row.status == ERROR
        self.skipped += row.status == SKIP
        if row.status != OK and not strict:
            return
        self.matched += row.matched
        self.gold_brackets += row.gold_brackets
        self.test_brackets += row.test_brackets
        self.words += row.words
        self.correct_tags += row.correct_tags
        if row.status == OK:  # sentence-level figures are over the valid sentences, in strict mode too
            self.complete += row.gold_brackets == row.test_brackets == row.matched
            self.crossing += row.crossing
            self.no_crossing += row.crossing == 0
            self.two_or_less_crossing += row.crossing <= 2

    @property
    def valid(self) -> int:
        return self.sentences - self.errors - self.skipped

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets > 0 else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test_brackets if self.test_brackets > 0 else 0.0

    @property
    def fmeasure(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r > 0 else 0.0

    @property
    def complete_match(self) -> float:
        return 100.0 * self.complete / self.valid if self.valid > 0 else 0.0

    @property
    def average_crossing(self) -> float:
        return 1.0 * self.crossing / self.valid if self.valid > 0 else 0.0

    @property
    def no_crossing_rate(self) -> float:
        return 100.0 * self.no_crossing / self.valid if self.valid > 0 else 0.0

    @property
    def two_or_less_rate(self) -> float:
        return 100.0 * self.two_or_less_crossing / self.valid if self.valid > 0 else 0.0

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words > 0 else 0.0


@dataclass
class Result:
    """Per-sentence rows, the totals over all sentences, and over those of length <= params.cutoff_len."""

    params: Params
    strict: bool
    rows: list[SentenceScore] = field(default_factory=list)
    all: Summary = field(default_factory=Summary)
    short: Summary = field(default_factory=Summary)

    @property
    def f1(self) -> float:
        return self.all.fmeasure


def score_corpus(
    gold_trees: Sequence[Sentence], test_trees: Sequence[Sentence], params: Params | None = None, strict: bool = False
) -> Result:
    """Score parallel sequences of gold and test sentences as EVALB does (params default: `default_params()`).

    Raises TreeError when the sequences differ in length, or (not strict) after MAX_ERROR + 1 error sentences, where
    EVALB stops: many errors mean the two files are not tokenized alike, and a score over the rest would mislead."""
    params = default_params() if params is None else params
    if len(gold_trees) != len(test_trees):
        raise TreeError(f"{len(gold_trees)} gold sentences but {len(test_trees)} test sentences")
    result = Result(params, strict)
    for ident, (gold, test) in enumerate(zip(gold_trees, test_trees), start=1):
        row = score_sentence(ident, gold, test, params, strict=strict)
        result.rows.append(row)
        result.all.add(row, strict=strict)
        if row.length <= params.cutoff_len:
            result.short.add(row, strict=strict)
        if not strict and result.all.errors > params.max_error + 1:
            raise TreeError(
                f"sentence {ident}: more than {params.max_error + 1} error sentences (words or length "
                f"differ from the gold); EVALB stops here (MAX_ERROR {params.max_error})"
            )
    return result


# -------------------------------------------------------------------------------------------------------- report

_HEADER = (
    "  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
    " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
)
_RULE = "=" * 76


def _row(r: SentenceScore) -> str:
    return (
        f"{r.id:4d}  {r.length:3d}    {r.status:d}  {r.recall:6.2f} {r.precision:6.2f}   {r.matched:3d}    "
        f"{r.gold_brackets:3d}  {r.test_brackets:3d}    {r.crossing:3d}   {r.words:4d}  {r.correct_tags:4d}   "
        f"{r.tag_accuracy:6.2f}"
    )


def _totals_row(s: Summary) -> str:
    brackets = ""
    if s.gold_brackets > 0 and s.test_brackets > 0:  # EVALB leaves the bracket columns blank otherwise
        brackets = (
            f"                {s.recall:6.2f} {s.precision:6.2f} {s.matched:6d} {s.gold_brackets:5d} "
            f"{s.test_brackets:5d}  {s.crossing:5d}"
        )
    return brackets + f"  {s.words:5d} {s.correct_tags:5d}   {s.tagging_accuracy:6.2f}"


def _summary_block(title: str, s: Summary) -> list[str]:
    return [
        "",
        f"-- {title} --",
        f"Number of sentence        = {s.sentences:6d}",
        f"Number of Error sentence  = {s.errors:6d}",
        f"Number of Skip  sentence  = {s.skipped:6d}",
        f"Number of Valid sentence  = {s.valid:6d}",
        f"Bracketing Recall         = {s.recall:6.2f}",
        f"Bracketing Precision      = {s.precision:6.2f}",
        f"Bracketing FMeasure       = {s.fmeasure:6.2f}",
        f"Complete match            = {s.complete_match:6.2f}",
        f"Average crossing          = {s.average_crossing:6.2f}",
        f"No crossing               = {s.no_crossing_rate:6.2f}",
        f"2 or less crossing        = {s.two_or_less_rate:6.2f}",
        f"Tagging accuracy          = {s.tagging_accuracy:6.2f}",
    ]


def format_report(result: Result, per_sentence: bool = False) -> str:
    """EVALB's output: with `per_sentence`, the table of rows and the totals row, then the summary block for all
    sentences and for length <= CUTOFF_LEN. Strict scoring says so in one line above the summary."""
    lines: list[str] = []
    if per_sentence:
        lines += [_HEADER + _RULE, *map(_row, result.rows), _RULE, _totals_row(result.all)]
    if result.strict:
        lines.append("(strict: error and skip sentences are scored as 0 matched brackets, not left out)")
    lines.append("=== Summary ===")
    lines += _summary_block("All", result.all)
    lines += _summary_block(f"len<={result.params.cutoff_len}", result.short)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- files and gold tags


def put_gold_tags(test: Tree, gold: Tree) -> Tree:
    """`test` with its POS tags replaced by the gold tags: the usual published setting, where a parser is scored on
    its brackets given gold tags. The words must be the same (gold -NONE- elements aside); otherwise `test` is
    returned unchanged and the scorer reports the sentence as an error."""
    gold_leaves = [(node.children[0], node.label) for node in gold.preterminals() if node.label != "-NONE-"]
    test_leaves = list(test.preterminals())
    if [w for w, _ in gold_leaves] != [node.children[0] for node in test_leaves]:
        return test
    tags = iter(tag for _, tag in gold_leaves)

    def rebuild(node: Tree) -> Tree:
        if node.is_preterminal:
            return Tree(next(tags), list(node.children))
        return Tree(node.label, [rebuild(c) if isinstance(c, Tree) else c for c in node.children])

    return rebuild(test)


def read_sentences(path: str | Path, *, gold: bool) -> list[Sentence]:
    """One sentence per line, read as EVALB reads a file: an empty line is None, a line may hold several top-level
    trees, constituents without words are allowed. A line that cannot be read stops a gold file (TreeError naming
    file and line); in a test file it becomes that line's TreeError, scored as an error sentence."""
    sentences: list[Sentence] = []
    for number, text in read_lines(path):
        if not text.strip():
            sentences.append(None)
            continue
        try:
            trees = parse_trees(text, source=str(path), line=number, allow_empty=True)
        except TreeError as e:
            if gold:
                raise
            sentences.append(e)
            continue
        sentences.append(trees)
    return sentences


def _empty_lines_hint(files) -> str:
    """Where the counts differ because of empty lines, name them: an empty line is a sentence of its own to EVALB
    (in a test file a parse that failed), so one blank line too many shifts every pair after it."""
    named = []
    for path, sentences in files:
        empty = [str(i + 1) for i, s in enumerate(sentences) if s is None]
        if len(empty) == 1:
            named.append(f"{path}:{empty[0]} is empty")
        elif empty:
            more = f" and {len(empty) - 3} more" if len(empty) > 3 else ""
            named.append(f"{path} has empty lines {', '.join(empty[:3])}{more}")
    if not named:
        return ""
    return " (" + "; ".join(named) + ": an empty line counts as a sentence)"


def evalb_command(
    gold_path: str | Path,
    test_path: str | Path,
    params_path: str | Path | None = None,
    strict: bool = False,
    per_sentence: bool = False,
) -> str:
    """`transduce evalb GOLD TEST [--params FILE] [--strict] [--per-sentence]`: the report, as text. Without
    `params_path` the parameters are `default_params()` (COLLINS.prm plus DELETE_LABEL ROOT)."""
    params = read_params(params_path) if params_path is not None else default_params()
    gold = read_sentences(gold_path, gold=True)
    test = read_sentences(test_path, gold=False)
    for path, sentences in ((gold_path, gold), (test_path, test)):
        if not sentences:  # an all-zero report for nothing scored would read as a result
            raise TreeError(f"{path}: the file is empty (no trees to score)")
    if len(gold) != len(test):
        raise TreeError(
            f"{gold_path} has {len(gold)} lines but {test_path} has {len(test)}; EVALB pairs them line by line"
            + _empty_lines_hint(((gold_path, gold), (test_path, test)))
        )
    return format_report(score_corpus(gold, test, params, strict=strict), per_sentence=per_sentence)
