"""The `transduce` command: argparse sub-commands, nothing else. User mistakes -> one line on stderr, exit 1."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


MAX_BEAM = 64  # a beam allocates beam x sentences decoder rows: bounded so a typo cannot exhaust memory
MAX_BATCH_TOKENS = 1_000_000


def _user_errors() -> tuple[type[BaseException], ...]:
    from ..training.checkpoint import CheckpointError
    from ..config import ConfigError
    from ..data import DataError
    from ..export.ctranslate2 import ExportError  # does not import ctranslate2 itself
    from ..outputs import OutputError
    from ..tasks.trees import TreeError
    from ..data.tokenizer import TokenizerError
    from ..training.loop import TrainingError

    return (ConfigError, DataError, CheckpointError, TokenizerError, TrainingError, OutputError, ExportError,
            TreeError)


def _environment_error(err: OSError) -> str:
    """A disk, permission or file-system problem, in one line: what failed, where, and why."""
    where = f"{err.filename}: " if err.filename else ""
    why = err.strerror or str(err)
    hint = {28: " (the disk is full)", 30: " (read-only file system)", 13: " (no permission)"}.get(err.errno or 0, "")
    return f"{where}{why}{hint}"


def _input_path(path: str | None) -> Path:
    """A command's input file: "-" (stdin) when None; relative paths also looked up under TRANSDUCE_DATA."""
    from ..data import resolve_path

    return Path("-") if path in (None, "-") else resolve_path(path)


def _check_decoding(args) -> None:
    from ..config import ConfigError

    beam, nbest = args.beam, getattr(args, "nbest", 1)
    if beam is not None and not 1 <= beam <= MAX_BEAM:
        raise ConfigError(f"--beam must be between 1 and {MAX_BEAM}, got {beam}")
    if not 1 <= nbest <= MAX_BEAM:
        raise ConfigError(f"--nbest must be between 1 and {MAX_BEAM}, got {nbest}")
    if beam is not None and nbest > beam:
        raise ConfigError(f"--nbest {nbest} is larger than --beam {beam}: a beam of {beam} finds at most {beam} "
                          "translations")
    if args.batch_tokens is not None and not 1 <= args.batch_tokens <= MAX_BATCH_TOKENS:
        raise ConfigError(f"--batch-tokens must be between 1 and {MAX_BATCH_TOKENS:,}, got {args.batch_tokens}")
    if args.alpha is not None and not 0.0 <= args.alpha <= 10.0:
        raise ConfigError(f"--alpha must be between 0 and 10, got {args.alpha}")


def cmd_demo(args) -> int:
    from ..demo import run_demo

    run_demo(args.out, overrides=args.set)
    return 0


def cmd_prepare(args) -> int:
    from ..config import DataConfig
    from ..data import prepare

    options = {"train": args.train, "valid": args.valid or "", "test": tuple(args.test), "src": args.src,
               "tgt": args.tgt}
    for name in ("vocab_size", "model_type", "lowercase", "split_digits", "max_len", "max_ratio", "errors"):
        if getattr(args, name) is not None:  # unset options keep DataConfig's defaults (one place for them)
            options[name] = getattr(args, name)
    prepare(DataConfig(**options), args.out, max_tokens=args.max_tokens)
    return 0


def cmd_train(args) -> int:
    from ..config import ConfigError, apply_overrides, load_config, read_config
    from ..training.loop import train

    if args.recipe is None:
        saved = Path(args.out) / "config.json"
        if not saved.is_file():
            raise ConfigError(f"{args.out}: no recipe given and no run to resume there")
        config = apply_overrides(read_config(saved).to_dict(), args.set)
    else:
        config = load_config(args.recipe, args.set)  # a path, or the name of a shipped recipe
    shortcuts = [f"train.device={args.device}"] if args.device else []
    shortcuts += ["train.compile=true"] if args.compile else []
    if shortcuts:
        config = apply_overrides(config.to_dict(), shortcuts)
    train(config, args.out)
    return 0


