"""Reading text: UTF-8 files (plain or gzipped) line by line, with errors that name the file and the line, and
input paths looked up under TRANSDUCE_DATA."""

from __future__ import annotations

import gzip
import hashlib
import os
import sys
import zlib
from pathlib import Path


class DataError(ValueError):
    """Bad input data: the message names the file, the line where there is one, and what is wrong."""


# Reading ----------------------------------------------------------------------------------------------------------
BOM = b"\xef\xbb\xbf"  # U+FEFF in UTF-8: the byte-order mark editors (Windows Notepad) put at a file's start


def without_bom(start: bytes) -> bytes:
    """The bytes at the very start of a file without a UTF-8 byte-order mark: it is no part of the first line's text
    (kept, it would be inside the first word: a different token, a lower BLEU). U+FEFF anywhere else is kept."""
    return start[len(BOM) :] if start.startswith(BOM) else start


def data_root() -> Path | None:
    root = os.environ.get("TRANSDUCE_DATA")
    return Path(root) if root else None


def resolve_path(path: str | Path) -> Path:
    """A path as given if it exists; otherwise, if relative, the same path under $TRANSDUCE_DATA."""
    path = Path(path)
    root = data_root()
    if path.exists() or path.is_absolute() or root is None:
        return path
    candidate = root / path
    return candidate if candidate.exists() else path


def find_side(prefix: str | Path, lang: str) -> Path:
    """PREFIX.lang or PREFIX.lang.gz (resolved through $TRANSDUCE_DATA for relative prefixes)."""
    for name in (f"{prefix}.{lang}", f"{prefix}.{lang}.gz"):
        path = resolve_path(name)
        if path.is_file():
            return path
    raise DataError(
        f"{prefix}.{lang}: no such file (nor {prefix}.{lang}.gz)"
        + ("" if data_root() is None else f"; also looked under TRANSDUCE_DATA={data_root()}")
    )


def read_lines(path: Path, *, errors: str = "strict", allow_empty: bool = False) -> list[str]:
    """All lines of a UTF-8 text file, plain or gzipped, without their line ends. Refuses an empty file unless
    `allow_empty`. The path "-" reads standard input."""
    try:
        if str(path) == "-":
            raw = sys.stdin.buffer.read()
        elif path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, not a text file") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{path}: unreadable gzip data ({err or 'truncated'})") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror})") from None
    name = "<stdin>" if str(path) == "-" else str(path)
    if not without_bom(raw).strip() and not allow_empty:  # decode_lines drops the mark
        raise DataError(f"{name}: the file is empty")
    return decode_lines(raw, name, errors=errors)


def decode_lines(raw: bytes, name: str, *, errors: str = "strict", first_line: int = 0) -> list[str]:
    """Bytes -> lines without their line ends (a trailing "\\r" removed). Invalid UTF-8 under errors="strict" is
    refused naming the file and the line (`first_line`: how many lines of the file come before `raw`; at 0, `raw`
    is the file's start, and a byte-order mark there is dropped: every reader of text files comes here)."""
    if first_line == 0:
        raw = without_bom(raw)
    try:
        text = raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as err:
        line = first_line + raw.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{name}:{line}: invalid UTF-8 (byte 0x{raw[err.start]:02x}); fix the file or pass --errors replace"
        ) from None
    lines = text.split("\n")  # not splitlines(): U+2028 and friends inside a sentence must not split it
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def read_parallel(src_path: Path, tgt_path: Path, *, errors: str = "strict") -> tuple[list[str], list[str]]:
    """Both sides of a parallel corpus; refuses files whose line counts differ (never truncates silently)."""
    src_lines, tgt_lines = read_lines(src_path, errors=errors), read_lines(tgt_path, errors=errors)
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"{src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}; "
            "parallel files must have one sentence per line on both sides"
        )
    return src_lines, tgt_lines


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (the cache key and the resume check use it)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
