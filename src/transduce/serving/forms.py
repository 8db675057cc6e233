"""The parameters of a LibreTranslate request (libretranslate.py), read from whatever body LibreTranslate takes: a
JSON object, a form (`application/x-www-form-urlencoded`, what libretranslatepy and most plugins send, or
`multipart/form-data`, what a browser's FormData sends), and the query string.

Why by hand: FastAPI reads forms only with python-multipart, which the server does not otherwise need; the standard
library parses both kinds of form (urllib.parse, and the email package's MIME parser, which is what a multipart
form is). The body is already bounded (middleware.BodyLimit) when it gets here, and a form's values are only ever
text: an uploaded file is refused, and nothing here touches the file system.

As LibreTranslate reads them: a JSON body is taken alone (its values keep their JSON types: `q` may be a list);
otherwise form fields come first and the query string fills in names the body lacks, the first value of a repeated
name counts, and every value is a string.
"""

from __future__ import annotations

from email import policy
from email.parser import BytesParser
from typing import Any
from urllib.parse import parse_qsl


class FormError(ValueError):
    """A body that cannot be read: its message is LibreTranslate's 400 text."""


def is_json(content_type: str) -> bool:
    """Whether a Content-Type names JSON (`application/json`, `application/x+json`), as Flask's `is_json`."""
    kind = content_type.split(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def read_params(body: bytes, content_type: str, query: str) -> tuple[dict[str, Any], bool]:
    """(the request's parameters, whether they came from JSON)."""
    if is_json(content_type):
        return _json_object(body), True
    kind = content_type.split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        fields = _multipart(body, content_type)
    elif body and kind in ("", "application/x-www-form-urlencoded"):
        fields = _urlencoded(body)
    elif body:
        raise FormError(f"Invalid request: a body of type {kind} (send JSON or a form)")
    else:
        fields = {}
    for name, value in _pairs(query):
        fields.setdefault(name, value)
    return fields, False


def _json_object(body: bytes) -> dict[str, Any]:
    import json

    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deep
        raise FormError("Invalid JSON format") from None
    if not isinstance(value, dict):
        raise FormError("Invalid JSON format")
    return value


def _pairs(text: str) -> list[tuple[str, str]]:
    try:
        return parse_qsl(text, keep_blank_values=True, strict_parsing=False, errors="strict")
    except UnicodeDecodeError:
        raise FormError("Invalid request: the form is not UTF-8") from None


def _urlencoded(body: bytes) -> dict[str, str]:
    try:
        text = body.decode("ascii")  # percent-escapes carry the UTF-8 bytes
    except UnicodeDecodeError:
        try:
            text = body.decode("utf-8")  # raw UTF-8 in a form: lenient, as browsers' servers are
        except UnicodeDecodeError:
            raise FormError("Invalid request: the form is not UTF-8") from None
    fields: dict[str, str] = {}
    for name, value in _pairs(text):
        fields.setdefault(name, value)
    return fields


def _multipart(body: bytes, content_type: str) -> dict[str, str]:
    """A multipart/form-data body's text fields (an uploaded file is refused: LibreTranslate's /translate takes
    none)."""
    header = b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n"
    message = BytesParser(policy=policy.HTTP).parsebytes(header + body)
    if not message.is_multipart() or message.defects:
        raise FormError("Invalid request: a malformed multipart form")
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise FormError("Invalid request: a multipart form field without a name")
        if part.get_filename() is not None:
            raise FormError(f"Invalid request: {name} is a file; send text")
        payload = part.get_payload(decode=True)
        try:
            value = payload.decode(part.get_content_charset() or "utf-8") if isinstance(payload, bytes) else ""
        except (UnicodeDecodeError, LookupError):
            raise FormError(f"Invalid request: the {name} field is not UTF-8") from None
        fields.setdefault(name, value)
    return fields
