"""Decoding commands: translate, evaluate, score (argument tables and the calls they make)."""

from __future__ import annotations

import sys

from ..documents.formats import FORMATS
from ..documents.sentences import SPLITS
from .common import (
    check_decoding,
    check_precision_engine,
    decode_options,
    input_path,
    precision_option,
    sacrebleu_tokenizers,
)


def cmd_translate(args) -> int:
    from ..decoding.translator import Translator
    from ..documents.formats import detect_format
    from ..export.ct2_translator import CTranslate2Translator  # does not import ctranslate2 until used

    check_decoding(args)
    check_precision_engine(args)
    _check_engine(args)
    fmt = args.format or detect_format(args.input)
    split = args.split or ("lines" if fmt == "text" else "sentences")
    if fmt != "text" and (args.nbest != 1 or args.alignment or args.constraints or args.prefix):
        from ..config import ConfigError

        raise ConfigError(
            f"--format {fmt} writes one translated document: --nbest, --alignment, --constraints and --prefix need "
            "text input (a glossary applies to documents too)"
        )
    glossary = _glossary(args)
    translator: Translator | CTranslate2Translator
    if args.engine == "ctranslate2":
        translator = CTranslate2Translator.from_run(args.run, device=args.device, exact=args.exact)
    else:
        translator = Translator.from_runs([args.run, *args.ensemble], device=args.device, precision=args.precision)
    options = dict(
        beam=args.beam,
        alpha=args.alpha,
        batch_tokens=args.batch_tokens,
        length_penalty=args.length_penalty,
        **_sampling(args),
        **({} if args.patience is None else {"patience": args.patience}),
    )
    if glossary is not None:
        options["glossary"] = glossary
    if fmt != "text":
        return _translate_document(translator, args, fmt, {**options, "split": split, "mbr": args.mbr})
    from ..data import read_lines

    lines = read_lines(input_path(args.input), errors=args.errors, allow_empty=True)
    progress = not sys.stdout.isatty() and not args.quiet
    decoded = translator.decode_lines(
        lines,
        nbest=args.nbest,
        mbr=args.mbr,
        split=split,
        alignment=args.alignment,
        progress=progress,
        **_per_line(args, len(lines)),
        **options,
    )
    _note_cut(decoded.n_cut, len(decoded.cut))
    out = sys.stdout
    for i, hyps in enumerate(decoded.hypotheses):
        if args.nbest == 1:
            out.write(_with_links(hyps[0] if hyps else None, args.alignment) + "\n")
        else:
            for h in hyps:
                out.write(f"{i}\t{h.score:.4f}\t{_with_links(h, args.alignment)}\n")
    out.flush()
    return 0


def _glossary(args):
    """--glossary's terms (terminology/glossary.py), or None."""
    from ..terminology import read_glossary

    return read_glossary(args.glossary, errors=args.errors) if args.glossary else None


def _per_line(args, n_lines: int) -> dict:
    """--constraints and --prefix: one line each per input line (terminology/constraints.py)."""
    from ..terminology import check_count, read_constraints, read_prefixes

    given: dict = {}
    name = args.input or "the input"
    if args.constraints:
        given["constraints"] = read_constraints(args.constraints, errors=args.errors)
        check_count("--constraints", args.constraints, len(given["constraints"]), n_lines, name)
    if args.prefix:
        given["prefixes"] = read_prefixes(args.prefix, errors=args.errors)
        check_count("--prefix", args.prefix, len(given["prefixes"]), n_lines, name)
    return given


def _check_engine(args) -> None:
    """translate's engine flags that only one engine takes."""
    from ..config import ConfigError

    if args.engine == "ctranslate2" and args.ensemble:
        raise ConfigError("--ensemble decodes with --engine torch only")
    if args.engine == "ctranslate2" and (args.constraints or args.glossary):
        from ..export.ct2_translator import NO_CONSTRAINTS

        raise ConfigError(
            f"{NO_CONSTRAINTS}: --constraints and --glossary need --engine torch (--prefix works with both)"
        )
    if args.exact and args.engine != "ctranslate2":
        raise ConfigError("--exact applies to --engine ctranslate2 (the torch engine is the reference)")
    if args.patience is not None and args.engine == "ctranslate2":
        raise ConfigError("--patience applies to --engine torch (ctranslate2 runs with its patience 1, or --exact)")


