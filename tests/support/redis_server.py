"""A real ``redis-server`` for tests: a free port, a temporary folder, no persistence.

This repository's test infrastructure, not shipped in any wheel: ``tests/support`` is on
pytest's ``pythonpath`` (the workspace ``pyproject.toml``), so a test module imports the
``redis_server`` fixture with ``from redis_server import redis_server``. Or use
:class:`RedisServer` as a context manager. Without ``redis-server`` on the PATH the
tests that need it are skipped, saying how to install it; with ``CI=true`` they fail
instead, so a CI machine cannot silently skip them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import pytest

INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install -y redis-server)"


def find_redis_server() -> str | None:
    """The ``redis-server`` executable, from ``REDIS_SERVER`` or the PATH."""
    return os.environ.get("REDIS_SERVER") or shutil.which("redis-server")


def _missing(reason: str) -> NoReturn:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def require_redis_server() -> str:
    """The executable, or skip the test (fail it when ``CI`` is true). The ``redis``
    client is required too: the stores talk to the server through it."""
    found = find_redis_server()
    if found is None:
        _missing(f"redis-server is not installed; {INSTALL_HINT}")
    try:
        import redis  # noqa: F401
    except ImportError:
        _missing("the redis client is not installed: pip install 'ctxwindow-stores[redis]'")
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def ping(port: int, timeout: float = 0.5) -> bool:
    """True if a Redis server answers PING on ``port`` (no client library needed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1: ``start``, ``stop`` (an outage),
    ``start`` again on the same port (the server is back, empty)."""

    def __init__(self, executable: str | None = None, startup_timeout: float = 20.0) -> None:
        self.executable = executable or require_redis_server()
        self.startup_timeout = startup_timeout
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="ctxwindow-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        if self.process is not None:
            return self
        for _attempt in range(3):
            self.process = subprocess.Popen(
                [
                    self.executable,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(self.folder),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--loglevel",
                    "warning",
                    "--logfile",
                    str(self.folder / "redis.log"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + self.startup_timeout
            while time.monotonic() < deadline and self.process.poll() is None:
                if ping(self.port):
                    return self
                time.sleep(0.02)
            self._kill()
            self.port = _free_port()  # the port was taken, most likely: another one
        log = self.folder / "redis.log"
        detail = log.read_text(errors="replace")[-500:] if log.exists() else ""
        raise RuntimeError(f"redis-server did not answer PING: {detail}")

    def stop(self) -> None:
        """Stop the server (its data goes with it: nothing is persisted)."""
        self._kill()

    def close(self) -> None:
        self._kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _kill(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A running ``redis-server`` of its own for one test, stopped afterwards."""
    with RedisServer() as server:
        yield server
