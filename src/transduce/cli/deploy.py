"""Deployment: export to CTranslate2, Hugging Face or Argos Translate, serve over HTTP (argument tables and the calls
they make)."""

from __future__ import annotations

from .common import check_precision_engine, precision_option

# export/ctranslate2.py's QUANTIZATIONS, here so that the argument table does not import the export (torch)
QUANTIZATIONS = ["int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32"]


def cmd_export(args) -> int:
    from ..export.ctranslate2 import export_ctranslate2

    out = export_ctranslate2(args.run, args.out, quantization=args.quantization)
    print(f"exported {args.run} to {out} (CTranslate2, {args.quantization or 'float32'})")
    return 0


def cmd_export_huggingface(args) -> int:
    from ..export.huggingface import export_huggingface, read_manifest

    out = export_huggingface(args.run, args.out)
    kind = (read_manifest(out) or {}).get("class", "MarianMTModel")
    print(f"exported {args.run} to {out} (Hugging Face Transformers: {kind} and MarianTokenizer, float32)")
    return 0


def cmd_export_argos(args) -> int:
    from ..export.argos import export_argos, package_metadata

    for out in export_argos(args.run, args.out, quantization=args.quantization, tag=args.tag):
        meta = package_metadata(out)
        pair = f"{meta['from_code']} → {meta['to_code']}"
        print(f"exported {args.run} to {out} (Argos Translate package {pair}, {args.quantization or 'float32'})")
    return 0


def cmd_serve(args) -> int:
    from ..config import ConfigError

    try:
        from ..serving import Limits, serve
    except ImportError as err:
        raise ConfigError(
            f"the server needs FastAPI and uvicorn ({err.name} is missing): pip install 'transduce[serve]'"
        ) from None
    limits = Limits(max_sentences=args.max_sentences, max_chars=args.max_chars, timeout_s=args.timeout)
    if args.exact and args.engine != "ctranslate2":
        raise ConfigError("--exact applies to --engine ctranslate2 (the torch engine is the reference)")
    check_precision_engine(args)
    runs = _runs(args)
    glossary = _server_glossary(args)
    cors, api_keys = _access(args)
    serve(
        runs,
        engine=args.engine,
        exact=args.exact,
        threads=args.threads,
        host=args.host,
        port=args.port,
        device=args.device,
        precision=args.precision,
        limits=limits,
        batching=not args.no_batching,
        glossary=glossary,
        cors=cors,
        api_keys=api_keys,
    )
    return 0


def _runs(args):
    """The runs to serve (a folder of runs is its runs), refused in one line before anything is loaded where several
    cannot be served together (serving/pairs.py)."""
    from ..serving.pairs import check_runs, runs_of

    runs = runs_of(args.runs)
    check_runs(runs, args.engine, glossary=bool(args.glossary))
    return runs


def _access(args):
    """--cors origins and --api-keys read at start: a bad origin or keys file is one line, before the model is
    loaded (serving/access.py)."""
    from ..serving.access import check_origins, read_api_keys

    return check_origins(args.cors or []), read_api_keys(args.api_keys) if args.api_keys else None


def _server_glossary(args):
    """--glossary read at start (a bad file is one line naming its line, before the model is loaded), or None. A run
    that is not a translation run is refused once loaded (serving/terminology.py)."""
    from ..serving.terminology import check_server_glossary
    from ..terminology import read_glossary

    if not args.glossary:
        return None
    check_server_glossary(None, args.engine)  # before a large file is read and compiled
    return read_glossary(args.glossary)


def register(sub) -> None:
    _register_export(sub)
    _register_serve(sub)


