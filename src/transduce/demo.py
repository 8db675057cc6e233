"""The built-in default task: spelled-out English numbers -> digits, generated here (no downloaded data).

"nine hundred six thousand forty" -> "906,040". The output depends on every word and on where it stands: a digit
is fixed by a word far away ("thousand", "million") and zeros must appear where no word speaks of them, so the
decoder has to attend to the right source positions. `transduce demo` generates the data, prepares it (joint
SentencePiece vocabulary), trains a small Transformer with the ordinary training loop, decodes held-out numbers with
the ordinary Translator, and reports exact match.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from .config import Config, load_config
from .outputs import OutputError, claim_folder

ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
SCALES = [(10**9, "billion"), (10**6, "million"), (1000, "thousand")]


def words(n: int) -> str:
    """Spell out 0 <= n < 10^12 in English words (short scale, no "and", no hyphens)."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else " " + ONES[n % 10])
    if n < 1000:
        return ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + words(n % 100))
    for value, name in SCALES:
        if n >= value:
            rest = n % value
            return words(n // value) + " " + name + ("" if rest == 0 else " " + words(rest))
    raise ValueError(n)  # pragma: no cover


def sample_number(rng: random.Random, max_digits: int = 9) -> int:
    """Log-uniform over lengths: as many short numbers as long ones; zeros inside are common (hard cases)."""
    digits = rng.randint(1, max_digits)
    value = rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits)
    if digits > 3 and rng.random() < 0.3:  # zero out a random group of three digits
        group = rng.randrange(0, digits // 3)
        value -= (value // 10 ** (3 * group)) % 1000 * 10 ** (3 * group)
    return value


def digits(n: int) -> str:
    """The target side: digits grouped by thousands, "906,040"."""
    return f"{n:,}"


def generate(out_dir: str | Path, *, train: int = 100_000, valid: int = 300, test: int = 500, seed: int = 0) -> Path:
    """Write train/valid/test .words/.digits files with disjoint numbers; returns the folder."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    held_out: set[int] = set()
    splits = {}
    for name, count in (("test", test), ("valid", valid)):
        numbers: list[int] = []
        while len(numbers) < count:
            n = sample_number(rng)
            if n not in held_out:
                held_out.add(n)
                numbers.append(n)
        splits[name] = numbers
    numbers = []
    while len(numbers) < train:
        n = sample_number(rng)
        if n not in held_out:
            numbers.append(n)
    splits["train"] = numbers
    for name, numbers in splits.items():
        (out_dir / f"{name}.words").write_text("".join(words(n) + "\n" for n in numbers), encoding="utf-8")
        (out_dir / f"{name}.digits").write_text("".join(digits(n) + "\n" for n in numbers), encoding="utf-8")
    return out_dir


def demo_config(data_dir: Path, overrides=()) -> Config:
    """The shipped `demo` recipe (package data), reading the data generated into `data_dir`."""
    paths = [f"data.train={json.dumps(str(data_dir / 'train'))}", f"data.valid={json.dumps(str(data_dir / 'valid'))}"]
    return load_config("demo", [*paths, *overrides])


def _refuse_another_run(out_dir: Path) -> None:
    """A run directory that holds another training (its config reads other data than the demo's) is refused."""
    saved = out_dir / "config.json"
    if not saved.is_file():
        return
    try:
        train_prefix = json.loads(saved.read_text(encoding="utf-8"))["data"]["train"]
    except (OSError, ValueError, KeyError, TypeError):
        train_prefix = None
    if train_prefix is None or Path(train_prefix).resolve() != (out_dir / "task" / "train").resolve():
        raise OutputError(f"{out_dir}: holds another run, not a demo; nothing was written: choose another --out")


def run_demo(out_dir: str | Path = "runs/demo", *, overrides=(), samples: int = 5, quiet: bool = False) -> float:
    """Generate, train, decode the held-out numbers; print samples and exact match. Returns the exact-match rate."""
    from .decoding.translator import Translator
    from .tasks import train

    _refuse_another_run(Path(out_dir))  # before anything is written into it
    out_dir = claim_folder(out_dir, "run", task="translation")  # new, empty or an earlier demo: never a user's
    start = time.perf_counter()
    data_dir = generate(out_dir / "task")
    config = demo_config(data_dir, overrides)
    print(
        f"demo: spelled-out numbers -> digits; {sum(1 for _ in open(data_dir / 'train.words'))} training pairs "
        f"in {data_dir}; run directory {out_dir}",
        flush=True,
    )
    train(config, out_dir, quiet=quiet)
    translator = Translator.from_run(out_dir)
    sources = (data_dir / "test.words").read_text(encoding="utf-8").splitlines()
    references = (data_dir / "test.digits").read_text(encoding="utf-8").splitlines()
    outputs = translator.translate(sources)  # the recipe's decoding: beam 4, GNMT length penalty 0.6
    correct = sum(o.strip() == r.strip() for o, r in zip(outputs, references))
    print("samples (input => output [reference]):")
    for src, out, ref in list(zip(sources, outputs, references))[:samples]:
        print(f"  {src} => {out}" + ("" if out == ref else f"   [expected {ref}]"))
    rate = correct / len(references)
    print(f"time: {time.perf_counter() - start:.0f} s")
    print(f"exact match: {100 * rate:.1f}% on {len(references)} held-out examples")
    return rate
