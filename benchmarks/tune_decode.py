"""Choose beam size and length penalty on the validation set only (issue 17: nothing is tuned on a test set).

A tool, not a figure: choosing beam and alpha on validation (docs/translation.md).

    .venv/bin/python benchmarks/tune_decode.py runs/m30k-tiny/averaged.safetensors \
        [--beam 1 --beam 4 --beam 5 --beam 8] [--alpha 0.6 --alpha 1.0 ...] [--mbr none --mbr bleu ...]
        [--src ... --ref ...]

Translates the validation sources (default: Multi30k val, the run's languages) with every beam x alpha x MBR
setting and prints cased sacreBLEU and chrF for each, then the best by BLEU. Prints one JSON line per setting as
well. The beam's hypotheses are found once per beam x alpha; each MBR utility reorders the same n best.
"""

from __future__ import annotations

import argparse
import json

import torch

from transduce.config import MBR_UTILITIES, Config, read_config
from transduce.data import read_lines, resolve_path
from transduce.decoding.mbr import mbr_rerank
from transduce.decoding.translator import Translator
from transduce.metrics import score
from transduce.runs import find_weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="run directory or weights file in one")
    parser.add_argument("--src", help="validation sources (default: multi30k/val.SRC.gz of the run's languages)")
    parser.add_argument("--ref", help="validation references (default: multi30k/val.TGT.gz)")
    parser.add_argument("--beam", type=int, action="append")
    parser.add_argument("--alpha", type=float, action="append")
    parser.add_argument("--mbr", choices=MBR_UTILITIES, action="append", help="default: none")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--ensemble", nargs="+", default=[], metavar="RUN", help="decode RUN with these as one")
    args = parser.parse_args()
    translator = Translator.from_runs([args.run, *args.ensemble], device=args.device)
    run_dir, _ = find_weights(args.run)
    data = read_config(run_dir / "config.json", Config).data  # the run's languages
    src = args.src or f"multi30k/val.{data.src}.gz"
    ref = args.ref or f"multi30k/val.{data.tgt}.gz"
    sources, references = read_lines(resolve_path(src)), read_lines(resolve_path(ref))
    results = []
    for beam in args.beam or [1, 4, 5, 8]:
        for alpha in (args.alpha or [0.6, 1.0]) if beam > 1 else [0.6]:  # greedy ignores alpha
            mbrs = (args.mbr or ["none"]) if beam > 1 else ["none"]  # greedy has one hypothesis
            found = {}
            if "none" in mbrs:  # the plain search stops once its best is safe: decoded on its own
                found["none"] = translator.translate_nbest(sources, beam=beam, alpha=alpha, mbr="none")
            if any(m != "none" for m in mbrs):  # MBR waits for the beam's n best: decoded once for every utility
                found["mbr"] = translator.translate_nbest(sources, beam=beam, alpha=alpha, nbest=beam, mbr="none")
            for mbr in mbrs:
                pool = found["none" if mbr == "none" else "mbr"]
                hyps = [mbr_rerank(h, mbr)[0].text if h else "" for h in pool]
                s = score(hyps, references)
                row = {"beam": beam, "alpha": alpha, "mbr": mbr, "bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2)}
                results.append(row)
                print(json.dumps(row), flush=True)
    best = max(results, key=lambda r: r["bleu"])
    print(f"\n{src} -> {ref}, {len(sources)} sentences, threads {torch.get_num_threads()}")
    print("| beam | alpha | MBR | BLEU | chrF |\n|---|---|---|---|---|")
    for r in results:
        print(f"| {r['beam']} | {r['alpha']} | {r['mbr']} | {r['bleu']:.2f} | {r['chrf']:.2f} |")
    print(
        f"best on validation: beam {best['beam']}, alpha {best['alpha']}, MBR {best['mbr']} (BLEU {best['bleu']:.2f})"
    )


if __name__ == "__main__":
    main()
