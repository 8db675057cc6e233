"""Who may use the server: API keys (`serve --api-keys FILE`) and the web origins whose pages may call it
(`serve --cors ORIGIN`). Both are off by default: the server listens on 127.0.0.1, and a page of another origin
cannot read its answers.

Keys guard every route that runs the model: `/v1/*` (header `Authorization: Bearer KEY`; middleware.KeyCheck) and
LibreTranslate's `/translate` and `/detect` (its `api_key` field, or the same header; libretranslate.py). `/health`,
`/languages`, `/frontend/settings`, the page and `/docs` stay open: LibreTranslate leaves its `/languages` and
`/frontend/settings` open too, since a client reads them to learn whether it needs a key at all.

A key is compared in constant time: the key a request brings is hashed (SHA-256) and its digest compared with every
key's digest by `hmac.compare_digest`, with no early exit, so the answer's timing tells neither how much of a guess
was right nor which key matched. The file is read once, at start, and a bad one is refused in one line (ConfigError)
before the model is loaded.

CORS is Starlette's CORSMiddleware, outermost, for the given origins only: browser extensions and web apps call a
translation server from their own origin (LibreTranslate itself answers `Access-Control-Allow-Origin: *` always).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIN_KEY_CHARS = 16  # `uuidgen` gives 36, secrets.token_urlsafe(24) 32: a short key is a guessable one
MAX_KEY_CHARS = 256
MAX_KEYS = 10_000  # every request compares its key with all of them (about 0.1 ms a thousand)
MAX_FILE_BYTES = 1_000_000
_KEY = re.compile(r"[!-~]+")  # visible ASCII, no spaces: a key travels in a header and in form bodies
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#\s]+")  # scheme://host[:port], as a browser sends `Origin`
MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(24))' makes one"


@dataclass(frozen=True)
class ApiKeys:
    """The server's keys, kept as SHA-256 digests (the keys themselves are not kept)."""

    digests: tuple[bytes, ...]

    @classmethod
    def of(cls, keys: Sequence[str]) -> ApiKeys:
        return cls(tuple(_digest(key) for key in keys))

    def __len__(self) -> int:
        return len(self.digests)

    def accepts(self, key: str | None) -> bool:
        """Whether `key` is one of the server's (None or "": no key given)."""
        if not key:
            return False
        given, found = _digest(key), False
        for digest in self.digests:  # all of them, always: no early exit
            found |= hmac.compare_digest(digest, given)
        return found


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def read_api_keys(path: str | Path) -> ApiKeys:
    """The keys of a file (one a line; blank lines and lines starting with # skipped), or a one-line ConfigError
    naming the file and the line."""
    from ..config import ConfigError

    where = f"--api-keys {path}"
    try:
        file = Path(path)
        if file.is_file() and file.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{where}: over {MAX_FILE_BYTES:,} bytes; it should hold one key a line")
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text; it should hold one key a line") from None
    except OSError as err:
        raise ConfigError(f"{where}: cannot read it ({err.strerror or err})") from None
    keys = []
    for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1):  # a byte-order mark is no key
        key = line.strip()
        if not key or key.startswith("#"):
            continue
        _check_key(key, f"{where}, line {number}")
        keys.append(key)
    if not keys:
        raise ConfigError(f"{where}: holds no key (one key a line; {MAKE_ONE})")
    if len(keys) > MAX_KEYS:
        raise ConfigError(f"{where}: {len(keys):,} keys, at most {MAX_KEYS:,}")
    return ApiKeys.of(keys)


def _check_key(key: str, where: str) -> None:
    from ..config import ConfigError

    if not _KEY.fullmatch(key):
        raise ConfigError(f"{where}: a key is visible ASCII characters without spaces")
    if not MIN_KEY_CHARS <= len(key) <= MAX_KEY_CHARS:
        raise ConfigError(
            f"{where}: a key of {len(key)} characters; keys have {MIN_KEY_CHARS} to {MAX_KEY_CHARS} ({MAKE_ONE})"
        )


def bearer_key(header: bytes | str | None) -> str | None:
    """The key of an `Authorization: Bearer KEY` header (None when there is none, or it is another scheme)."""
    if header is None:
        return None
    text = header.decode("latin-1") if isinstance(header, bytes) else header
    scheme, _, key = text.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return key.strip() or None


def check_origins(origins: Sequence[str]) -> tuple[str, ...]:
    """`serve --cors` values: `*` (any origin) or origins as a browser sends them (`https://example.org`,
    `http://localhost:8080`, `moz-extension://UUID`); anything else is a one-line ConfigError (a trailing slash or
    a path would never match, and the server would silently stay closed to that page)."""
    from ..config import ConfigError

    for origin in origins:
        if origin != "*" and not _ORIGIN.fullmatch(origin):
            hint = " (no trailing slash or path)" if "://" in origin else ""
            raise ConfigError(f"--cors {origin!r}: not an origin like https://example.org or *{hint}")
    return tuple(dict.fromkeys(origins))


def add_cors(app: Any, origins: Sequence[str]) -> None:
    """CORS headers for `origins` (Starlette's CORSMiddleware): preflights answered, the key header allowed. Add it
    last: it must be the outermost layer, so that preflights never reach the key check."""
    from starlette.middleware.cors import CORSMiddleware

    app.add_middleware(
        CORSMiddleware,
        allow_origins=["*"] if "*" in origins else list(origins),
        allow_methods=["GET", "POST"],
        allow_headers=["Content-Type", "Authorization"],
        max_age=600,
    )
