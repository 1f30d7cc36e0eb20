"""What the proxy does with credentials and sizes: the client key it may require, the
headers that pass and those that stop here, and the body limit.

Credentials the client sends for the upstream (``authorization``, ``x-api-key``, ...)
are forwarded as they are and nowhere else: the log, the metrics, spans and errors are
built from the body's windowing record, never from headers.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import AsyncIterator, Iterable, Mapping

#: The header a client sends the proxy's own key in (``--require-key``); not forwarded.
CLIENT_KEY_HEADER = "x-ctxwindow-key"
#: Headers about one hop, not the request (RFC 9110 7.6.1), and those the client sets itself.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
     "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
)  # fmt: skip
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", CLIENT_KEY_HEADER}
#: The server the client talks to (uvicorn) writes its own Date and Server: the
#: upstream's would make two of each, and a response may hold one Date only.
_SERVER_OWN = {"date", "server"}
_NOT_RETURNED = frozenset(name.encode() for name in HOP_BY_HOP | {"content-length"} | _SERVER_OWN)


class BodyTooLarge(Exception):
    """A request body over the limit (answered with a 413)."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"request body is {size} bytes or more, over the proxy's limit of {limit} bytes "
            f"([serve] max_body_bytes)"
        )


def key_matches(expected: str | None, given: str | None) -> bool:
    """Whether the client sent the proxy's key (always, when none is required)."""
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def header_key(headers: Mapping[str, str]) -> str | None:
    """The key a client sent in the proxy's header, read as UTF-8 as the key in the
    environment is (Starlette gives a header's bytes decoded as latin-1); None when
    absent or not UTF-8."""
    value = headers.get(CLIENT_KEY_HEADER)
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return None


def page_key(authorization: str | None) -> str | None:
    """The key a browser sent for a page through HTTP Basic authentication (the
    password; the user name is not read): a browser cannot send the proxy's own header
    when it opens a page, but asks for these when told to (:data:`ASK_BROWSER`)."""
    scheme, _, encoded = (authorization or "").partition(" ")
    if scheme.lower() != "basic" or not encoded:
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    _user, sep, password = decoded.partition(":")
    return password if sep else None


#: The header a 401 for a page carries: the browser asks for a user name and password
#: (the proxy's key as the password) and sends them with the page's requests.
ASK_BROWSER = {"www-authenticate": 'Basic realm="ctxwindow proxy", charset="UTF-8"'}


def request_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The client's headers to send upstream: all of them, credentials included, but
    those of this hop (the fixed ones and those its Connection header names) and the
    proxy's own key."""
    given = list(headers)
    named = _connection_options(value for name, value in given if name.lower() == "connection")
    dropped = _NOT_FORWARDED | named
    return [(name, value) for name, value in given if name.lower() not in dropped]


def response_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's headers to send back, names lowercased as ASGI wants them: all but
    those of its hop (the fixed ones and those its Connection header names) and the
    Date and Server the proxy's own server writes (the body passes as it came, still
    compressed, so content-encoding stays)."""
    lowered = [(name.lower(), value) for name, value in headers]
    connection = (value.decode("latin-1") for name, value in lowered if name == b"connection")
    dropped = _NOT_RETURNED | {name.encode("latin-1") for name in _connection_options(connection)}
    return [(name, value) for name, value in lowered if name not in dropped]


def _connection_options(values: Iterable[str]) -> frozenset[str]:
    """The header names that Connection header ``values`` list, lowercased: fields for
    this hop only, which a proxy removes before forwarding (RFC 9110 7.6.1)."""
    options = (option.strip().lower() for value in values for option in value.split(","))
    return frozenset(option for option in options if option)


async def read_body(chunks: AsyncIterator[bytes], headers: Mapping[str, str], limit: int) -> bytes:
    """The request body, refused as soon as it is known to be over ``limit`` bytes: by
    its content-length first, then by counting what arrives."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(int(declared), limit)
    received: list[bytes] = []
    size = 0
    async for chunk in chunks:
        received.append(chunk)
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(size, limit)
    return b"".join(received)  # one copy (none for a body that came in one piece)