def cmd_average(args) -> int:
    from ..training.checkpoint import average_run

    out = average_run(args.run, args.last, args.output)
    print(f"averaged the last {args.last} checkpoints of {args.run} into {out}")
    return 0


def cmd_translate(args) -> int:
    from ..data import read_lines
    from ..decoding.translator import Translator

    _check_decoding(args)
    lines = read_lines(_input_path(args.input), errors=args.errors, allow_empty=True)
    if args.engine == "ctranslate2":
        from ..export.ctranslate2 import CTranslate2Translator

        translator = CTranslate2Translator.from_run(args.run, device=args.device)
        max_len = translator.max_len
    else:
        translator = Translator.from_run(args.run, device=args.device)
        max_len = translator.model.config.max_len
    progress = not sys.stdout.isatty() and not args.quiet
    results = translator.translate_nbest(lines, beam=args.beam, alpha=args.alpha, nbest=args.nbest,
                                         batch_tokens=args.batch_tokens, length_penalty=args.length_penalty,
                                         progress=progress)
    for i in translator.truncated:
        print(f"warning: line {i + 1}: longer than the model's {max_len} positions; "
              "translated after truncation", file=sys.stderr)
    out = sys.stdout
    for i, hyps in enumerate(results):
        if args.nbest == 1:
            out.write((hyps[0].text if hyps else "") + "\n")
        else:
            for h in hyps:
                out.write(f"{i}\t{h.score:.4f}\t{h.text}\n")
    out.flush()
    return 0


def cmd_evaluate(args) -> int:
    import time

    from ..data import DataError, read_lines
    from ..metrics import score
    from ..outputs import atomic_write_text, refuse_existing_file
    from ..decoding.translator import Translator

    _check_decoding(args)
    src, ref = _input_path(args.src), _input_path(args.ref)
    sources, references = read_lines(src, errors=args.errors), read_lines(ref, errors=args.errors)
    if len(sources) != len(references):
        raise DataError(f"{src} has {len(sources)} lines but {ref} has {len(references)}")
    if args.output:
        refuse_existing_file(args.output, "translations")
    translator = Translator.from_run(args.run, device=args.device)
    start = time.perf_counter()
    hyps = translator.translate(sources, beam=args.beam, alpha=args.alpha, batch_tokens=args.batch_tokens,
                                progress=not args.quiet)
    seconds = time.perf_counter() - start
    n_tokens = sum(len(t) for t in translator.tokenizer.encode(hyps))
    if args.output:
        atomic_write_text(args.output, "".join(h + "\n" for h in hyps))
    print(score(hyps, references, lowercase=args.lowercase).format())
    print(f"speed: {len(sources) / seconds:.1f} sentences/s, {n_tokens / seconds:.0f} target tokens/s "
          f"({len(sources)} sentences in {seconds:.1f} s)")
    return 0


def cmd_score(args) -> int:
    from ..data import DataError, read_lines
    from ..metrics import score

    hyp, ref = _input_path(args.hyp), _input_path(args.ref)
    hyps, refs = read_lines(hyp, errors=args.errors), read_lines(ref, errors=args.errors)
    if len(hyps) != len(refs):
        raise DataError(f"{hyp} has {len(hyps)} lines but {ref} has {len(refs)}")
    print(score(hyps, refs, lowercase=args.lowercase, tokenize=args.tokenize).format())
    return 0


