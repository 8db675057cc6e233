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
from .stream import CHUNK_LINES, line_blocks, line_starts
from .text import DataError, file_digest


class TrainingText:
    """Lines of the kept training pairs by pair index: `pairs(indices)` -> (sources, targets)."""

    def __init__(self, root: Path, summary: dict, scratch: Path | None = None) -> None:
        self.errors = summary.get("options", {}).get("errors", "strict")
        self.paths: list[Path] = []
        self.starts: list[np.ndarray] = []
        if (root / "train.src.starts.npy").is_file():
            for side, name in zip(("src", "tgt"), summary["splits"]["train"]["files"]):
                path = Path(name)
                check_unchanged(path, summary, root)
                if path.suffix == ".gz":
                    if scratch is None:
                        raise DataError(f"{path}: a gzipped training file needs a folder to decompress it into")
                    path = decompressed(path, scratch / f"text-{side}", summary.get("inputs", {}).get(name))
                self.paths.append(path)
                self.starts.append(np.load(root / f"train.{side}.starts.npy", mmap_mode="r", allow_pickle=False))
        elif (root / "train.src.txt").is_file():  # a cache of version 1 kept a copy of the kept lines
            for side in ("src", "tgt"):
                path = root / f"train.{side}.txt"
                self.paths.append(path)
                self.starts.append(_all_line_starts(path))
        else:
            raise DataError(f"{root}: holds neither the training text's offsets nor a copy of it")
        self._files: list[IO[bytes]] = []

    def pairs(self, indices: np.ndarray) -> tuple[list[str], list[str]]:
        if not self._files:  # opened on first use (in the process that reads)
            self._files = [open(path, "rb") for path in self.paths]
        sides = []
        for f, starts, path in zip(self._files, self.starts, self.paths):
            lines = []
            for i in indices:
                f.seek(int(starts[i]))
                raw = f.readline()
                try:
                    lines.append(raw.decode("utf-8", errors=self.errors).rstrip("\n").rstrip("\r"))
                except UnicodeDecodeError:
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


def _all_line_starts(path: Path) -> np.ndarray:
    parts, at = [], 0
    for _, block in line_blocks(path, CHUNK_LINES):
        parts.append(line_starts(block) + at)
        at += len(block)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
