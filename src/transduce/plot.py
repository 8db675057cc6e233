"""Pictures: attention heatmaps (the paper's §3.2.3: encoder self-, decoder self- and encoder-decoder attention) and
training curves. matplotlib with the Agg backend; PNG and SVG.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

from .data import DataError
from .outputs import OutputError, atomic_write, claim_folder, refuse_link

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

MAX_PIECES = 100  # a picture's side: beyond this a heatmap is unreadable and its figure grows without bound
FORMATS = {".png": "Software", ".svg": "Creator", ".pdf": "Creator"}  # where each format keeps our mark
MARK = "transduce plot"

KINDS = {  # name -> (AttentionMaps field, query labels, key labels, title)
    "encoder": ("encoder", "source_pieces", "source_pieces", "encoder self-attention"),
    "decoder": ("decoder", "target_pieces", "target_pieces", "decoder self-attention (masked)"),
    "cross": ("cross", "target_pieces", "source_pieces", "encoder-decoder attention"),
}


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 4)
    return (n + cols - 1) // cols, cols


def plot_attention(
    maps, out_dir: str | Path, *, layers=(-1,), heads=None, formats=("png",), cell: float = 0.28
) -> dict[str, tuple[list[Path], np.ndarray]]:
    """One figure per (kind, layer): a grid of heads, axes labelled with the subword pieces.

    Returns {"encoder_L3": ([files], matrices drawn (heads, queries, keys)), ...}.
    """
    out_dir = claim_folder(out_dir, "pictures")  # new, empty, or pictures of ours: never a user's folder
    drawn = {}
    for kind, (field, q_attr, k_attr, title) in KINDS.items():
        weights = getattr(maps, field)  # (L, H, Q, K)
        q_labels, k_labels = getattr(maps, q_attr), getattr(maps, k_attr)
        n_layers = weights.shape[0]
        for layer in layers:
            layer = layer % n_layers
            head_ids = list(range(weights.shape[1])) if heads is None else list(heads)
            rows, cols = _grid(len(head_ids))
            width = max(3.0, cell * len(k_labels) + 1.2)
            height = max(3.0, cell * len(q_labels) + 1.2)
            fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
            matrices = []
            for ax, h in zip(axes.flat, head_ids):
                m = weights[layer, h].numpy()
                matrices.append(m)
                ax.imshow(m, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
                ax.set_xticks(range(len(k_labels)), k_labels, rotation=90, fontsize=7)
                ax.set_yticks(range(len(q_labels)), q_labels, fontsize=7)
                ax.set_title(f"head {h + 1}", fontsize=9)
            for ax in list(axes.flat)[len(head_ids) :]:
                ax.axis("off")
            fig.suptitle(f"{title}, layer {layer + 1}")
            fig.tight_layout()
            name = f"{kind}_L{layer + 1}"
            files = [out_dir / f"{name}.{fmt}" for fmt in formats]
            for file in files:
                save_figure(fig, file, dpi=100)
            plt.close(fig)
            drawn[name] = (files, np.stack(matrices))
    return drawn


def plot_token_attention(maps, query: int, out: str | Path, *, kind: str = "encoder", layer: int = -1) -> np.ndarray:
    """For one query token, its attention over the sentence in every head (as the paper's Figures 3-5)."""
    field, q_attr, k_attr, title = KINDS[kind]
    weights = getattr(maps, field)
    layer = layer % weights.shape[0]
    rows = weights[layer, :, query].numpy()  # (H, K)
    keys = getattr(maps, k_attr)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * len(keys) + 1.5), 0.45 * rows.shape[0] + 1.6))
    ax.imshow(rows, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=8)
    ax.set_yticks(range(rows.shape[0]), [f"head {h + 1}" for h in range(rows.shape[0])], fontsize=8)
    ax.set_title(f"{title}, layer {layer + 1}: attention of '{getattr(maps, q_attr)[query]}'", fontsize=9)
    fig.tight_layout()
    save_figure(fig, Path(out), dpi=100)
    plt.close(fig)
    return rows


SCORES = {"valid_bleu": "BLEU", "valid_f1": "F1", "valid_accuracy": "accuracy"}  # the tasks' validation scores
_RECORD_FIELDS = {"train": ("step", "loss", "lr", "elapsed"), "valid": ("step", "elapsed")}  # numeric fields by kind