def cmd_attention(args) -> int:
    from ..plot import plot_attention, plot_token_attention
    from ..decoding.translator import Translator

    translator = Translator.from_run(args.run, device=args.device)
    _check_picture_input(translator, args.src, args.tgt)
    n_layers = {"encoder": len(translator.model.encoder.layers), "decoder": len(translator.model.decoder.layers)}
    layers = [_layer_index(layer, min(n_layers.values())) for layer in (args.layer or [-1])]
    heads = translator.model.config.n_heads
    for head in args.head or []:
        if not 0 <= head < heads:
            from ..config import ConfigError

            raise ConfigError(f"--head {head}: the model has heads 0 to {heads - 1}")
    maps = translator.attention(args.src, args.tgt)
    formats = tuple(args.format) or ("png",)
    drawn = plot_attention(maps, args.out, layers=layers, heads=args.head or None, formats=formats)
    print(f"source: {' '.join(maps.source_pieces)}\ntarget: {' '.join(maps.target_pieces)}")
    for files, _ in drawn.values():
        print("wrote " + ", ".join(map(str, files)))
    if args.token is not None:
        kind = "encoder" if args.token_side == "source" else "decoder"
        labels = maps.source_pieces if kind == "encoder" else maps.target_pieces
        query = _find_token(labels, args.token)
        for layer in layers:
            out = Path(args.out) / f"token_{kind}_{query}_L{layer + 1}.png"
            plot_token_attention(maps, query, out, kind=kind, layer=layer)
            print(f"wrote {out}")
    return 0


def _layer_index(layer: int, n_layers: int) -> int:
    """1-based from the start, or negative from the end -> 0-based; 0 and out-of-range layers are refused."""
    from ..config import ConfigError

    if layer == 0 or not -n_layers <= layer <= n_layers:
        raise ConfigError(f"--layer {layer}: the model has layers 1 to {n_layers} (or -1 to -{n_layers} from the "
                          "end)")
    return layer - 1 if layer > 0 else n_layers + layer


def _check_picture_input(translator, source: str, target: str | None) -> None:
    """A heatmap has one row and column per piece: refuse sentences that would make unreadable, unbounded pictures."""
    from ..config import ConfigError
    from ..plot import MAX_PIECES

    for side, text in (("--src", source), ("--tgt", target)):
        if text is None:
            continue
        if not text.strip():
            raise ConfigError(f"{side} is empty")
        n = len(translator.tokenizer.encode([text[: 20 * MAX_PIECES]])[0])
        if n >= MAX_PIECES or len(text) > 20 * MAX_PIECES:
            raise ConfigError(f"{side}: pictures are limited to {MAX_PIECES} pieces per side; this sentence has "
                              f"{n if len(text) <= 20 * MAX_PIECES else 'more than ' + str(n)}: draw a shorter one")


def _find_token(pieces: list[str], token: str) -> int:
    from ..config import ConfigError

    if token.lstrip("-").isdigit():
        index = int(token)
        if not -len(pieces) <= index < len(pieces):
            raise ConfigError(f"--token {token}: the sentence has {len(pieces)} pieces")
        return index % len(pieces)
    for i, piece in enumerate(pieces):
        if piece.lstrip("\u2581") == token:
            return i
    raise ConfigError(f"--token {token!r} is not one of the pieces: {' '.join(pieces)}")


def cmd_plot(args) -> int:
    from ..data import DataError
    from ..plot import plot_curves

    from ..plot import check_picture_target

    check_picture_target(args.out)
    for run in args.runs:
        if not (Path(run) / "metrics.jsonl").is_file():
            raise DataError(f"{run}: no metrics.jsonl (not a training run directory?)")
    plot_curves(args.runs, args.out)
    print(f"wrote {args.out}")
    return 0


def cmd_classify_train(args) -> int:
    from ..tasks.classification import ClassifierRunConfig, train_classifier
    from ..config import load_config

    train_classifier(load_config(args.recipe, args.set, ClassifierRunConfig), args.out)
    return 0


def cmd_classify_predict(args) -> int:
    from ..tasks.classification import Classifier

    from ..data import read_lines

    lines = read_lines(_input_path(args.input), errors=args.errors, allow_empty=True)
    classifier = Classifier.from_run(args.run, device=args.device)
    keep = [i for i, line in enumerate(lines) if line.strip()]
    probs = classifier.predict_proba([lines[i] for i in keep]) if keep else None
    rows = [""] * len(lines)  # an empty line gets an empty answer
    for j, i in enumerate(keep):
        best = int(probs[j].argmax())
        rows[i] = classifier.labels[best]
        if args.probabilities:
            rows[i] += "\t" + "\t".join(f"{label}={p:.4f}" for label, p in zip(classifier.labels, probs[j].tolist()))
    sys.stdout.write("".join(r + "\n" for r in rows))
    return 0


