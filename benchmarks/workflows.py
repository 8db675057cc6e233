"""Issue 62's measurements of the workflows beyond one run, on Multi30k (and newstest2014), by step budgets (the same
number of updates for every model of a comparison, so a busy machine changes the time taken, not the result):

  backtranslation  Multi30k train cut (seed SEED) into a parallel half A and a German-only half B. A De->En model
                   trained on A translates B by beam (4), by sampling (top-k 0, seed 1), and the beam output again
                   with a tag (<bt>, Caswell et al. 2019); En->De trained on A; A + each synthetic B; A + the real B
                   (the ceiling). BLEU on test_2016_flickr and on validation.
  multilingual     One En->{De, Fr} model with target tags (recipes/multi30k-multilingual.toml) against the bilingual
                   En->De and En->Fr recipe, the same updates each.
  finetune         A Multi30k En->De model adapted to news: newstest2014 cut (seed SEED) into adapt / valid / test
                   (2,003 / 500 / 500 lines); BLEU on the news test and on test_2016_flickr before and after.

Every choice is made on validation; each test set is read once, at the end. The shapes and schedule are the shipped
`multi30k` recipe's unless --set says otherwise. Results: OUT/results.json and a Markdown table on stdout.

  TRANSDUCE_DATA=../shared/data python benchmarks/workflows.py backtranslation --out /tmp/bt --steps 2400
  python benchmarks/workflows.py finetune --out /tmp/ft --steps 2400 --adapt-steps 600 --adapt-lr 5e-4
  python benchmarks/workflows.py multilingual --out /tmp/ml --steps 2400 --smoke   # a tiny model, to try the script
  python benchmarks/workflows.py multilingual --out /tmp/ml --steps 800 --multilingual-steps 1600  # equal compute
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

SEED = 20261202  # the split of Multi30k train (backtranslation) and of newstest2014 (finetune)
SMOKE = ["model.n_layers=1", "model.d_model=64", "model.d_ff=128", "data.vocab_size=1000", "train.max_tokens=1500",
         "train.valid_max_sentences=20"]  # fmt: skip


def cli(*args: str, stdout=None) -> str:
    """`transduce ARGS`; its stdout (or into the file `stdout`); the script stops with its error if it fails."""
    command = [sys.executable, "-m", "transduce", *args]
    print("$ transduce " + " ".join(args), file=sys.stderr, flush=True)
    proc = subprocess.run(command, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"transduce {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc.stdout if stdout is None else ""


def data_file(name: str) -> Path:
    root = os.environ.get("TRANSDUCE_DATA")
    if not root or not (Path(root) / name).is_file():
        sys.exit(f"{name}: not found under TRANSDUCE_DATA ({root}); the Makefile sets it to ../shared/data")
    return Path(root) / name


def read(name: str) -> list[str]:
    path = data_file(name)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


class Budget:
    """The settings every training of a comparison shares: the recipe's, a step budget, no early stop."""

    def __init__(self, steps: int, smoke: bool, extra: list[str]) -> None:
        every = max(10, steps // 4)
        self.settings = [f"train.max_steps={steps}", "train.max_minutes=0", "train.patience=0",
                         f"train.valid_every={every}", f"train.save_every={every}", "train.average_last=0",
                         *(SMOKE if smoke else []), *extra]  # fmt: skip
        self.smoke = smoke

    def train(self, recipe: str, out: Path, *settings: str) -> Path:
        if (out / "best.safetensors").is_file() and (out / "final.json").is_file():
            return out  # trained by an earlier call of the script
        start = time.time()
        cli("train", recipe, "--out", str(out), *[a for s in [*self.settings, *settings] for a in ("--set", s)])
        (out / "final.json").write_text(json.dumps({"seconds": round(time.time() - start)}) + "\n")
        return out


def bleu(run: Path, src: Path, ref: Path, *flags: str, lines: int | None = None) -> float:
    """evaluate's corpus BLEU (sacreBLEU 13a) of `run` on a test file, beam 4."""
    if lines is not None:  # a smoke run reads the first lines only
        src, ref = (write(run.parent / "eval" / f"first-{lines}-{p.name.removesuffix('.gz')}", read_any(p)[:lines])
                    for p in (src, ref))  # fmt: skip
    out = cli("evaluate", str(run), "--src", str(src), "--ref", str(ref), "--quiet", *flags)
    found = re.search(r"BLEU[^=]*= *([0-9.]+)", out)
    if not found:
        sys.exit(f"no BLEU in evaluate's output:\n{out}")
    return float(found.group(1))


def read_any(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def backtranslation(args, budget: Budget) -> list[dict]:
    out = Path(args.out)
    en, de = read("multi30k/train.en.gz"), read("multi30k/train.de.gz")
    order = np.random.default_rng(SEED).permutation(len(en))
    half = len(en) // 2
    a, b = np.sort(order[:half]), np.sort(order[half:])
    if budget.smoke:
        a, b = a[:2000], b[:300]
    split = out / "split"
    for name, picked in (("A", a), ("B", b)):
        write(split / f"{name}.en", [en[i] for i in picked])
        write(split / f"{name}.de", [de[i] for i in picked])
    test_src, test_ref = data_file("multi30k/test_2016_flickr.en.gz"), data_file("multi30k/test_2016_flickr.de.gz")
    train_a = f"data.train={json.dumps(str(split / 'A'))}"

    def reverse() -> dict:
        run = budget.train("multi30k", out / "de-en", train_a, "data.src=de", "data.tgt=en", "data.test=[]")
        return {"system": "De->En on A (the back-translator)", "run": run,
                "valid": bleu(run, *_val("de", "en"), lines=_n(budget))}  # fmt: skip

    def synthetic(back_translator) -> None:
        run = back_translator.result()["run"]
        for kind, flags in {"beam": ["--beam", "4"], "sampling": ["--sampling-topk", "0", "--seed", "1"]}.items():
            made = split / f"bt-{kind}.en"
            if not made.is_file():
                with open(made.with_suffix(".part"), "w", encoding="utf-8") as f:
                    cli("translate", str(run), "--input", str(split / "B.de"), "--quiet", *flags, stdout=f)
                made.with_suffix(".part").rename(made)
            (split / f"bt-{kind}.de").write_bytes((split / "B.de").read_bytes())

    def system(k: int, name: str, settings: list[str], needs=None) -> dict:
        if needs is not None:
            needs.result()
        run = budget.train("multi30k", out / f"en-de-{k}", train_a, *settings)
        return {"system": f"En->De: {name}", "valid": bleu(run, *_val("en", "de"), lines=_n(budget)),
                "test2016": bleu(run, test_src, test_ref, lines=_n(budget))}  # fmt: skip

    def corpora(prefix: str, tag: str = "") -> list[str]:
        table = "{prefix = " + json.dumps(str(split / prefix)) + (f', tag = "{tag}"' if tag else "") + "}"
        return [f"data.corpora=[{table}]"]

    # Submitted in an order in which a task waits only for tasks already running or done, so `--jobs` workers never
    # deadlock: the back-translator and the two systems without synthetic data first, the synthetic ones last.
    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        back = pool.submit(reverse)
        first = [pool.submit(system, 0, "A only", []),
                 pool.submit(system, 4, "A + the real B (the ceiling)", corpora("B"))]  # fmt: skip
        made = pool.submit(synthetic, back)
        bt = "A + B back-translated by"
        later = [pool.submit(system, 1, f"{bt} beam", corpora("bt-beam"), made),
                 pool.submit(system, 2, f"{bt} sampling", corpora("bt-sampling"), made),
                 pool.submit(system, 3, f"{bt} beam, tagged <bt>", corpora("bt-beam", "<bt>"), made)]  # fmt: skip
        reverse_row = {k: v for k, v in back.result().items() if k != "run"}
        rows = [first[0].result(), *(f.result() for f in later), first[1].result()]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # after a failure, start no queued training
    return [reverse_row, *rows]


def _val(src: str, tgt: str) -> tuple[Path, Path]:
    return data_file(f"multi30k/val.{src}.gz"), data_file(f"multi30k/val.{tgt}.gz")


def _n(budget: Budget) -> int | None:
    return 50 if budget.smoke else None


def multilingual(args, budget: Budget) -> list[dict]:
    out = Path(args.out)
    test = {lang: data_file(f"multi30k/test_2016_flickr.{lang}.gz") for lang in ("en", "de", "fr")}
    rows = []
    for lang in ("de", "fr"):
        run = budget.train("multi30k", out / f"en-{lang}", f"data.tgt={lang}", "data.test=[]")
        rows.append({"system": f"bilingual En->{lang.title()} (recipe multi30k)",
                     f"test2016 {lang}": bleu(run, test["en"], test[lang], lines=_n(budget)),
                     f"valid {lang}": bleu(run, *_val("en", lang), lines=_n(budget))})  # fmt: skip
    steps = args.multilingual_steps or args.steps
    name = "en-defr" if steps == args.steps else f"en-defr-{steps}"
    every = f"{max(10, steps // 4)}"
    run = budget.train("multi30k-multilingual", out / name, f"train.max_steps={steps}", f"train.valid_every={every}",
                       f"train.save_every={every}")  # fmt: skip
    row: dict = {"system": f"multilingual En->{{De, Fr}} (recipe multi30k-multilingual), {steps} updates"}
    for lang in ("de", "fr"):
        row[f"test2016 {lang}"] = bleu(run, test["en"], test[lang], "--tag", f"<2{lang}>", lines=_n(budget))
        row[f"valid {lang}"] = bleu(run, *_val("en", lang), "--tag", f"<2{lang}>", lines=_n(budget))
    return [*rows, row]


def finetune(args, budget: Budget) -> list[dict]:
    out = Path(args.out)
    en, de = read("wmt14_en_de/newstest2014.en"), read("wmt14_en_de/newstest2014.de")
    order = np.random.default_rng(SEED).permutation(len(en))
    parts = {"adapt": np.sort(order[:-1000]), "valid": np.sort(order[-1000:-500]), "test": np.sort(order[-500:])}
    news = out / "news"
    for name, picked in parts.items():
        write(news / f"{name}.en", [en[i] for i in picked])
        write(news / f"{name}.de", [de[i] for i in picked])
    base = budget.train("multi30k", out / "m30k")
    adapt, valid = json.dumps(str(news / "adapt")), json.dumps(str(news / "valid"))
    tuned = budget.train("multi30k", out / "m30k-news", f"train.init_from={json.dumps(str(base))}",
                         f"data.train={adapt}", f"data.valid={valid}", "data.test=[]",
                         f"train.max_steps={args.adapt_steps}", f"train.warmup_steps={max(1, args.adapt_steps // 6)}",
                         "train.lr_schedule=linear", f"train.peak_lr={args.adapt_lr}",
                         f"train.valid_every={max(10, args.adapt_steps // 4)}")  # fmt: skip
    test2016 = data_file("multi30k/test_2016_flickr.en.gz"), data_file("multi30k/test_2016_flickr.de.gz")
    rows = []
    for name, run in (("Multi30k model", base), ("adapted to news", tuned)):
        rows.append({"system": name, "news valid": bleu(run, news / "valid.en", news / "valid.de", lines=_n(budget)),
                     "news test": bleu(run, news / "test.en", news / "test.de", lines=_n(budget)),
                     "test2016": bleu(run, *test2016, lines=_n(budget))})  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=["backtranslation", "multilingual", "finetune"])
    parser.add_argument("--out", required=True, help="a folder for the runs (an earlier call's runs are reused)")
    parser.add_argument("--steps", type=int, default=2400, help="updates of every model trained from scratch")
    parser.add_argument("--multilingual-steps", type=int, default=0,
                        help="multilingual: the multilingual model's updates (default --steps; 2 x --steps gives it "
                        "the two bilingual models' updates together)")  # fmt: skip
    parser.add_argument("--adapt-steps", type=int, default=600, help="finetune: updates of the adaptation")
    parser.add_argument("--adapt-lr", type=float, default=5e-4, help="finetune: the adaptation's peak rate (linear)")
    parser.add_argument("--set", action="append", default=[], help="more settings for every training")
    parser.add_argument("--smoke", action="store_true", help="a tiny model and few sentences: to try the script")
    parser.add_argument("--jobs", type=int, default=1,
                        help="backtranslation: trainings run at once, each on cores/JOBS threads")  # fmt: skip
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.jobs)))
    budget = Budget(args.steps, args.smoke, args.set)
    start = time.time()
    rows = {"backtranslation": backtranslation, "multilingual": multilingual, "finetune": finetune}[args.experiment](
        args, budget
    )
    record = {"experiment": args.experiment, "steps": args.steps, "seed": SEED, "smoke": args.smoke,
              "settings": budget.settings, "seconds": round(time.time() - start), "rows": rows}  # fmt: skip
    (Path(args.out) / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    columns = [k for k in rows[-1] if k != "system"] + [k for k in rows[0] if k not in rows[-1]]
    print("| system | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row in rows:
        print(f"| {row['system']} | " + " | ".join(f"{row[c]:.2f}" if c in row else "-" for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