def _with_links(hyp, alignment: bool) -> str:
    """A translation's text, and with --alignment " ||| " and its Pharaoh links (fairseq's and Marian's layout)."""
    from ..documents.words import pharaoh

    text = hyp.text if hyp else ""
    return f"{text} ||| {pharaoh(hyp.alignment or [] if hyp else [])}" if alignment else text


def _note_cut(n_cut: int, n_lines: int | None = None) -> None:
    if n_cut:
        where = f" on {n_lines} line(s)" if n_lines is not None else ""
        print(
            f"note: {n_cut} sentence(s){where} longer than the model's positions were cut into parts "
            "(at clause punctuation, else between words), each translated",
            file=sys.stderr,
        )


def _translate_document(translator, args, fmt: str, options: dict) -> int:
    """--format html/xml/srt/vtt: the whole input read as one document, its translation written at once."""
    from ..data import DataError
    from ..decoding.documents import translate_document

    path = input_path(args.input)
    try:
        raw = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
        text = raw.decode("utf-8", errors=args.errors)
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (byte {err.start}); --errors replace reads it anyway") from None
    name = "<stdin>" if str(path) == "-" else str(path)
    document = translate_document(translator, text, fmt, name=name, **options)
    _note_cut(document.n_cut)
    if document.tags_dropped:
        print(f"note: {document.tags_dropped} inline tag(s) inside subtitle cues dropped", file=sys.stderr)
    sys.stdout.write(document.text)
    sys.stdout.flush()
    return 0


def cmd_evaluate(args) -> int:
    import time

    from ..data import DataError, read_lines
    from ..decoding.translator import Translator
    from ..metrics import score
    from ..outputs import atomic_write_text, refuse_existing_file

    check_decoding(args)
    src, ref = input_path(args.src), input_path(args.ref)
    sources, references = read_lines(src, errors=args.errors), read_lines(ref, errors=args.errors)
    if len(sources) != len(references):
        raise DataError(f"{src} has {len(sources)} lines but {ref} has {len(references)}")
    if args.output:
        refuse_existing_file(args.output, "translations")
    translator = Translator.from_runs([args.run, *args.ensemble], device=args.device, precision=args.precision)
    start = time.perf_counter()
    hyps = translator.translate(
        sources,
        beam=args.beam,
        alpha=args.alpha,
        mbr=args.mbr,
        batch_tokens=args.batch_tokens,
        patience=args.patience,
        progress=not args.quiet,
        **_sampling(args),
    )
    seconds = time.perf_counter() - start
    n_tokens = sum(len(t) for t in translator.tokenizer.encode(hyps))
    if args.output:
        atomic_write_text(args.output, "".join(h + "\n" for h in hyps))
    print(score(hyps, references, lowercase=args.lowercase).format())
    print(
        f"speed: {len(sources) / seconds:.1f} sentences/s, {n_tokens / seconds:.0f} target tokens/s "
        f"({len(sources)} sentences in {seconds:.1f} s)"
    )
    return 0


def _sampling(args) -> dict:
    """The sampling flags and the tag given (the others are the run's decode.* settings)."""
    given = dict(
        sampling_topk=args.sampling_topk,
        sampling_topp=args.sampling_topp,
        temperature=args.temperature,
        seed=args.seed,
        tag=args.tag,
    )
    return {key: value for key, value in given.items() if value is not None}


SCORE_BLOCK = 10_000  # pairs score-pairs reads, scores and writes at a time: its memory, whatever the files' size
SHOWN_LINES = 10  # the cut pairs' lines named in score-pairs' note


