"""How much of a parser's F1 loss is its tagging: decode dev with every leaf forced to the gold POS tag.

    .venv/bin/python benchmarks/research/parse_oracle_tags.py runs/X/averaged.safetensors [--beam 21] [--gold TREES]

A diagnostic, not a parsing mode: the tree constraint is bound as usual, and on top of it each row's next leaf may
only be the gold tag of the word it stands for (every other leaf token is masked out), so the search still chooses
all of the structure but no tag. Prints the usual score lines (`transduce parse --gold`): with every tag right, "F1
(gold tags put back)" and "F1 (predicted tags)" are the same, and the gap to the same weights' ordinary F1 bounds
what better tagging alone could bring. Under greedy search the forced tags can cost structure (a masked tag the model
preferred leaves "(X" or ")" as its best allowed token), so read it with a beam. The gold tags ride in a field the
constraint state gains here (`GoldState`), which the search reorders with the beams like every other.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator

import torch

from transduce.cli.parsing import _gold_report
from transduce.data import resolve_path
from transduce.data.trees import read_trees, tags, words
from transduce.decoding import constraints
from transduce.decoding.parser import Parser
from transduce.tasks import evalb


@dataclasses.dataclass(frozen=True)
class GoldState(constraints.TreeState):
    gold: torch.Tensor  # (N, most words + 1) the gold tag id of each row's words, in order


@contextlib.contextmanager
def gold_leaves(parser: Parser, table: dict[tuple[str, ...], list[int]]) -> Iterator[None]:
    """Within the block, `parser` may emit as the i-th leaf of a sentence only table[words][i]."""
    current: dict[str, torch.Tensor] = {}
    parse_batch = Parser._parse_batch
    start = constraints.TreeConstraint.start
    allowed = constraints.TreeConstraint.allowed

    def batch_with_tags(self, sentences, *args, **kwargs):  # type: ignore[no-untyped-def]
        rows = [table[tuple(s)] for s in sentences]
        width = max(map(len, rows)) + 1  # + one slot for "every word used"
        current["tags"] = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        return parse_batch(self, sentences, *args, **kwargs)

    def start_with_tags(self, max_len):  # type: ignore[no-untyped-def]
        # TreeConstraint.reorder keeps the state's class and reorders its gold field with the beam
        base = start(self, max_len)
        shared = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
        return GoldState(**shared, gold=current["tags"].to(max_len.device))

    def allowed_gold_leaf(self, state):  # type: ignore[no-untyped-def]
        mask = allowed(self, state)  # (N, V)
        gold = state.gold.gather(1, state.used.clamp(max=state.gold.size(1) - 1).view(-1, 1))
        leaf = self.kinds.eq(constraints.LEAF).view(1, -1)
        return mask & (~leaf | torch.arange(mask.size(1), device=mask.device).view(1, -1).eq(gold))

    Parser._parse_batch = batch_with_tags  # type: ignore[method-assign]
    constraints.TreeConstraint.start = start_with_tags  # type: ignore[method-assign]
    constraints.TreeConstraint.allowed = allowed_gold_leaf  # type: ignore[method-assign]
    try:
        yield
    finally:
        Parser._parse_batch = parse_batch  # type: ignore[method-assign]
        constraints.TreeConstraint.start = start  # type: ignore[method-assign]
        constraints.TreeConstraint.allowed = allowed  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a parsing run directory or a weights file inside one")
    ap.add_argument("--gold", default="gum_const/dev.trees")
    ap.add_argument("--beam", type=int, default=21)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    parser = Parser.from_run(args.run, device=args.device)
    if not parser.vocab.keep_tags:
        raise SystemExit("the model writes XX for every tag: there is no tag to force")
    gold_path = resolve_path(args.gold)
    gold_trees = read_trees(gold_path, normalized=True)
    sentences = [words(t) for t in gold_trees]
    table: dict[tuple[str, ...], list[int]] = {}
    for w, t in zip(sentences, gold_trees):  # the patched batch finds a sentence's tags by its words
        ids = parser.vocab.encode(tags(t))
        if table.setdefault(tuple(w), ids) != ids:
            raise SystemExit(f"{args.gold}: the same words twice with different tags: {' '.join(w)!r}")
    with gold_leaves(parser, table):
        trees = parser.parse_words(sentences, beam=args.beam)
    gold = evalb.read_sentences(gold_path, gold=True)
    print(f"beam {args.beam}, every leaf forced to the gold tag")
    print(_gold_report(gold, trees, tagged=True, source=args.gold))


if __name__ == "__main__":
    main()