def read_metrics(run: str | Path) -> tuple[list[dict], list[dict]]:
    """The train and valid records of RUN/metrics.jsonl; a damaged line is a DataError naming file and line."""
    path = Path(run, "metrics.jsonl")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: cannot read ({err})") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}:{number}: not a JSON line ({err.msg})") from None
        kind = record.get("kind") if isinstance(record, dict) else None
        needed = None if kind is None else _RECORD_FIELDS.get(kind)
        if needed is None or any(not isinstance(record.get(k), (int, float)) for k in needed):
            raise DataError(f"{path}:{number}: not a training or validation record of transduce")
        records.append(record)
    return [r for r in records if r["kind"] == "train"], [r for r in records if r["kind"] == "valid"]


def check_picture_target(out: str | Path) -> Path:
    """A picture file name we may write: a known format, and not a file of someone else's."""
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise OutputError(f"{out}: the picture format comes from the name; use .png, .svg or .pdf")
    refuse_link(out)  # its mark would be read, and the picture put, where the link points
    if out.is_dir():
        raise OutputError(f"{out}: is a folder; give a file name ending in .png, .svg or .pdf")
    if out.exists():
        with open(out, "rb") as f:
            head = f.read(1 << 16)
        if MARK.encode() not in head:
            raise OutputError(f"{out}: exists and was not drawn by transduce plot; choose another name")
    return out


def save_figure(fig, out: Path, *, dpi: int) -> None:
    """Atomically, with our mark in the file's metadata (so that we know it is ours to replace later)."""
    fmt = out.suffix.lower()
    atomic_write(out, lambda tmp: fig.savefig(tmp, format=fmt[1:], dpi=dpi, metadata={FORMATS[fmt]: MARK}))


def _series(train: list[dict], valid: list[dict]) -> dict[str, list]:
    """The plotted values of one run: per training log line and per validation."""
    return {
        "step": [r["step"] for r in train],
        "loss": [r["loss"] for r in train],
        "lr": [r["lr"] for r in train],
        "minutes": [r["elapsed"] / 60 for r in train],
        "valid_step": [r["step"] for r in valid],
        "valid_loss": [r.get("valid_loss") for r in valid],
        **{key: [r.get(key) for r in valid] for key in SCORES},
        "valid_minutes": [r["elapsed"] / 60 for r in valid],
    }


def plot_curves(runs: list[str | Path], out: str | Path) -> dict[str, dict[str, list]]:
    """Training and validation loss, the task's validation score (BLEU, parsing F1 or classification accuracy) and
    learning rate, against steps (top) and wall-clock minutes (bottom); one colour per run. Returns the plotted
    series for each run."""
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    plotted = {}
    for i, run in enumerate(runs):
        train, valid = read_metrics(run)
        label, color = Path(run).name, f"C{i}"
        series = _series(train, valid)
        plotted[label] = series
        for row, (x, vx, xlabel) in enumerate(
            [("step", "valid_step", "step"), ("minutes", "valid_minutes", "wall-clock minutes")]
        ):
            ax = axes[row, 0]
            ax.plot(series[x], series["loss"], color=color, label=f"{label} train")
            if valid:
                ax.plot(
                    series[vx],
                    series["valid_loss"],
                    color=color,
                    linestyle="--",
                    marker="o",
                    markersize=3,
                    label=f"{label} valid",
                )
            ax.set_ylabel("loss (label-smoothed, per token)")
            for key, name in SCORES.items():
                if any(b is not None for b in series[key]):
                    axes[row, 1].plot(
                        series[vx], series[key], color=color, marker="o", markersize=3, label=f"{label} {name}"
                    )
            shown = [name for key, name in SCORES.items() if any(r.get(key) is not None for r in valid)]
            axes[row, 1].set_ylabel("validation " + (" / ".join(shown) or "score"))
            axes[row, 2].plot(series[x], series["lr"], color=color, label=label)
            axes[row, 2].set_ylabel("learning rate")
            for ax in axes[row]:
                ax.set_xlabel(xlabel)
                ax.grid(alpha=0.3)
    for ax in axes.flat:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(
                0.5, 0.5, "not logged by these runs", ha="center", va="center", transform=ax.transAxes, color="gray"
            )
    fig.tight_layout()
    save_figure(fig, check_picture_target(out), dpi=80)
    plt.close(fig)
    return plotted