def cmd_score_pairs(args) -> int:
    """Per pair of --src and --tgt, its scores on one line, in file order: the files are read, scored and written
    SCORE_BLOCK pairs at a time (data/pair_blocks.py checks both through first: different line counts, an empty file,
    invalid UTF-8 are refused before a score is written).

    A side longer than the model's positions is scored on its first pieces (what fits: model.max_len - 1 tokens, EOS
    included), not refused: a user filtering a corpus by score needs a score line for every pair, so that the output
    stays beside the corpus line for line, and one long sentence among millions must not stop the run. One note on
    stderr counts those pairs and names their first lines; their TOKENS column counts what was scored."""
    from ..config.bounds import check_value
    from ..data.pair_blocks import pair_blocks
    from ..decoding.translator import Translator
    from ..documents.words import pharaoh
    from ..export.ct2_translator import CTranslate2Translator

    check_precision_engine(args)
    if args.batch_tokens is not None:
        check_value("decode.batch_tokens", args.batch_tokens, name="--batch-tokens", kind=int)
    blocks = pair_blocks(input_path(args.src), input_path(args.tgt), SCORE_BLOCK, errors=args.errors)
    scorer: Translator | CTranslate2Translator
    if args.engine == "ctranslate2":
        scorer = CTranslate2Translator.from_run(args.run, device=args.device)
    else:
        scorer = Translator.from_run(args.run, device=args.device, precision=args.precision)
    out, tag = sys.stdout, args.tag or ""
    cut: list[int] = []  # the cut pairs' line numbers, the first SHOWN_LINES of them
    n_cut = 0
    for first, sources, targets in blocks:
        scores = scorer.score(sources, targets, batch_tokens=args.batch_tokens, tokens=args.tokens, tag=tag)
        links = scorer.pair_alignments(sources, targets, tag=tag) if args.alignment else [[] for _ in scores]
        for pair, pair_links in zip(scores, links):
            fields = [f"{pair.total:.6f}", str(pair.tokens), f"{pair.mean:.6f}"]
            fields += [" ".join(f"{x:.6f}" for x in pair.per_token or [])] if args.tokens else []
            fields += [pharaoh(pair_links)] if args.alignment else []
            out.write("\t".join(fields) + "\n")
        out.flush()
        lines = [first + j + 1 for j, pair in enumerate(scores) if pair.cut]
        n_cut += len(lines)
        cut += lines[: SHOWN_LINES - len(cut)]
    _note_cut_pairs(n_cut, cut)
    return 0


def _note_cut_pairs(n_cut: int, lines: list[int]) -> None:
    if n_cut:
        more = f" and {n_cut - len(lines)} more" if n_cut > len(lines) else ""
        print(
            f"note: {n_cut} pair(s) longer than the model's positions were scored on the pieces that fit (line(s) "
            f"{', '.join(map(str, lines))}{more}): their scores count fewer tokens than the sentences hold",
            file=sys.stderr,
        )


def cmd_score(args) -> int:
    from ..data import DataError, read_lines
    from ..metrics import score

    hyp, ref = input_path(args.hyp), input_path(args.ref)
    # translations that are all empty lines are a real (untrained) model's output: scored (BLEU 0), not refused;
    # a hypothesis file of no lines at all is refused by the line counts
    hyps, refs = read_lines(hyp, errors=args.errors, allow_empty=True), read_lines(ref, errors=args.errors)
    if len(hyps) != len(refs):
        raise DataError(f"{hyp} has {len(hyps)} lines but {ref} has {len(refs)}")
    print(score(hyps, refs, lowercase=args.lowercase, tokenize=args.tokenize).format())
    return 0


