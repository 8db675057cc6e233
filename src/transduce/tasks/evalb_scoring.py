"""EVALB's scoring, sentence by sentence and over a corpus: each side of a sentence read as EVALB reads it
(words, tags, brackets, quote terminals), the QUOTE_LABEL repair, the alignment of the words, bracket matching and
crossing brackets (`score_sentence`, one `SentenceScore` row), and the totals of EVALB's summary (`Summary`,
`Result`, `score_corpus`). The rules are listed in evalb.py's docstring; the parameters come from
evalb_params.py."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..data.trees import Tree, TreeError
from .evalb_params import Params, default_params

# A sentence to score: one tree, the top-level trees of one line, None for an empty line, or (test side only) the
# TreeError that reading its line raised.
Sentence = Tree | Sequence[Tree] | TreeError | None

OK, ERROR, SKIP = 0, 1, 2  # EVALB's status column


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
