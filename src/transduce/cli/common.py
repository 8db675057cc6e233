"""What several commands share: input paths, bounds on decoding options, common arguments."""

from __future__ import annotations

from pathlib import Path

from ..config import MBR_UTILITIES
from ..config.bounds import check_value


def input_path(path: str | None) -> Path:
    """A command's input file: "-" (stdin) when None; relative paths also looked up under TRANSDUCE_DATA."""
    from ..data import resolve_path

    return Path("-") if path in (None, "-") else resolve_path(path)


def check_decoding(args) -> None:
    """The decoding flags against the settings' own bounds (config/bounds.py: --beam is decode.beam's 1-64)."""
    from ..config import ConfigError

    beam, nbest = args.beam, getattr(args, "nbest", 1)
    flags: list[tuple[str, str, object, type]] = [("--beam", "decode.beam", beam, int)]
    flags += [
        ("--nbest", "decode.nbest", nbest, int),
        ("--batch-tokens", "decode.batch_tokens", args.batch_tokens, int),
    ]
    flags += [
        ("--alpha", "decode.alpha", args.alpha, float),
        ("--patience", "decode.patience", _flag(args, "patience"), float),
    ]
    flags += [("--sampling-topk", "decode.sampling_topk", _flag(args, "sampling_topk"), int)]
    flags += [("--sampling-topp", "decode.sampling_topp", _flag(args, "sampling_topp"), float)]
    flags += [("--temperature", "decode.temperature", _flag(args, "temperature"), float)]
    flags += [("--seed", "decode.seed", _flag(args, "seed"), int)]
    for flag, key, value, kind in flags:
        if value is not None:
            check_value(key, value, name=flag, kind=kind)
    if beam is not None and nbest > beam:
        raise ConfigError(
            f"--nbest {nbest} is larger than --beam {beam}: a beam of {beam} finds at most {beam} translations"
        )


def _flag(args, name: str):
    """A decoding flag's value, None where the command has no such flag (parse has no sampling)."""
    return getattr(args, name, None)


def sacrebleu_tokenizers() -> list[str]:
    from sacrebleu.metrics.bleu import BLEU

    return sorted(BLEU.TOKENIZERS)


def decode_options(p) -> None:
    """The arguments translate and evaluate share."""
    p.add_argument("run", help="run directory, or a .safetensors weights file inside one")
    p.add_argument(
        "--ensemble",
        nargs="+",
        default=[],
        metavar="RUN",
        help="decode RUN together with these runs (or weights files): the mean of their next-token distributions "
        "at every step; they must share RUN's tokenizer and languages",
    )
    p.add_argument("--beam", type=int, default=None, help="beam size (default: the run's, 4); 1 = greedy")
    p.add_argument("--alpha", type=float, default=None, help="length penalty alpha (default 0.6)")
    p.add_argument(
        "--mbr",
        choices=MBR_UTILITIES,
        default=None,
        help="minimum Bayes risk: of the beam's finished translations, return the one that agrees best with the "
        "others by sentence BLEU or chrF (default: the run's decode.mbr, none)",
    )
    p.add_argument("--batch-tokens", type=int, default=None, help="source tokens per batch")
    p.add_argument(
        "--patience",
        type=float,
        default=None,
        help="beam search also ends a sentence once beam x P hypotheses have finished (CTranslate2's patience; "
        "fairseq's rule at 1): faster, a translation may change (default: the run's decode.patience, 0 = exact)",
    )
    p.add_argument(
        "--sampling-topk",
        type=int,
        default=None,
        metavar="K",
        help="sample each token from the K most probable (0: all) instead of searching; 1 = greedy (default: the "
        "run's decode.sampling_topk, 1)",
    )
    p.add_argument(
        "--sampling-topp", type=float, default=None, metavar="P", help="sample from the smallest set of probability P"
    )
    p.add_argument("--temperature", type=float, default=None, metavar="T", help="sampling temperature (default 1)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="sampling seed (default: decode.seed, 0)")
    p.add_argument("--tag", default=None, metavar="T", help="put this tag (a token of data.corpora, e.g. <2de>) "
                   "before every source")  # fmt: skip
    p.add_argument("--device", default="auto")
    precision_option(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--errors", choices=["strict", "replace"], default="strict", help="invalid UTF-8 input")


def precision_option(p) -> None:
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="bf16: the torch engine computes in bfloat16 autocast, on a CPU with native bfloat16 (avx512_bf16, "
        "amx_bf16) about twice as fast; a translation may differ from float32's (default fp32)",
    )


def check_precision_engine(args) -> None:
    """--precision is the torch engine's; CTranslate2 has its own arithmetic (export --quantization)."""
    from ..config import ConfigError

    if getattr(args, "precision", "fp32") != "fp32" and getattr(args, "engine", "torch") != "torch":
        raise ConfigError(
            "--precision applies to --engine torch; CTranslate2 computes in the export's type "
            "(transduce export ctranslate2 --quantization)"
        )
