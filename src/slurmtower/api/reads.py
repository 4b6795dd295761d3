"""The HTTP side of the live reads: responses from rendered snapshot views (``ETag``, gzip,
``X-Data-Age``), strict query parameters, capped bodies, and :class:`FastReads`, the ASGI
middleware that answers a fresh cached view without routing.

The snapshots themselves are :mod:`slurmtower.live.cache`'s.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
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


def _answer(rendered: Rendered, if_none_match: str | None, accept_encoding: str,
            clock: Callable[[], float]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, raw headers and body of the answer from ``rendered`` (the route's and the fast
    path's, written once): 304 on a matching ``If-None-Match``, gzip when accepted."""
    now = clock()
    age = max(0.0, now - rendered.fetched_mono)
    # X-State-Age: how old the job states are (23.11+ reads them alone between full reads;
    # else they are the full records' and the two ages are equal); X-Data-Age: the oldest field.
    headers = [(b"etag", rendered.etag.encode()), (b"x-data-age", b"%.3f" % age),
               (b"x-state-age", b"%.3f" % min(age, rendered.state_age(now))), (b"age", b"%d" % int(age)),
               (b"cache-control", b"no-cache"), (b"vary", b"Accept-Encoding")]
    if rendered.stale:
        headers.append((b"x-data-stale", b"true"))
    if if_none_match and _etag_matches(if_none_match, rendered.etag):
        return 304, headers, b""
    if rendered.gzip is not None and "gzip" in accept_encoding:
        headers.append((b"content-encoding", b"gzip"))
        body = rendered.gzip
    else:
        body = rendered.plain()
    headers += [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]
    return 200, headers, body


class _Answer(Response):
    """A response from :func:`_answer`'s parts (no header parsing nor rendering of its own)."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status_code = status
        self.raw_headers = headers
        self.body = body
        self.background = None


def respond(request: Request, rendered: Rendered, clock: Callable[[], float] = time.monotonic) -> Response:
    """The HTTP response for ``rendered``: 304 on a matching ``If-None-Match``, gzip when accepted."""
    return _Answer(*_answer(rendered, request.headers.get("if-none-match"),
                            request.headers.get("accept-encoding", ""), clock))


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
    ``cluster`` is left out (it picks the services, not the answer).

    Raises :class:`InvalidInput` naming the parameter.
    """
    allowed = set(allowed)
    out: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name == "cluster":
            continue  # which cluster's services answer (api/deps.py's cluster_of checks it)
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


#: ``observe(method, route, status, seconds)``: what the request metrics record of an answer.
Observe = Callable[[str, str, int, float], None]


class FastReads:
    """The cached fast path: answers ``GET`` of a cached view straight from its bytes, in front
    of the whole application (no routing, no middleware stack).

    Only when the view's snapshots are all fresh (younger than the interval, not stale), the
    request has no query string or one whose view was rendered from these snapshots for an
    earlier request, and the route's own permission dependency admits the caller; everything
    else (first request, refresh, errors, bad parameters, refused callers) goes through the
    FastAPI route as usual (:meth:`answer` returns False). Routing, dependency resolution and
    the middleware layers cost more than the rest of a cached answer, so what those layers add
    to every answer is added here too: the headers of :attr:`headers` (the security headers)
    and the request metrics of :attr:`observe`, both set by
    :func:`~slurmtower.api.app.create_app`.

    Args:
        cache: the shared cache.
        views: path -> (view name, resources the view is built from).
        permission: the routes' permission dependency (``require(Perm.READ).dependency``).
        variants: path -> a function of the caller (what ``permission`` returns) giving the
            suffix of the caller's view (``""``: the plain one), for paths whose bytes depend
            on who asks (the queue's private-free view for readers); the route must render
            and query its views under the same suffixed names.
    """

    def __init__(self, *, cache: SnapshotCache, views: dict[str, tuple[str, tuple[str, ...]]],
                 permission: Callable[[Request], Any],
                 variants: Mapping[str, Callable[[Any], str]] | None = None) -> None:
        self.cache = cache
        self.views = views
        self.permission = permission
        self.variants = dict(variants or {})
        #: The headers every answer of the application carries, by request scope.
        self.headers: Callable[[MutableMapping[str, Any]], list[tuple[bytes, bytes]]] = lambda scope: []
        self.observe: Observe | None = None

    def _rendered(self, scope: MutableMapping[str, Any], name: str, resources: tuple[str, ...],
                  suffix: str) -> Rendered | None:
        query = scope.get("query_string")
        if not query:
            return self.cache.fresh_view(name + suffix, resources)
        # A filtered view some client asked for since the last refresh (so its parameters
        # were checked): the same query, answered from its bytes.
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
        params = dict(pairs)
        if len(params) != len(pairs):
            return None
        return self.cache.fresh_query(query_key(scope["path"] + suffix, params))

    async def answer(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> bool:
        """Answer a ``GET`` from its fresh cached view (True), or leave it to the routes (False)."""
        path = scope["path"]
        found = self.views.get(path)
        if found is None:
            return False
        start = time.perf_counter()
        variant = self.variants.get(path)
        rendered = self._rendered(scope, *found, "") if variant is None else None
        if variant is None and rendered is None:
            return False  # nothing fresh: not worth authenticating twice
        try:
            principal = await self.permission(Request(scope, receive))
        except SlurmtowerError:
            return False  # the route answers with the proper problem (the outcome is kept)
        if variant is not None:
            rendered = self._rendered(scope, *found, variant(principal))
        if rendered is None:
            return False
        if_none_match, accept_encoding = None, ""
        for key, value in scope["headers"]:
            if key == b"if-none-match":
                if_none_match = value.decode("latin-1")
            elif key == b"accept-encoding":
                accept_encoding = value.decode("latin-1")
        status, headers, body = _answer(rendered, if_none_match, accept_encoding, self.cache.clock)
        headers += self.headers(scope)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        if self.observe is not None:
            self.observe("GET", path, status, time.perf_counter() - start)
        await send({"type": "http.response.body", "body": body})
        return True
