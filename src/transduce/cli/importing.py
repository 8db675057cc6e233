"""Import: a model made elsewhere becomes a run directory (argument table and the call it makes)."""

from __future__ import annotations


def cmd_import(args) -> int:
    from ..export.hf_import import import_huggingface
    from ..outputs import refuse_link

    refuse_link(args.out)  # before the model is read (the import's own checks come after that)
    out = import_huggingface(args.folder, args.out, src=args.src, tgt=args.tgt)
    print(f"imported {args.folder} into {out} (a run directory: translate, evaluate, serve, train --init-from)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("import", help="make a run directory from a model trained elsewhere")
    isub = p.add_subparsers(dest="import_command", required=True, metavar="FORMAT")
    h = isub.add_parser(
        "huggingface", help="a MarianMT folder (config.json, model.safetensors, vocab.json, source.spm, target.spm)"
    )
    h.add_argument("folder", help="the model's folder, as transformers' save_pretrained writes it")
    h.add_argument("--out", required=True, help="a new run directory (or an empty folder, or an earlier import)")
    h.add_argument("--src", help="the source language (default: tokenizer_config.json's source_lang)")
    h.add_argument("--tgt", help="the target language (default: tokenizer_config.json's target_lang)")
    h.set_defaults(func=cmd_import)
