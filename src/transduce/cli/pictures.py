"""Pictures: attention heatmaps and training curves (argument tables and the calls they make)."""

from __future__ import annotations

from pathlib import Path


def _attention_source(run: str, device: str):
    """The model whose attention is drawn: a Translator, or a Parser for a parsing run (its targets are trees)."""
    from ..config import read_config_dict
    from ..decoding.translator import Translator
    from ..runs import find_weights

    run_dir, _ = find_weights(run)
    if read_config_dict(run_dir / "config.json").get("task") == "parsing":
        from ..decoding.parser import Parser

        return Parser.from_run(run, device=device)
    return Translator.from_run(run, device=device)


def cmd_attention(args) -> int:
    from ..outputs import check_replaceable
    from ..plot import plot_attention, plot_token_attention

    check_replaceable(args.out, "pictures")  # before the model is loaded (plot_attention claims it)
    translator = _attention_source(args.run, args.device)
    _check_picture_input(translator, args.src, args.tgt)
    n_layers = {"encoder": len(translator.model.encoder.layers), "decoder": len(translator.model.decoder.layers)}
    layers = [_layer_index(layer, n_layers) for layer in (args.layer or [-1])]
    heads = translator.model.config.n_heads
    for head in args.head or []:
        if not 0 <= head < heads:
            from ..config import ConfigError

            raise ConfigError(f"--head {head}: the model has heads 0 to {heads - 1}")
    maps = translator.attention(args.src, args.tgt)
    _check_own_output(maps, given=args.tgt is not None)
    kind = "encoder" if args.token_side == "source" else "decoder"
    if args.token is not None:  # refused before any picture is drawn (issue 65 item 13)
        query = _find_token(maps.source_pieces if kind == "encoder" else maps.target_pieces, args.token)
    formats = tuple(args.format) or ("png",)
    drawn = plot_attention(maps, args.out, layers=layers, heads=args.head or None, formats=formats)
    print(f"source: {' '.join(maps.source_pieces)}\ntarget: {' '.join(maps.target_pieces)}")
    for files, _ in drawn.values():
        print("wrote " + ", ".join(map(str, files)))
    if args.token is not None:
        for layer in layers:
            out = Path(args.out) / f"token_{kind}_{query}_L{layer % n_layers[kind] + 1}.png"
            plot_token_attention(maps, query, out, kind=kind, layer=layer)
            print(f"wrote {out}")
    return 0


def _layer_index(layer: int, n_layers: dict[str, int]) -> int:
    """1-based from the start -> 0-based; negative (from the end of each stack) is kept, so -1 is the last layer of
    the encoder and of the decoder even when their depths differ. 0 and layers beyond a stack are refused."""
    from ..config import ConfigError

    shallow = min(n_layers.values())
    if layer == 0 or not -shallow <= layer <= shallow:
        depths = ", ".join(f"{kind} {n}" for kind, n in n_layers.items())
        raise ConfigError(
            f"--layer {layer}: the model's stacks have {depths} layers; give 1 to {shallow} "
            f"(or -1 to -{shallow} from the end of each)"
        )
    return layer - 1 if layer > 0 else layer


def _check_picture_input(translator, source: str, target: str | None) -> None:
    """A heatmap has one row and column per piece: refuse sentences that would make unreadable, unbounded pictures."""
    from ..config import ConfigError
    from ..plot import MAX_PIECES

    for side, text in (("--sentence", source), ("--target", target)):
        if text is None:
            continue
        if not text.strip():
            raise ConfigError(f"{side} is empty")
        n = _pieces(translator, text, target=side == "--target") if len(text) <= 20 * MAX_PIECES else None
        if n is None or n >= MAX_PIECES:
            size = f"{len(text):,} characters" if n is None else f"{n} pieces"
            raise ConfigError(
                f"{side}: pictures are limited to {MAX_PIECES} pieces per side (and {20 * MAX_PIECES:,} characters); "
                f"this one has {size}: draw a shorter one"
            )


def _check_own_output(maps, *, given: bool) -> None:
    """Without --target the model's own output is drawn: it is held to the same limit as a given one (the decoder's
    input row <s> aside), checked before any picture is written."""
    from ..config import ConfigError
    from ..plot import MAX_PIECES

    n = len(maps.target_pieces) - 1
    if not given and n >= MAX_PIECES:
        raise ConfigError(
            f"the model's own output for --sentence has {n} pieces; pictures are limited to {MAX_PIECES} pieces per "
            "side: give a shorter --sentence, or the --target to draw"
        )


def _pieces(model, text: str, *, target: bool) -> int:
    """How many rows or columns `text` takes in a heatmap: subword pieces, or a parser's tree tokens."""
    if target and hasattr(model, "target_ids"):
        from ..data.trees import parse_tree

        return len(model.target_ids(parse_tree(text, source="--target")))
    return len(model.tokenizer.encode([text])[0])


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
    from ..plot import check_picture_target, plot_curves

    check_picture_target(args.out)
    for run in args.runs:
        if not (Path(run) / "metrics.jsonl").is_file():
            raise DataError(f"{run}: no metrics.jsonl (not a training run directory?)")
    plot_curves(args.runs, args.out)
    print(f"wrote {args.out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("attention", help="heatmaps of the attention weights for one sentence")
    p.add_argument("run", help="run directory, or a .safetensors weights file inside one")
    # a sentence, not a file (evaluate's --src is a file): --sentence and --target; --src/--tgt still accepted
    p.add_argument("--sentence", "--src", dest="src", required=True, help="the source sentence itself")
    p.add_argument("--target", "--tgt", dest="tgt", help="the target sentence or tree (default: the model's own)")
    p.add_argument("--out", required=True, help="folder for the pictures (new, empty, or earlier pictures)")
    p.add_argument(
        "--layer",
        type=int,
        action="append",
        help="layer (1-based from the start, negative from the end; repeatable; default: the last)",
    )
    p.add_argument("--head", type=int, action="append", help="0-based head index (repeatable; default: all)")
    p.add_argument("--format", action="append", choices=["png", "svg"], default=[], help="png (default) or svg")
    p.add_argument("--token", help="also draw one query token's attention per head (a piece or an index)")
    p.add_argument("--token-side", choices=["source", "target"], default="source")
    p.add_argument("--device", default="auto")
    p.set_defaults(func=cmd_attention)

    p = sub.add_parser("plot", help="training curves of one or more runs")
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--out", required=True, help="image file (.png, .svg or .pdf)")
    p.set_defaults(func=cmd_plot)