def cmd_classify_evaluate(args) -> int:
    from ..tasks.classification import Classifier, evaluate_file

    from ..data import resolve_path

    evaluate_file(Classifier.from_run(args.run, device=args.device), str(resolve_path(args.data)))
    return 0


def cmd_export(args) -> int:
    from ..export.ctranslate2 import export_ctranslate2

    out = export_ctranslate2(args.run, args.out, quantization=args.quantization)
    print(f"exported {args.run} to {out} (CTranslate2, {args.quantization or 'float32'})")
    return 0


def cmd_serve(args) -> int:
    from ..config import ConfigError

    try:
        from ..serving import Limits, serve
    except ImportError as err:
        raise ConfigError(f"the server needs FastAPI and uvicorn ({err.name} is missing): "
                          "pip install 'transduce[serve]'") from None
    limits = Limits(max_sentences=args.max_sentences, max_chars=args.max_chars, timeout_s=args.timeout)
    serve(args.run, engine=args.engine, host=args.host, port=args.port, device=args.device, limits=limits,
          batching=not args.no_batching)
    return 0


def cmd_evalb(args) -> int:
    from ..tasks.evalb import evalb_command

    sys.stdout.write(evalb_command(_input_path(args.gold), _input_path(args.test), args.params, strict=args.strict,
                                   per_sentence=args.per_sentence))
    return 0


