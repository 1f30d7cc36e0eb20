"""Redis: a store shared by every replica of an app (``pip install 'ctxwindow-stores[redis]'``).

Short connect and socket timeouts and no client-side retries: a cache lookup must cost
milliseconds even when the server is gone. On an error the store warns once per outage,
behaves as empty for ``retry_after`` seconds (the memory layer in front keeps serving),
then tries the server again; the connection pool reconnects by itself. A key holding
another type (a hash, a list: not a cache's value) is a foreign value of that key alone:
read as a miss and overwritten, the server still in use.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult, parse_qs, urlsplit

from ctxwindow.errors import InvalidOption
from ctxwindow.kit import redact

#: Keys per round trip: a long history's first visit must not become one reply too big
#: to arrive within the socket timeout.
_CHUNK = 500
#: The longest ``ttl`` Redis takes (``SET ... EX``: milliseconds in a signed 64-bit
#: integer, plus the time now), rounded down: about 31 million years.
MAX_TTL = 10**15


class RedisStore:
    """Entries in the Redis server at ``url``; ``ttl``: seconds each entry lives (None:
    until Redis evicts it by its own ``maxmemory`` policy)."""

    def __init__(
        self,
        url: str,
        *,
        ttl: float | None = None,
        timeout: float = 0.5,
        retry_after: float = 5.0,
    ) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise InvalidOption(
                "a Redis cache needs the redis client: pip install 'ctxwindow-stores[redis]'"
            ) from None
        if ttl is not None and not 0 < ttl <= MAX_TTL:
            raise InvalidOption(
                f"Redis cache: ttl must be a number of seconds > 0 and <= {MAX_TTL:.0e} "
                f"(Redis's longest expiry), got {ttl!r}"
            )
        self.where = redact(url)
        _check_url(url, self.where)
        self.ttl = None if ttl is None else max(1, int(ttl))
        self.retry_after = retry_after
        self.outages = 0  # times the server was found gone, for tests and the bench
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._refused: type[BaseException] = redis.ResponseError  # one command, one key
        #: Errors the server answered with (a database number out of range, a wrong
        #: password): it is running, the URL is wrong.
        self._answered: tuple[type[BaseException], ...] = (
            redis.ResponseError,
            redis.AuthenticationError,
        )
        #: Refusals of writes alone, the server still answering reads: kind, advice.
        self._write_refusals: tuple[tuple[type[BaseException], str, str], ...] = (
            (
                redis.exceptions.OutOfMemoryError,
                "full",
                "it is full under maxmemory with a policy that evicts nothing: set "
                "maxmemory-policy to one that evicts, such as allkeys-lru, or raise maxmemory",
            ),
            (
                redis.exceptions.ReadOnlyError,
                "read-only",
                "it is a read-only replica: point the URL at the primary",
            ),
        )
        try:
            self._client: Any = redis.Redis.from_url(
                url,
                socket_connect_timeout=timeout,
                socket_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
                retry_on_timeout=False,
            )
        except ValueError as error:
            # redis-py's text may quote part of the URL: shown only when it holds no
            # user info (where a password lives)
            said = "" if "@" in url else f": {error}"
            raise InvalidOption(
                f"Redis cache URL {self.where!r} is not valid{said}; write it as "
                "redis://[[user]:password@]host[:port][/db], percent-encoding any "
                "'/', '#', '?', '@' or ':' in the user or password"
            ) from None
        self._writes_down_until = 0.0
        self._write_warned: set[str] = set()
        self._down_until = 0.0
        self._down = False
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        """False while the store is skipping a server it found gone."""
        return not self._down

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        if not keys or self._skipping():
            return {}
        found: dict[str, bytes] = {}
        try:
            for start in range(0, len(keys), _CHUNK):
                chunk = list(keys[start : start + _CHUNK])
                values = self._client.mget(chunk)
                for key, value in zip(chunk, values, strict=False):
                    if isinstance(value, (bytes, bytearray)):
                        found[key] = bytes(value)
        except self._errors as error:
            self._gone(error)
            return {}
        self._back()
        return found

    def put_many(self, items: Mapping[str, bytes]) -> None:
        if not items or self._skipping_writes():
            return
        pairs = list(items.items())
        try:
            for start in range(0, len(pairs), _CHUNK):
                pipe = self._client.pipeline(transaction=False)
                for key, value in pairs[start : start + _CHUNK]:
                    pipe.set(key, bytes(value), ex=self.ttl)
                pipe.execute()
        except self._errors as error:
            if not self._write_refused(error):
                self._gone(error)
            return
        self._back()

    def put_new(self, items: Mapping[str, bytes]) -> dict[str, bytes]:
        """Hold ``items`` under the keys the server holds nothing for yet (``SET NX``);
        what each key holds after (another replica's value where it wrote first). While
        the server is away, ``items`` as given."""
        held = dict(items)
        if not items or self._skipping_writes():
            return held
        pairs = list(items.items())
        try:
            for start in range(0, len(pairs), _CHUNK):
                held.update(self._put_new_chunk(pairs[start : start + _CHUNK]))
        except self._errors as error:
            if not self._write_refused(error):
                self._gone(error)
            return dict(items)
        self._back()
        return held

    def _put_new_chunk(self, chunk: Sequence[tuple[str, bytes]]) -> dict[str, bytes]:
        """``SET NX`` then ``GET`` for each pair, in one round trip; what each key holds.
        A GET refused for one key (WRONGTYPE: another type under it) leaves a foreign
        value, overwritten as ``put_many`` would; a refused SET is the server's error."""
        pipe = self._client.pipeline(transaction=False)
        for key, value in chunk:
            pipe.set(key, bytes(value), ex=self.ttl, nx=True)
            pipe.get(key)
        replies = pipe.execute(raise_on_error=False)
        held: dict[str, bytes] = {}
        foreign: dict[str, bytes] = {}
        for (key, value), written, read in zip(chunk, replies[0::2], replies[1::2], strict=True):
            if isinstance(written, BaseException):
                raise written
            if isinstance(read, self._refused):
                foreign[key] = held[key] = bytes(value)
            elif isinstance(read, (bytes, bytearray)):
                held[key] = bytes(read)
        if foreign:
            self._overwrite(foreign)
        return held

    def _overwrite(self, items: Mapping[str, bytes]) -> None:
        """Plain ``SET``s, which replace a value of any type (two replicas overwriting
        one foreign value at once may each keep their own: a rare, harmless case)."""
        pipe = self._client.pipeline(transaction=False)
        for key, value in items.items():
            pipe.set(key, bytes(value), ex=self.ttl)
        pipe.execute()

    def close(self) -> None:
        with contextlib.suppress(*self._errors):
            self._client.close()

    def _skipping(self) -> bool:
        return self._down and time.monotonic() < self._down_until

    def _skipping_writes(self) -> bool:
        return self._skipping() or time.monotonic() < self._writes_down_until

    def _write_refused(self, error: BaseException) -> bool:
        """Whether ``error`` refuses writes alone (a full server, a replica): then writes
        are skipped for ``retry_after`` seconds while reads go on, and the first refusal
        of each kind is reported with what to change on the server."""
        refusal = next((r for r in self._write_refusals if isinstance(error, r[0])), None)
        if refusal is None:
            return False
        _, name, advice = refusal
        with self._lock:
            self._writes_down_until = time.monotonic() + self.retry_after
            if name in self._write_warned:
                return True
            self._write_warned.add(name)
        warnings.warn(
            f"ctxwindow: Redis cache {self.where!r} refused a write ({type(error).__name__}: "
            f"{error}); still reading it, not writing for {self.retry_after:g} s at a time "
            f"({advice})",
            RuntimeWarning,
            stacklevel=5,
        )
        return True

    def _gone(self, error: BaseException) -> None:
        with self._lock:
            self._down_until = time.monotonic() + self.retry_after
            if self._down:
                return
            self._down = True
            self.outages += 1
        if isinstance(error, self._answered):
            what, check = "answered with an error", _advice(error)
        else:
            what, check = "unreachable", "check that Redis is running at that address"
        warnings.warn(
            f"ctxwindow: Redis cache {self.where!r} {what} ({type(error).__name__}: "
            f"{error}); using the local memory cache and trying the server again every "
            f"{self.retry_after:g} s ({check})",
            RuntimeWarning,
            stacklevel=5,
        )

    def _back(self) -> None:
        if self._down:
            with self._lock:
                self._down = False


def _advice(error: BaseException) -> str:
    """What to check for an error the server answered with, by what it says."""
    text = f"{type(error).__name__} {error}".upper()
    if any(word in text for word in ("AUTH", "WRONGPASS", "NOPERM")):
        return "check the URL's user and password, and that user's permissions"
    if "DB INDEX" in text:
        return "check the URL's database number: the server has fewer databases"
    return "check the URL: its database number, user and password"


def _check_url(url: str, where: str) -> None:
    """Raise InvalidOption (naming ``where``, the URL without its password) for what
    redis-py would misread without a word: a user or password holding an unencoded
    ``/``, ``#`` or ``?`` (read as the end of the host), a database part that is not a
    number (read as database 0: another application's data)."""
    raw, shown = urlsplit(url), urlsplit(where)
    hidden = _user_alone_shown(url, raw)
    if hidden is not None:
        where = hidden
    if hidden is not None or raw.netloc.rpartition("@")[2] != shown.netloc.rpartition("@")[2]:
        raise InvalidOption(
            f"Redis cache URL {where!r} is not valid: its user or password holds an "
            "unencoded '/', '#' or '?'; percent-encode them (%2F, %23, %3F)"
        )
    if raw.scheme in ("redis", "rediss") and not re.fullmatch(r"/?(\d+/?)?", raw.path):
        raise InvalidOption(
            f"Redis cache URL {where!r} is not valid: its database part "
            f"{raw.path[1:]!r} is not a number; end the URL with one, such as /0"
        )
    if any(not value.isdigit() for value in parse_qs(raw.query).get("db", [])):
        raise InvalidOption(
            f"Redis cache URL {where!r} is not valid: its db parameter is not a number"
        )


def _user_alone_shown(url: str, raw: SplitResult) -> str | None:
    """``url`` shown with its user info masked when that is a user alone (a token, no
    password) holding an unencoded ``/``, ``#`` or ``?``, which ``redact`` cannot tell
    from a host and a path; None for any other URL. In a Redis URL an ``@`` after the
    host part can be nothing else where it is in the path or the fragment, or in the
    query before any ``key=value`` (``client_name=worker@eu`` is a value's)."""
    if raw.scheme.lower() not in ("redis", "rediss") or "@" in raw.netloc:
        return None
    after = url[url.index("//") + 2 + len(raw.netloc) :]  # from its '/', '?' or '#'
    at = after.find("@")
    if at < 0:
        return None
    before = after[:at]
    if after.startswith("?") and ("=" in before or "&" in before):
        return None
    if after.startswith("/") and "?" in before and "=" in before.partition("?")[2]:
        return None
    return redact(f"{raw.scheme}://{after[at + 1 :]}").replace("://", "://***@", 1)
