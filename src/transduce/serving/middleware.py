"""The ASGI layers around the routes (app.py adds them): the body-size bound, HEAD and OPTIONS, and the API-key check
of the `/v1/*` routes.

Why here and not in the routes: each acts before a route parses anything. A body over the limit is refused before
it is read whole; a request to `/v1/*` without a valid key (serve --api-keys, access.py) is refused from its headers
alone, before its body is read. The LibreTranslate routes (libretranslate.py) take their key in the body as
LibreTranslate does, so they check it themselves; the body bound answers them in LibreTranslate's error shape.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from fastapi.responses import JSONResponse, Response

from .access import ApiKeys, bearer_key
from .service import ApiError


def _respond(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), error.status)


class BodyLimit:
    """ASGI middleware: refuse a request body over `max_bytes` with 413 before any route parses it.

    A declared Content-Length is checked up front; a chunked body is counted as it arrives. The body is then
    handed on whole (it is at most max_bytes). `plain_paths` are answered `{"error": message}` (LibreTranslate's
    shape) instead of the `/v1` shape.
    """

    def __init__(self, app: Callable, *, max_bytes: int, plain_paths: Collection[str] = ()) -> None:
        self.app, self.max_bytes, self.plain_paths = app, max_bytes, frozenset(plain_paths)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers", ())).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            return await self._refuse(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                return await self._refuse(scope, receive, send)
        body, delivered = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    async def _refuse(self, scope: dict, receive: Callable, send: Callable) -> None:
        error = ApiError(
            413,
            "limit_exceeded",
            f"the request body is over {self.max_bytes} bytes",
            limit="max_body_bytes",
            max=self.max_bytes,
        )
        if scope["path"] in self.plain_paths:
            return await JSONResponse({"error": f"Invalid request: {error.message}"}, 413)(scope, receive, send)
        await _respond(error)(scope, receive, send)


class OtherMethods:
    """ASGI middleware: HEAD of a GET route is answered as GET without its body (same status and headers); OPTIONS
    of a route is 204 with an `Allow` header listing its methods (no CORS headers: a page of another origin still
    may not call the API, unless `serve --cors` put CORSMiddleware around this, which answers preflights first).
    A path that is no route stays 404; HEAD of a POST-only route stays 405 with `Allow`."""

    def __init__(self, app: Callable, *, methods: Mapping[str, set[str]]) -> None:
        self.app, self.methods = app, methods  # path -> its methods (filled by create_app once the routes are in)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] not in ("HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        methods = self.methods.get(scope["path"], set())
        if scope["method"] == "OPTIONS" and methods:
            allow = ", ".join(sorted(methods | {"OPTIONS"} | ({"HEAD"} if "GET" in methods else set())))
            return await Response(status_code=204, headers={"Allow": allow})(scope, receive, send)
        if scope["method"] == "HEAD" and "GET" in methods:

            async def headers_only(message: dict) -> None:
                if message["type"] == "http.response.body":
                    message = {**message, "body": b""}
                await send(message)

            return await self.app({**scope, "method": "GET"}, receive, headers_only)
        return await self.app(scope, receive, send)


class KeyCheck:
    """ASGI middleware (serve --api-keys): a request to `/v1/*` needs `Authorization: Bearer KEY` with one of the
    server's keys, else 403 in the `/v1` error shape. OPTIONS is let through (it runs nothing and says only which
    methods a route has)."""

    PREFIX = "/v1/"

    def __init__(self, app: Callable, *, keys: ApiKeys) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        guarded = scope["type"] == "http" and scope["path"].startswith(self.PREFIX) and scope["method"] != "OPTIONS"
        if not guarded:
            return await self.app(scope, receive, send)
        key = bearer_key(dict(scope.get("headers", ())).get(b"authorization"))
        if self.keys.accepts(key):
            return await self.app(scope, receive, send)
        message = "Invalid API key" if key else "this server needs an API key: send 'Authorization: Bearer KEY'"
        await _respond(ApiError(403, "invalid_api_key", message))(scope, receive, send)
