"""Bracket scoring exactly as EVALB (Sekine and Collins 1997, revised 2006), the scorer behind every published WSJ F1.

The rules, as EVALB's README and program define them, and as this module and the two beside it apply them:
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

One port of EVALB's evalb.c in three modules, each a part of the program: evalb_params.py reads the parameters
(`Params`, `COLLINS`, `default_params`, `read_params`); evalb_scoring.py reads each side of a sentence, repairs
quotes, matches brackets and totals the rows (`score_sentence`, `score_corpus`, `SentenceScore`, `Summary`,
`Result`); this module writes EVALB's report (`format_report`), reads the files (`read_sentences`,
`put_gold_tags`) and runs `transduce evalb` (`evalb_command`). Every public name of the three is importable
from here, `transduce.tasks.evalb`.
"""

from __future__ import annotations

from pathlib import Path

from ..data.trees import Tree, TreeError, parse_trees, read_lines
from .evalb_params import COLLINS, Params, default_params, read_params
from .evalb_scoring import ERROR, OK, SKIP, Result, Sentence, SentenceScore, Summary, score_corpus, score_sentence

__all__ = [
    "COLLINS",
    "ERROR",
    "OK",
    "Params",
    "Result",
    "SKIP",
    "Sentence",
    "SentenceScore",
    "Summary",
    "default_params",
    "evalb_command",
    "format_report",
    "put_gold_tags",
    "read_params",
    "read_sentences",
    "score_corpus",
    "score_sentence",
]


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