def _sacrebleu_tokenizers() -> list[str]:
    from sacrebleu.metrics.bleu import BLEU

    return sorted(BLEU.TOKENIZERS)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (and exit status 2), like every other error."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="transduce", description=__doc__.split(":")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="train and evaluate a small model on the built-in numbers task")
    p.add_argument("--out", default="runs/demo", help="run directory (default: runs/demo)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override the recipe")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("prepare", help="train the joint SentencePiece vocabulary and encode parallel text")
    p.add_argument("--train", required=True, help="training file prefix (PREFIX.SRC and PREFIX.TGT, .gz allowed)")
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
    p.add_argument("--out", required=True, help="a new folder (or an earlier `prepare` output, replaced)")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("train", help="train (or resume) a model from a TOML recipe")
    p.add_argument("recipe", nargs="?", help="TOML recipe file or a shipped recipe's name (demo, multi30k, "
                   "wmt14-base, ...); omit it to resume the run in --out with its saved config")
    p.add_argument("--out", required=True, help="run directory; training resumes if it holds checkpoints")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override the recipe")
    p.add_argument("--device", help="cpu, cuda, cuda:1, ... (same as --set train.device=...)")
    p.add_argument("--compile", action="store_true", help="use torch.compile (same as --set train.compile=true)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("average", help="average the last N checkpoints of a run")
    p.add_argument("run")
    p.add_argument("--last", type=int, default=5, help="how many of the newest checkpoints (>= 1)")
    p.add_argument("--output", help="a .safetensors file (default RUN/averaged.safetensors)")
    p.set_defaults(func=cmd_average)

    def decode_options(p):
        p.add_argument("run", help="run directory, or a .safetensors weights file inside one")
        p.add_argument("--beam", type=int, default=None, help="beam size (default: the run's, 4); 1 = greedy")
        p.add_argument("--alpha", type=float, default=None, help="length penalty alpha (default 0.6)")
        p.add_argument("--batch-tokens", type=int, default=None, help="source tokens per batch")
        p.add_argument("--device", default="auto")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        p.add_argument("--errors", choices=["strict", "replace"], default="strict", help="invalid UTF-8 input")

    p = sub.add_parser("translate", help="translate stdin (or --input) to stdout, one line per line")
    decode_options(p)
    p.add_argument("--input", help="read this file instead of stdin")
    p.add_argument("--nbest", type=int, default=1, help="print the N best as INDEX<TAB>SCORE<TAB>TEXT")
    p.add_argument("--length-penalty", choices=["gnmt", "length", "none"], default=None)
    p.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch",
                   help="ctranslate2: export on the fly (or give an export folder) and decode with CTranslate2")
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", help="translate a test set and print sacreBLEU and chrF")
    decode_options(p)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--output", help="also write the translations to this new file")
    p.add_argument("--lowercase", action="store_true")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("score", help="sacreBLEU and chrF of existing translations")
    p.add_argument("--hyp", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--lowercase", action="store_true")
    p.add_argument("--tokenize", default="13a", choices=_sacrebleu_tokenizers(), help="sacreBLEU tokenizer")
    p.add_argument("--errors", choices=["strict", "replace"], default="strict", help="invalid UTF-8 input")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("attention", help="heatmaps of the attention weights for one sentence")
    p.add_argument("run", help="run directory, or a .safetensors weights file inside one")
    p.add_argument("--src", required=True, help="the source sentence")
    p.add_argument("--tgt", help="the target sentence (default: the model's own translation)")
    p.add_argument("--out", required=True, help="folder for the pictures (new, empty, or earlier pictures)")
    p.add_argument("--layer", type=int, action="append", help="layer (1-based from the start, negative from the "
                   "end; repeatable; default: the last)")
    p.add_argument("--head", type=int, action="append", help="0-based head index (repeatable; default: all)")
    p.add_argument("--format", action="append", choices=["png", "svg"], default=[], help="png (default) or svg")
    p.add_argument("--token", help="also draw one query token's attention per head (a piece or an index)")
    p.add_argument("--token-side", choices=["source", "target"], default="source")
    p.add_argument("--device", default="auto")
    p.set_defaults(func=cmd_attention)

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

    p = sub.add_parser("export", help="export a trained model to another inference engine")
    esub = p.add_subparsers(dest="export_command", required=True, metavar="ENGINE")
    e = esub.add_parser("ctranslate2", help="a CTranslate2 model folder (pip install 'transduce[export]')")
    e.add_argument("run", help="run directory, or a .safetensors weights file inside one")
    e.add_argument("--out", required=True, help="a new folder (or an earlier export, replaced)")
    e.add_argument("--quantization", choices=["int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                                               "float16", "bfloat16", "float32"], help="default: float32")
    e.set_defaults(func=cmd_export)

    p = sub.add_parser("serve", help="an HTTP API and a web page for a trained model (pip install 'transduce[serve]')")
    p.add_argument("run", help="run directory (translation or classification), or a CTranslate2 export folder")
    p.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default="auto")
    p.add_argument("--no-batching", action="store_true", help="decode requests one at a time")
    p.add_argument("--max-sentences", type=int, default=64, help="sentences per request")
    p.add_argument("--max-chars", type=int, default=2000, help="characters per sentence")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds before a request gets 504")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("evalb", help="EVALB bracket scores of parses (COLLINS.prm + DELETE_LABEL ROOT by default)")
    p.add_argument("gold", help="gold trees, one per line")
    p.add_argument("test", help="parser output, one tree per line")
    p.add_argument("--params", help="an EVALB .prm parameter file")
    p.add_argument("--strict", action="store_true", help="error and skip sentences count as zero matched")
    p.add_argument("--per-sentence", action="store_true", help="also print EVALB's per-sentence rows")
    p.set_defaults(func=cmd_evalb)

    p = sub.add_parser("plot", help="training curves of one or more runs")
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--out", required=True, help="image file (.png, .svg or .pdf)")
    p.set_defaults(func=cmd_plot)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except _user_errors() as err:
        print(f"transduce {args.command}: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of our output went away (`| head`): not an error
        return 0
    except OSError as err:  # full or read-only disk, permissions, a path that is not what it should be
        print(f"transduce {args.command}: error: {_environment_error(err)}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"transduce {args.command}: error: out of memory (try smaller batches or inputs)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # training has saved a checkpoint by now (train.py)
        return 130
