"""The proxy's client of the upstream: one aiohttp session, its connections kept alive,
that sends a request as the client sent it and hands back the answer unread.

aiohttp, not httpx: a minimal proxy forwarding a small request spent 2.5-3 ms of CPU a
request with httpx (URL merging, cookie extraction, anyio's checkpoints in httpcore) and
0.7-1.3 ms with aiohttp, whose HTTP parser is compiled (it falls back to pure Python
where no wheel exists, with the same behaviour). The session adds nothing of its own to
a request: no default headers, no cookies kept between clients (an upstream's
``set-cookie`` goes to the client it answered, never to the next one), no redirects
followed, no decompression (the body goes back as it came, ``content-encoding`` with it).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

#: The upstream may take its time to answer (a long generation): no read timeout. A new
#: connection's TCP connect must succeed within ``sock_connect`` seconds; waiting for a
#: free pooled connection is not bounded (aiohttp's ``connect`` would count that wait
#: too, and answer a busy but healthy upstream with a 502); a client that gives up
#: while waiting ends its request (see ``Proxy._send``).
TIMEOUT = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=10.0, sock_read=None)
#: Idle connections are let go sooner than servers close theirs (uvicorn and Node: 5 s),
#: so that a request is not sent on a connection the upstream is closing.
KEEPALIVE = 4.0
#: Headers aiohttp would add when the client sent none: the upstream gets the client's.
_NOT_ADDED = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
#: A URL's query in an error's text (aiohttp's timeout names the whole URL): it may
#: hold a credential (``?key=...``).
_QUERY = re.compile(r"\?[^\s\]\)'\"]*")


class UpstreamUnreachable(Exception):
    """No answer could be had from the upstream (answered with a 502): ``host`` is
    the upstream's host and port, ``cause`` what went wrong, with no request query."""

    def __init__(self, host: str, cause: str) -> None:
        self.host = host
        self.cause = cause
        super().__init__(f"{host}: {cause}")


class UpstreamBroken(Exception):
    """The upstream's answer broke off after it began (or was stopped by ``abort``)."""


@dataclass
class Answer:
    """The upstream's answer as it arrives: status, headers (as sent: every value kept,
    ``set-cookie`` twice if sent twice) and the body, read as it comes."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    _response: aiohttp.ClientResponse

    async def read(self) -> bytes:
        """The body's next piece as soon as it arrives (an SSE event is not held back);
        ``b""`` at its end."""
        try:
            return await self._response.content.readany()
        except aiohttp.ClientError as error:
            raise UpstreamBroken(type(error).__name__) from error

    @property
    def arrived(self) -> bool:
        """Whether the whole body has arrived (it is read without waiting)."""
        return self._response.content.is_eof()

    @property
    def ended(self) -> bool:
        """Whether the whole body has been read (the last piece can say it is the last)."""
        return self._response.content.at_eof()

    def abort(self) -> None:
        """Stop the answer now: its connection closes (the upstream stops generating)
        and ``read`` gives ``b""`` or raises :class:`UpstreamBroken`."""
        self._response.close()

    def close(self) -> None:
        """Give the connection back, or close it when the body was not read to its end."""
        self._response.release()


class Upstream:
    """The session to one upstream URL; ``open`` within the server's event loop."""

    def __init__(self, base: str, max_connections: int | None = None) -> None:
        root, _, query = base.partition("?")
        self.base = root.rstrip("/")
        parts = urlsplit(self.base)
        #: The upstream's host and port, for errors and logs.
        self.host = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        #: The upstream URL's own query (Azure's ``api-version=``), sent with every request.
        self.query = query.partition("#")[0]
        #: Connections open to the upstream at once (None: no limit); requests beyond
        #: it wait for one to be free.
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def open(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=self.max_connections or 0, limit_per_host=0, keepalive_timeout=KEEPALIVE
            ),
            timeout=TIMEOUT,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=_NOT_ADDED,
            auto_decompress=False,
            trust_env=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def url(self, target: str) -> str:
        """The upstream URL for ``target``: its path joined to the upstream's before any
        query, the upstream's query first and the client's after it."""
        if not self.query:
            return self.base + target
        path, sep, query = target.partition("?")
        return f"{self.base}{path}?{self.query}" + ("&" + query if sep and query else "")

    async def send(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> Answer:
        """Send ``body`` to ``target`` (a path, percent-encoded as the client sent it,
        with its query) under the upstream's URL; the answer's body is not read yet."""
        assert self._session is not None, "the app's lifespan opens the upstream session"
        try:
            response = await self._session.request(
                method,
                URL(self.url(target), encoded=True),
                headers=list(headers),
                data=body or None,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            raise UpstreamUnreachable(self.host, _cause(error)) from error
        return Answer(response.status, response.raw_headers, response)


def _cause(error: BaseException) -> str:
    """What went wrong, in one line: the error's class and its text, any URL query in
    it left out."""
    text = _QUERY.sub("?...", str(error))
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