def register(sub) -> None:
    _register_translate(sub)
    p = sub.add_parser("evaluate", help="translate a test set and print sacreBLEU and chrF")
    decode_options(p)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--output", help="also write the translations to this new file")
    p.add_argument("--lowercase", action="store_true")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "score-pairs",
        help="the model's log-probability of given (source, target) pairs: per line TOTAL<TAB>TOKENS<TAB>MEAN",
    )
    p.add_argument("run", help="run directory, a .safetensors weights file inside one, or a CTranslate2 export")
    p.add_argument("--src", required=True, help="sources, one a line")
    p.add_argument("--tgt", required=True, help="targets, one a line, as many as sources")
    p.add_argument("--tokens", action="store_true", help="also each token's log-probability (a 4th column)")
    p.add_argument("--tag", default=None, metavar="T", help="put this tag (data.corpora's) before every source")
    p.add_argument(
        "--alignment",
        action="store_true",
        help="also each pair's word alignment as Pharaoh links (a last column: i-j ..., 0-based, words split at "
        "whitespace), from the attention of model.alignment_layer/alignment_heads",
    )
    p.add_argument("--batch-tokens", type=int, default=None, help="tokens per batch (default: decode.batch_tokens)")
    p.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch", help="ctranslate2: score_batch")
    p.add_argument("--device", default="auto")
    precision_option(p)
    p.add_argument("--errors", choices=["strict", "replace"], default="strict", help="invalid UTF-8 input")
    p.set_defaults(func=cmd_score_pairs)

    p = sub.add_parser("score", help="sacreBLEU and chrF of existing translations")
    p.add_argument("--hyp", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--lowercase", action="store_true")
    p.add_argument("--tokenize", default="13a", choices=sacrebleu_tokenizers(), help="sacreBLEU tokenizer")
    p.add_argument("--errors", choices=["strict", "replace"], default="strict", help="invalid UTF-8 input")
    p.set_defaults(func=cmd_score)


def _register_translate(sub) -> None:
    """translate's arguments: the decoding options, its input and output forms, the engine."""
    p = sub.add_parser("translate", help="translate stdin (or --input) to stdout, one line per line")
    decode_options(p)
    p.add_argument("--input", help="read this file instead of stdin")
    p.add_argument("--nbest", type=int, default=1, help="print the N best as INDEX<TAB>SCORE<TAB>TEXT")
    p.add_argument("--length-penalty", choices=["gnmt", "length", "none"], default=None)
    p.add_argument(
        "--split",
        choices=SPLITS,
        default=None,
        help="lines: a line is one sentence (a test set); sentences: a line is a paragraph, split into sentences by "
        "the source language's rules and rejoined with its spacing (the default for --format other than text)",
    )
    p.add_argument(
        "--alignment",
        action="store_true",
        help="also print each translation's word alignment: TEXT ||| i-j ... (Pharaoh links, 0-based source word - "
        "target word, words split at whitespace), from the attention of model.alignment_layer/alignment_heads",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="text (a line a line), html or xml (markup kept, inline tags moved with their words), srt or vtt "
        "(cue numbers and timings kept); default: from --input's extension, text for stdin",
    )
    p.add_argument(
        "--constraints",
        metavar="FILE",
        help="per input line, target phrases separated by tabs that must appear in its translation, and after a "
        "field ## phrases that must not (lexical constraints: Dynamic Beam Allocation in the beam search)",
    )
    p.add_argument(
        "--glossary",
        metavar="TSV",
        help="source term<TAB>target term per line: a sentence holding a source term (whole words, any case) must "
        "contain its target term; a target equal to the source keeps the term untranslated",
    )
    p.add_argument(
        "--prefix",
        metavar="FILE",
        help="per input line, the text its translation starts with (empty: none); the search goes on from it",
    )
    p.add_argument(
        "--engine",
        choices=["torch", "ctranslate2"],
        default="torch",
        help="ctranslate2: export on the fly (or give an export folder) and decode with CTranslate2",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        help="with --engine ctranslate2: reproduce the torch decoder's output (one engine call per source length, "
        "patience 4) instead of the engine's speed (one call, its own patience 1)",
    )
    p.set_defaults(func=cmd_translate)