def _register_export(sub) -> None:
    """export's engines: ctranslate2, huggingface, argos."""
    p = sub.add_parser("export", help="export a trained model to another inference engine")
    esub = p.add_subparsers(dest="export_command", required=True, metavar="ENGINE")
    e = esub.add_parser("ctranslate2", help="a CTranslate2 model folder (pip install 'transduce[export]')")
    e.add_argument("run", help="run directory, or a .safetensors weights file inside one")
    e.add_argument("--out", required=True, help="a new folder (or an earlier export, replaced)")
    e.add_argument("--quantization", choices=QUANTIZATIONS, help="default: float32")
    e.set_defaults(func=cmd_export)
    h = esub.add_parser(
        "huggingface",
        help="a Hugging Face Transformers folder: MarianMTModel (pre-LN: Pegasus) + MarianTokenizer "
        "(pip install 'transduce[hf]')",
        description="Write a folder that transformers loads with no code of transduce: "
        "MarianMTModel.from_pretrained(DIR) (a pre-LN run: PegasusForConditionalGeneration) and "
        "AutoTokenizer.from_pretrained(DIR) (MarianTokenizer), with the same token ids and logits, a "
        "generation_config.json of the run's decoding settings and a model card (README.md). Refused, naming the "
        "setting: restricted attention, learned positions, a LayerNorm eps other than 1e-5, lowercasing, untied "
        "pre-LN embeddings, a run that is not a translation run.",
    )
    h.add_argument("run", help="run directory, or a .safetensors weights file inside one")
    h.add_argument("--out", required=True, help="a new folder (or an earlier Hugging Face export, replaced)")
    h.set_defaults(func=cmd_export_huggingface)
    a = esub.add_parser(
        "argos",
        help="an Argos Translate package, NAME.argosmodel (LibreTranslate serves it; pip install 'transduce[export]')",
        description="Write the zip that Argos Translate installs (argostranslate.package.install_from_path) and "
        "LibreTranslate serves: one folder NAME holding metadata.json (the pair: data.src -> data.tgt), model/ (the "
        "CTranslate2 export), sentencepiece.model and a model card (README.md). A run whose every training corpus "
        "is tagged gives one package per tag, NAME-TAG.argosmodel (the engine puts the tag before every source). "
        "Refused in one line: a run of another task, a vocabulary Argos cannot apply (two SentencePiece models, "
        "lowercasing).",
    )
    a.add_argument("run", help="run directory, or a .safetensors weights file inside one")
    a.add_argument("--out", required=True, help="a new file NAME.argosmodel (or an earlier package of ours, replaced)")
    a.add_argument("--quantization", choices=QUANTIZATIONS, help="default: float32 (Argos's own packages: int8)")
    a.add_argument("--tag", help="the one package of this tag, put before every source (as translate --tag)")
    a.set_defaults(func=cmd_export_argos)


def _register_serve(sub) -> None:
    p = sub.add_parser("serve", help="an HTTP API and a web page for a trained model (pip install 'transduce[serve]')")
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run directory (translation, classification or parsing), or a CTranslate2 export folder; several "
        "translation runs (or a folder holding them) serve one language pair each, requests routed by source and "
        "target",
    )
    p.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch")
    p.add_argument(
        "--exact",
        action="store_true",
        help="with --engine ctranslate2: the torch decoder's output (slower) instead of the engine's speed",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads for the model (0: the engine's default); fewer than the cores leaves room for the HTTP side; "
        "with several runs, for each model in turn (they decode one at a time)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default="auto")
    precision_option(p)
    p.add_argument("--no-batching", action="store_true", help="decode requests one at a time")
    p.add_argument(
        "--glossary",
        metavar="TSV",
        help="source term<TAB>target term per line, applied to every translation request (a request's own "
        "glossary entries win); one translation run on the torch engine only",
    )
    p.add_argument(
        "--cors",
        action="append",
        metavar="ORIGIN",
        help="let pages of this origin call the API (e.g. https://example.org, moz-extension://UUID, or * for any); "
        "repeatable; default: none (no CORS headers)",
    )
    p.add_argument(
        "--api-keys",
        metavar="FILE",
        help="one key a line: /v1/* (Authorization: Bearer KEY), /translate and /detect (LibreTranslate's api_key) "
        "then need one of them; default: no keys",
    )
    p.add_argument("--max-sentences", type=int, default=64, help="sentences per request")
    p.add_argument("--max-chars", type=int, default=2000, help="characters per sentence")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds before a request gets 504")
    p.set_defaults(func=cmd_serve)
