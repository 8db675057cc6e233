"""The document formats `translate` reads, and the format of a file told from its name."""

from __future__ import annotations

from pathlib import PurePath

FORMATS = ("text", "html", "xml", "srt", "vtt")

_BY_SUFFIX = {
    ".srt": "srt",
    ".vtt": "vtt",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".xml": "xml",
}


def detect_format(path: str | None) -> str:
    """The format of the file at `path` from its suffix (any case): "srt", "vtt", "html" (.html, .htm, .xhtml),
    "xml" (.xml), otherwise "text"; None (standard input) is "text"."""
    if path is None:
        return "text"
    return _BY_SUFFIX.get(PurePath(path).suffix.lower(), "text")
