"""Parsing commands: parse, evalb (argument tables and the calls they make)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .common import check_decoding, input_path

if TYPE_CHECKING:
    from ..data.trees import Tree


def cmd_evalb(args) -> int:
    from ..tasks.evalb import evalb_command

    sys.stdout.write(
        evalb_command(
            input_path(args.gold),
            input_path(args.test),
            args.params,
            strict=args.strict,
            per_sentence=args.per_sentence,
        )
    )
    return 0


def cmd_parse(args) -> int:
    from ..config import ConfigError
    from ..data import DataError, read_lines
    from ..data.trees import read_trees, words

    check_decoding(args)
    for option, given in (("--words-from-gold", args.words_from_gold), ("--scores-only", args.scores_only)):
        if given and not args.gold:
            raise ConfigError(f"{option} needs --gold TREES")
    source = input_path(args.gold if args.words_from_gold else args.input)
    if args.words_from_gold:
        lines = [" ".join(words(tree)) for tree in read_trees(source, normalized=True)]
    else:
        lines = read_lines(source, errors=args.errors, allow_empty=True)
    try:
        trees, report = parse_command(
            args.run,
            lines,
            gold_path=args.gold,
            beam=args.beam,
            alpha=args.alpha,
            max_open_run=args.max_open_run,
            device=args.device,
            progress=not args.quiet and not sys.stdout.isatty(),
            ensemble=args.ensemble,
        )
    except DataError as err:  # "line N: ..." about the input: name the file too
        message = str(err)
        if not message.startswith("line "):
            raise
        raise DataError(f"{'<stdin>' if str(source) == '-' else source}:{message[len('line ') :]}") from None
    if not args.scores_only:
        sys.stdout.write("".join(tree + "\n" for tree in trees))
    if report is not None:  # the trees go to stdout; the scores too with --scores-only, else to stderr
        print(report, file=sys.stdout if args.scores_only else sys.stderr)
    return 0


def parse_command(
    run: str | Path,
    lines: Sequence[str],
    *,
    gold_path: str | Path | None = None,
    beam: int | None = None,
    alpha: float | None = None,
    max_open_run: int | None = None,
    device: str = "auto",
    progress: bool = False,
    ensemble: Sequence[str | Path] = (),
) -> tuple[list[str], str | None]:
    """`transduce parse RUN [--input FILE] [--gold TREES]`: one tree per input line (an empty line gives ""), and
    with a gold tree file (one tree per line, line for line with the input) the scores as text: F1 with gold tags put
    back and with the parser's own tags, exact-match rate, tagging accuracy, then EVALB's summary blocks.
    `max_open_run`: overrides the run's decode.max_open_run (0: no bound). `ensemble`: more runs decoded together
    with `run` (Parser.from_runs)."""
    from ..data import DataError, resolve_path
    from ..data.trees import to_string
    from ..decoding.parser import Parser
    from ..tasks import evalb

    parser = Parser.from_runs([run, *ensemble], device=device)
    if max_open_run is not None:
        decode = dataclasses.replace(parser.decode, max_open_run=max_open_run)  # checked by ParseDecodeConfig
        parser = Parser(parser.model, parser.tokenizer, parser.vocab, decode=decode)
    gold = None
    if gold_path is not None:
        gold_file = resolve_path(gold_path)
        gold = evalb.read_sentences(gold_file, gold=True)
        empty = next((i for i, sentence in enumerate(gold, start=1) if sentence is None), None)
        if empty is not None:  # EVALB would count it as a sentence; here it would only shift the lines after it
            raise DataError(f"{gold_path}:{empty}: empty tree (a gold file holds one tree per line)")
        if len(gold) != len(lines):
            raise DataError(
                f"{gold_path} has {len(gold)} lines but the input has {len(lines)}; the gold trees "
                "must be line for line with the sentences"
            )
    trees = parser.parse_trees(list(lines), beam=beam, alpha=alpha, progress=progress)
    output = ["" if t is None else to_string(t) for t in trees]
    if gold is None:
        return output, None
    return output, _gold_report(gold, trees, tagged=parser.vocab.keep_tags, source=str(gold_path))


def _gold_report(gold: list, trees: list[Tree | None], *, tagged: bool, source: str) -> str:
    from ..data.trees import Tree
    from ..tasks import evalb

    gold_trees = [g[0] if isinstance(g, list) and len(g) == 1 else g for g in gold]
    retagged = [
        evalb.put_gold_tags(t, g) if isinstance(t, Tree) and isinstance(g, Tree) else t
        for t, g in zip(trees, gold_trees)
    ]
    params = evalb.default_params()
    with_gold = evalb.score_corpus(gold, retagged, params, strict=True)
    lines = [
        f"scored against {source}: {len(trees)} sentences (EVALB, COLLINS.prm + DELETE_LABEL ROOT, strict)",
        f"F1 (gold tags put back)   = {with_gold.f1:6.2f}",
    ]
    own = evalb.score_corpus(gold, trees, params, strict=True) if tagged else None
    if own is not None:
        lines.append(f"F1 (predicted tags)       = {own.f1:6.2f}")
    lines.append(f"Exact match               = {with_gold.all.complete_match:6.2f}  (gold tags put back)")
    if own is not None:
        lines.append(f"Tagging accuracy          = {own.all.tagging_accuracy:6.2f}")
    else:
        lines.append("(the model writes XX for every POS tag: no predicted-tag F1 or tagging accuracy)")
    lines += ["", "=== EVALB, gold tags put back ===", evalb.format_report(with_gold)]
    if own is not None:
        lines += ["=== EVALB, predicted tags ===", evalb.format_report(own)]
    return "\n".join(lines)


def register(sub) -> None:
    p = sub.add_parser("parse", help="constituency trees, one per input line (whitespace-tokenized words)")
    p.add_argument("run", help="a parsing run directory, or a .safetensors weights file inside one")
    p.add_argument(
        "--ensemble",
        nargs="+",
        default=[],
        metavar="RUN",
        help="parse with RUN and these parsing runs (or weights files) together: the mean of their next-token "
        "distributions at every step; they must share RUN's tokenizer, target vocabulary and word pointer",
    )
    p.add_argument("--input", help="read this file instead of stdin")
    p.add_argument("--gold", help="gold trees, line for line with the input: also print EVALB scores")
    p.add_argument("--words-from-gold", action="store_true", help="parse the words of the --gold trees")
    p.add_argument("--scores-only", action="store_true", help="with --gold: print only the scores")
    p.add_argument("--beam", type=int, default=None, help="beam size (default: the run's, 21 in gum-parse)")
    p.add_argument("--alpha", type=float, default=None, help="length penalty alpha (default: the run's)")
    p.add_argument(
        "--max-open-run",
        type=int,
        default=None,
        help="most opening brackets in a row (default: the run's decode.max_open_run; 0: no bound)",
    )
    p.add_argument("--device", default="auto")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--errors", choices=["strict", "replace"], default="strict", help="invalid UTF-8 input")
    p.set_defaults(func=cmd_parse, batch_tokens=None, nbest=1)

    p = sub.add_parser("evalb", help="EVALB bracket scores of parses (COLLINS.prm + DELETE_LABEL ROOT by default)")
    p.add_argument("gold", help="gold trees, one per line")
    p.add_argument("test", help="parser output, one tree per line")
    p.add_argument("--params", help="an EVALB .prm parameter file")
    p.add_argument("--strict", action="store_true", help="error and skip sentences count as zero matched")
    p.add_argument("--per-sentence", action="store_true", help="also print EVALB's per-sentence rows")
    p.set_defaults(func=cmd_evalb)
