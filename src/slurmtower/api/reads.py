"""The HTTP side of the live reads: responses from rendered snapshot views (``ETag``, gzip,
``X-Data-Age``), strict query parameters, capped bodies, and :class:`FastReads`, the ASGI
middleware that answers a fresh cached view without routing.

The snapshots themselves are :mod:`slurmtower.live.cache`'s.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response

from slurmtower.errors import InvalidInput, SlurmtowerError
from slurmtower.live.cache import Rendered, SnapshotCache, query_key

__all__ = ["FastReads", "read_capped", "respond", "strict_query"]


def _etag_matches(header: str, etag: str) -> bool:
    if header.strip() == "*":
        return True
    bare = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == bare for tag in header.split(","))


def respond(request: Request, rendered: Rendered, clock: Callable[[], float] = time.monotonic) -> Response:
    """The HTTP response for ``rendered``: 304 on a matching ``If-None-Match``, gzip when accepted."""
    age = max(0.0, clock() - rendered.fetched_mono)
    headers = {
        "ETag": rendered.etag,
        "X-Data-Age": f"{age:.3f}",
        "Age": str(int(age)),
        "Cache-Control": "no-cache",
        "Vary": "Accept-Encoding",
    }
    if rendered.stale:
        headers["X-Data-Stale"] = "true"
    inm = request.headers.get("if-none-match")
    if inm and _etag_matches(inm, rendered.etag):
        return Response(status_code=304, headers=headers)
    if rendered.gzip is not None and "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(rendered.gzip, media_type="application/json", headers=headers)
    body = rendered.body if rendered.body is not None else zlib.decompress(rendered.gzip or b"", wbits=31)
    return Response(body, media_type="application/json", headers=headers)


async def read_capped(request: Request, limit: int, refuse: Callable[[], Awaitable[Exception]]) -> bytes:
    """The body, read up to ``limit`` bytes: a bigger one raises ``await refuse()`` as soon
    as its Content-Length says so, or as soon as that many bytes came, never read in full."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise await refuse()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise await refuse()
        chunks.append(chunk)
    return b"".join(chunks)


def strict_query(request: Request, allowed: Iterable[str]) -> dict[str, str]:
    """The query parameters as a dict; an unknown, repeated or operator-bearing one is refused.

    Raises :class:`InvalidInput` naming the parameter.
    """
    allowed = set(allowed)
    out: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name not in allowed:
            bare = name.rstrip("<>!")
            shown = bare if bare in allowed else name
            if bare in allowed:
                raise InvalidInput(f"parameter {bare!r} only allows '='", param=shown[:60])
            known = ", ".join(sorted(allowed)) or "none"
            raise InvalidInput(f"unknown parameter {name[:60]!r} (known: {known})", param=name[:60])
        if name in out:
            raise InvalidInput(f"parameter {name!r} given twice", param=name)
        out[name] = value
    return out


@dataclass(frozen=True)
class _FastRoute:
    path: str


class FastReads:
    """ASGI middleware: answers ``GET`` of a cached view straight from its bytes.

    Only when the view's snapshots are all fresh (younger than the interval, not stale), the
    request has no query string or one whose view was rendered from these snapshots for an
    earlier request, and the route's own permission dependency admits the caller; everything
    else (first request, refresh, errors, bad parameters, refused callers) goes through the
    FastAPI route as usual. Routing and dependency
    resolution cost more than the rest of a cached answer: this is what lets one worker
    serve thousands of requests per second.

    Args:
        app: the wrapped ASGI app.
        cache: the shared cache.
        views: path -> (view name, resources the view is built from).
        permission: the routes' permission dependency (``require(Perm.READ).dependency``).
        variants: path -> a function of the caller (what ``permission`` returns) giving the
            suffix of the caller's view (``""``: the plain one), for paths whose bytes depend
            on who asks (the queue's private-free view for readers); the route must render
            and query its views under the same suffixed names.
    """

    def __init__(self, app: Any, *, cache: SnapshotCache,
                 views: dict[str, tuple[str, tuple[str, ...]]],
                 permission: Callable[[Request], Any],
                 variants: Mapping[str, Callable[[Any], str]] | None = None) -> None:
        self.app = app
        self.cache = cache
        self.views = views
        self.permission = permission
        self.variants = dict(variants or {})

    async def _variant(self, scope: dict[str, Any], receive: Any, send: Any, variant: Callable[[Any], str],
                       found: tuple[str, tuple[str, ...]]) -> bool:
        """Answer from the caller's own view of the path, if it is fresh (True: answered)."""
        added = "route" not in scope
        scope.setdefault("route", _FastRoute(scope["path"]))  # /metrics labels it by its path
        request = Request(scope, receive)
        try:
            principal = await self.permission(request)
        except SlurmtowerError:
            if added:
                del scope["route"]
            return False
        suffix = variant(principal)
        query = scope.get("query_string")
        rendered: Rendered | None = None
        if not query:
            rendered = self.cache.fresh_view(found[0] + suffix, found[1])
        else:
            pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
            params = dict(pairs)
            if len(params) == len(pairs):
                rendered = self.cache.fresh_query(query_key(scope["path"] + suffix, params))
        if rendered is None:
            if added:
                del scope["route"]
            return False
        await respond(request, rendered, self.cache.clock)(scope, receive, send)
        return True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            found = self.views.get(scope["path"])
            rendered: Rendered | None = None
            variant = self.variants.get(scope["path"])
            if found is not None and variant is not None:
                if await self._variant(scope, receive, send, variant, found):
                    return
                found = None
            if found is not None:
                query = scope.get("query_string")
                if not query:
                    rendered = self.cache.fresh_view(*found)
                else:
                    # A filtered view some client asked for since the last refresh (so its
                    # parameters were checked): the same query, answered from its bytes.
                    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
                    params = dict(pairs)
                    if len(params) == len(pairs):
                        rendered = self.cache.fresh_query(query_key(scope["path"], params))
                if rendered is not None:
                    # /metrics labels requests by route template: this one is its path.
                    scope.setdefault("route", _FastRoute(scope["path"]))
                    request = Request(scope, receive)
                    try:
                        await self.permission(request)
                    except SlurmtowerError:
                        pass  # the route answers with the proper problem
                    else:
                        await respond(request, rendered, self.cache.clock)(scope, receive, send)
                        return
        await self.app(scope, receive, send)
