"""The training split's text, read pair by pair: what subword sampling re-segments for each batch.

`prepare` keeps no copy of the training text (at WMT14 En-Fr's size it would be ~10 GB); it records where each kept
line begins in its input file (train.SIDE.starts.npy). This reads a batch's lines from there with one seek each. A
gzipped input cannot be read that way: it is decompressed once, streamed, into the run's own folder. The inputs
must be the ones `prepare` read: a file whose size changed, or whose contents changed (checked by digest when its
modification time moved), is refused.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import IO

import numpy as np

from ..outputs import atomic_folder, read_manifest
from .formats import row_sides
from .text import DataError, file_digest, without_bom


def training_corpora(summary: dict) -> list[dict]:
    """The training split's corpora (data.corpora, or the one data.train), each with its files, its first kept pair
    in the split, its kept pairs, weight and tag."""
    info = summary["splits"]["train"]
    if "corpora" in info:
        return info["corpora"]
    return [{"files": info["files"], "first": 0, "sentences": info["sentences"], "weight": 1.0, "tag": ""}]


def corpus_bounds(summary: dict) -> np.ndarray:
    """Where each training corpus's pairs begin in the training split, and the end: [0, n1, n1 + n2, ...]."""
    corpora = training_corpora(summary)
    return np.asarray([0] + [c["first"] + c["sentences"] for c in corpora], dtype=np.int64)


def corpus_weights(summary: dict) -> list[float]:
    """Each training corpus's weight (data.corpora)."""
    return [float(c.get("weight", 1.0)) for c in training_corpora(summary)]


class TrainingText:
    """Lines of the kept training pairs by pair index: `pairs(indices)` -> (sources, targets). Pair i's lines are in
    the files of the corpus whose pairs hold i (data.corpora: each corpus's pairs follow the one before's)."""

    def __init__(self, root: Path, summary: dict, scratch: Path | None = None) -> None:
        self.errors = summary.get("options", {}).get("errors", "strict")
        self.paths: list[tuple[Path, Path]] = []  # per corpus, its (source, target) files
        corpora = training_corpora(summary)
        self.bounds = np.asarray([c["first"] for c in corpora[1:]], dtype=np.int64)  # where corpora 1.. begin
        if not (root / "train.src.starts.npy").is_file():
            raise DataError(f"{root}: holds no offsets of the training text (prepare it again)")
        self.formats: list[tuple[str, str, str]] = []  # per corpus: its format and, for one file, its keys
        for k, corpus in enumerate(corpora):
            fmt, langs = corpus.get("format", "lines"), corpus.get("langs", ["", ""])
            if corpus.get("join", 1) > 1:
                raise DataError(
                    f"{corpus['files'][0]}: subword sampling reads the training text again by line; a joined corpus "
                    "(data.corpora's join) has no line per pair: train without train.subword_sampling, or without join"
                )
            if fmt == "parquet":
                raise DataError(
                    f"{corpus['files'][0]}: subword sampling reads the training text again by line; a Parquet "
                    "corpus has no lines: use its TSV or JSON Lines form, or train without train.subword_sampling"
                )
            self.formats.append((fmt, *langs))
            sides: list[Path] = []
            for side, name in zip(("src", "tgt"), corpus["files"]):
                if fmt != "lines" and sides:  # a one-file corpus: both sides read the one (decompressed) file
                    sides.append(sides[0])
                    continue
                path = Path(name)
                check_unchanged(path, summary, root)
                if path.suffix == ".gz":
                    if scratch is None:
                        raise DataError(f"{path}: a gzipped training file needs a folder to decompress it into")
                    folder = scratch / (f"text-{side}" if k == 0 else f"text-{side}-{k}")
                    path = decompressed(path, folder, summary.get("inputs", {}).get(name))
                sides.append(path)
            self.paths.append((sides[0], sides[1]))
        self.starts = [
            np.load(root / f"train.{side}.starts.npy", mmap_mode="r", allow_pickle=False) for side in ("src", "tgt")
        ]
        self._files: list[tuple[IO[bytes], IO[bytes]]] = []

    def pairs(self, indices: np.ndarray) -> tuple[list[str], list[str]]:
        if not self._files:  # opened on first use (in the process that reads)
            self._files = [(open(a, "rb"), open(b, "rb")) for a, b in self.paths]
        corpus = np.searchsorted(self.bounds, indices, side="right")
        sides = []
        for s, starts in enumerate(self.starts):
            lines = []
            for i, k in zip(indices, corpus):
                f = self._files[k][s]
                f.seek(int(starts[i]))
                raw = f.readline()
                if starts[i] == 0:  # the file's first line: without a byte-order mark, as prepare read it
                    raw = without_bom(raw)
                fmt, src, tgt = self.formats[k]
                if fmt != "lines":  # a row of a TSV or JSON Lines corpus: its side
                    raw = row_sides(raw, fmt, src, tgt, self.paths[k][s], -1)[s]
                try:
                    lines.append(raw.decode("utf-8", errors=self.errors).rstrip("\n").rstrip("\r"))
                except UnicodeDecodeError:
                    path = self.paths[k][s]
                    raise DataError(f"{path}: invalid UTF-8 at byte {int(starts[i])}; was it changed?") from None
            sides.append(lines)
        return sides[0], sides[1]


def check_unchanged(path: Path, summary: dict, root: Path) -> None:
    """Refuse an input file that is not the one `prepare` read (size, then digest when the time stamp moved)."""
    recorded = summary.get("input_stats", {}).get(str(path))
    why = None
    if not path.is_file():
        why = "missing"
    elif recorded is not None and path.stat().st_size != recorded[0]:
        why = "changed (its size differs)"
    elif recorded is None or path.stat().st_mtime_ns != recorded[1]:
        digest = summary.get("inputs", {}).get(str(path))
        if digest is not None and file_digest(path) != digest:
            why = "changed (its contents differ)"
    if why:
        raise DataError(
            f"{path}: {why} since {root} was prepared from it; subword sampling reads the training text from "
            "there: restore the file, or prepare the data again"
        )


TEXT_COPY = "decompressed training text"  # the manifest kind of RUN/subwords/text-SIDE


def decompressed(path: Path, folder: Path, digest: str | None) -> Path:
    """A plain copy of a gzipped file in `folder` (ours), made once, streamed, and reused while its manifest names
    the same source file and digest."""
    manifest = read_manifest(folder)
    if manifest is None or manifest.get("source") != str(path) or manifest.get("digest") != digest:
        with atomic_folder(folder, TEXT_COPY, source=str(path), digest=digest) as tmp:
            with gzip.open(path, "rb") as src, open(tmp / "text", "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
    return folder / "text"
