"""Training commands: demo, prepare, align, train, average, classify (argument tables and the calls they make)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .common import input_path

if TYPE_CHECKING:
    from ..decoding.classifier import Classifier


def cmd_demo(args) -> int:
    from ..demo import run_demo

    run_demo(args.out, overrides=args.set)
    return 0


# the DataConfig fields `prepare` takes as --options (unset ones keep DataConfig's defaults)
PREPARE_OPTIONS = (
    "vocab_size",
    "model_type",
    "lowercase",
    "split_digits",
    "max_len",
    "max_ratio",
    "errors",
    "vocab_sample",
    "workers",
    "tokenizer",
)


def cmd_prepare(args) -> int:
    from ..config import DataConfig
    from ..config.bounds import check_value
    from ..data import prepare

    check_value("train.max_tokens", args.max_tokens, name="--max-tokens", kind=int)
    numbers = {"vocab_size": int, "max_len": int, "max_ratio": float, "vocab_sample": int, "workers": int}
    for name, kind in numbers.items():
        if getattr(args, name) is not None:  # the settings' bounds, named by the flag that was given
            check_value(f"data.{name}", getattr(args, name), name="--" + name.replace("_", "-"), kind=kind)
    options = {
        "train": args.train or "",
        "corpora": tuple(_corpus(text) for text in args.corpus),
        "valid_tag": args.valid_tag or "",
        "valid": args.valid or "",
        "test": tuple(args.test),
        "src": args.src,
        "tgt": args.tgt,
    }
    for name in PREPARE_OPTIONS:
        if getattr(args, name) is not None:  # unset options keep DataConfig's defaults (one place for them)
            options[name] = getattr(args, name)
    _check_prepare_flags(args)
    prepare(DataConfig(**options), args.out, max_tokens=args.max_tokens)
    return 0


def _corpus(text: str):
    """`--corpus PREFIX[,weight=W][,tag=T][,align=F][,join=N]` -> one of data.corpora."""
    from ..config import ConfigError, CorpusConfig

    prefix, *fields = text.split(",")
    given: dict[str, object] = {}
    for field in fields:
        key, _, value = field.partition("=")
        if key not in ("weight", "tag", "align", "join") or not value:
            raise ConfigError(f"--corpus {text}: expected PREFIX[,weight=W][,tag=T][,align=F][,join=N], got {field!r}")
        try:
            given[key] = float(value) if key == "weight" else int(value) if key == "join" else value
        except ValueError:
            raise ConfigError(f"--corpus {text}: the {key} must be a number, got {value!r}") from None
    return CorpusConfig(prefix=prefix, **given)  # type: ignore[arg-type]


def _check_prepare_flags(args) -> None:
    """The counts a flag gives, refused naming that flag (the settings' own check names the recipe keys)."""
    from ..config import ConfigError
    from ..data.parallel import MIN_VOCAB_SAMPLE

    if args.vocab_sample is not None and args.vocab_sample < MIN_VOCAB_SAMPLE:
        raise ConfigError(
            f"--vocab-sample must be at least {MIN_VOCAB_SAMPLE} (SentencePiece samples no fewer sentences), "
            f"got {args.vocab_sample}"
        )
    if args.workers is not None and args.workers < 0:
        raise ConfigError(f"--workers must be 0 (one per core) or more, got {args.workers}")


def cmd_align(args) -> int:
    from ..data.aligner import align_corpus

    align_corpus(input_path(args.src), input_path(args.tgt), Path(args.out), errors=args.errors)
    return 0


def cmd_train(args) -> int:
    """Any task: the recipe's `task` key (or the saved run's) says which."""
    from ..config import ConfigError, apply_overrides, load_config, read_config_dict
    from ..tasks import train

    shortcuts = [f"train.device={args.device}"] if args.device else []
    shortcuts += ["train.compile=true"] if args.compile else []
    # a TOML string (json.dumps quotes and escapes it the way TOML's basic strings read): any path stays a string
    shortcuts += [f"train.init_from={json.dumps(args.init_from)}"] if args.init_from else []
    if args.recipe is None:
        saved = Path(args.out) / "config.json"
        if not saved.is_file():
            raise ConfigError(f"{args.out}: no recipe given and no run to resume there")
        config = apply_overrides(read_config_dict(saved), [*args.set, *shortcuts])
    else:
        config = load_config(args.recipe, [*args.set, *shortcuts])  # a path, or the name of a shipped recipe
    train(config, args.out)
    return 0


def cmd_average(args) -> int:
    from ..training.checkpoint import average_run

    out = average_run(args.run, args.last, args.output)
    print(f"averaged the last {args.last} checkpoints of {args.run} into {out}")
    return 0


def cmd_classify_train(args) -> int:
    from ..config import ClassifierRunConfig, load_config
    from ..tasks.classification import train_classifier

    train_classifier(load_config(args.recipe, args.set, ClassifierRunConfig), args.out)
    return 0


def cmd_classify_predict(args) -> int:
    from ..data import read_lines
    from ..decoding.classifier import Classifier

    lines = read_lines(input_path(args.input), errors=args.errors, allow_empty=True)
    classifier = Classifier.from_run(args.run, device=args.device)
    keep = [i for i, line in enumerate(lines) if line.strip()]
    rows = [""] * len(lines)  # an empty line gets an empty answer
    if not keep:
        sys.stdout.write("".join(r + "\n" for r in rows))
        return 0
    probs = classifier.predict_proba([lines[i] for i in keep])
    for j, i in enumerate(keep):
        best = int(probs[j].argmax())
        rows[i] = classifier.labels[best]
        if args.probabilities:
            rows[i] += "\t" + "\t".join(f"{label}={p:.4f}" for label, p in zip(classifier.labels, probs[j].tolist()))
    sys.stdout.write("".join(r + "\n" for r in rows))
    return 0


def cmd_classify_evaluate(args) -> int:
    from ..data import resolve_path
    from ..decoding.classifier import Classifier

    evaluate_file(Classifier.from_run(args.run, device=args.device), str(resolve_path(args.data)))
    return 0


def evaluate_file(classifier: Classifier, path: str, out=sys.stdout) -> float:
    """Print the classification report of `path` (labelled like the training data); returns the accuracy."""
    import numpy as np

    from ..data import DataError
    from ..data.labelled import read_labelled
    from ..metrics import classification_report

    texts, gold, numbers = read_labelled(path, classifier.config.data)
    index = {c: i for i, c in enumerate(classifier.labels)}
    for label, number in zip(gold, numbers):
        if label not in index:
            raise DataError(
                f"{path}:{number}: label {label!r} is not one the model knows ({', '.join(classifier.labels)})"
            )
    predicted = classifier.predict_proba(texts).argmax(-1).tolist()
    print(classification_report([index[g] for g in gold], predicted, classifier.labels), file=out)
    return float(np.mean([index[g] == p for g, p in zip(gold, predicted)]))


def register(sub) -> None:
    p = sub.add_parser("demo", help="train and evaluate a small model on the built-in numbers task")
    p.add_argument("--out", default="runs/demo", help="run directory (default: runs/demo)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override the recipe")
    p.set_defaults(func=cmd_demo)

    _register_prepare(sub)

    p = sub.add_parser("train", help="train (or resume) a model from a TOML recipe")
    p.add_argument(
        "recipe",
        nargs="?",
        help="TOML recipe file or a shipped recipe's name (demo, multi30k, "
        "wmt14-base, ...); omit it to resume the run in --out with its saved config",
    )
    p.add_argument("--out", required=True, help="run directory; training resumes if it holds checkpoints")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override the recipe")
    p.add_argument("--device", help="cpu, cuda, cuda:1, ... (same as --set train.device=...)")
    p.add_argument("--compile", action="store_true", help="use torch.compile (same as --set train.compile=true)")
    p.add_argument(
        "--init-from",
        metavar="RUN",
        help="fine-tune: start from this run's weights, model settings and tokenizer, with a fresh optimizer and "
        "schedule (a weights file inside a run may be named; same as --set train.init_from=RUN)",
    )
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("average", help="average the last N checkpoints of a run")
    p.add_argument("run")
    p.add_argument("--last", type=int, default=5, help="how many of the newest checkpoints (>= 1)")
    p.add_argument("--output", help="a .safetensors file (default RUN/averaged.safetensors)")
    p.set_defaults(func=cmd_average)

    _register_classify(sub)


def _register_prepare(sub) -> None:
    p = sub.add_parser("prepare", help="train the joint SentencePiece vocabulary and encode parallel text")
    p.add_argument("--train", help="training file prefix (PREFIX.SRC and PREFIX.TGT, .gz allowed)")
    p.add_argument(
        "--corpus",
        action="append",
        default=[],
        metavar="PREFIX[,weight=W][,tag=T][,align=F][,join=N]",
        help="a training corpus of several, in place of --train (repeatable; data.corpora): each epoch draws W x its "
        "pairs; T (e.g. <bt>) becomes one token put before each of its sources; F: its word links for guided "
        "alignment (`transduce align` writes them); N: its consecutive pairs joined 2 to N a unit",
    )
    p.add_argument("--valid-tag", metavar="T", help="put this corpus tag before every validation source")
    p.add_argument("--valid", help="validation file prefix")
    p.add_argument("--test", action="append", default=[], help="test file prefix (repeatable)")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--vocab-size", type=int, help="joint vocabulary size (default 8000)")
    p.add_argument("--model-type", choices=["bpe", "unigram"], help="default bpe")
    p.add_argument("--lowercase", action="store_true", default=None)
    p.add_argument("--split-digits", action="store_true", default=None)
    p.add_argument("--max-len", type=int, help="drop training pairs longer than this many tokens (default 256)")
    p.add_argument("--max-ratio", type=float, help="drop training pairs with a larger length ratio (default 9)")
    p.add_argument("--max-tokens", type=int, default=4096, help="batch size used for the padding report")
    p.add_argument("--errors", choices=["strict", "replace"], help="invalid UTF-8: refuse (default) or replace")
    p.add_argument(
        "--vocab-sample",
        type=int,
        help="learn the vocabulary from a seeded random sample of this many training sentences (default 2,000,000)",
    )
    p.add_argument("--workers", type=int, help="processes that encode the corpus (default: one per core)")
    p.add_argument(
        "--tokenizer",
        metavar="RUN_OR_MODEL",
        help="encode with an existing vocabulary (a run's or prepared folder's tokenizer.model, or a SentencePiece "
        ".model file) instead of learning one; the vocabulary options are then the tokenizer's",
    )
    p.add_argument("--out", required=True, help="a new folder (or an earlier `prepare` output, replaced)")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("align", help="word links of a parallel corpus (eflomal), for guided alignment")
    p.add_argument("--src", required=True, help="the source side: one sentence per line (plain or .gz)")
    p.add_argument("--tgt", required=True, help="the target side, line by line with --src")
    p.add_argument("--out", required=True, help="a new file: one line of Pharaoh links i-j per pair (0-based words)")
    p.add_argument("--errors", choices=["strict", "replace"], default="strict", help="invalid UTF-8 input")
    p.set_defaults(func=cmd_align)


def _register_classify(sub) -> None:
    p = sub.add_parser("classify", help="the encoder-only classifier: train, predict, evaluate")
    csub = p.add_subparsers(dest="classify_command", required=True, metavar="ACTION")
    c = csub.add_parser("train", help="train (or resume) a classifier from a TOML recipe")
    c.add_argument("recipe")
    c.add_argument("--out", required=True)
    c.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    c.set_defaults(func=cmd_classify_train)
    c = csub.add_parser("predict", help="one label per input line (stdin or --input)")
    c.add_argument("run")
    c.add_argument("--input")
    c.add_argument("--probabilities", action="store_true", help="append LABEL=P for every label")
    c.add_argument("--errors", choices=["strict", "replace"], default="strict", help="invalid UTF-8 input")
    c.add_argument("--device", default="auto")
    c.set_defaults(func=cmd_classify_predict)
    c = csub.add_parser("evaluate", help="accuracy, per-class precision/recall/F1, confusion matrix")
    c.add_argument("run")
    c.add_argument("--data", required=True, help="labelled TSV or JSONL (plain or .gz)")
    c.add_argument("--device", default="auto")
    c.set_defaults(func=cmd_classify_evaluate)
