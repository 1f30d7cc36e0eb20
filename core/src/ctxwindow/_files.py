"""Reading a messages file as the CLI (and the evaluation kit) reads it: a JSON array,
or JSONL with one message per line; anything else is one clear InvalidMessage."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from ctxwindow.errors import InvalidMessage

#: What to do when a messages file cannot be read, said once for every problem.
FORMAT_HINT = "expected a JSON array of messages, or JSONL with one message per line"


def read_messages_file(path: str | os.PathLike[str]) -> list[Any]:
    """A JSON array, or JSONL with one message per line; '-' reads stdin (a
    :class:`~pathlib.Path` named ``-`` is that file).

    Anything else is one InvalidMessage naming the file and the problem.
    """
    source = "stdin" if path == "-" else os.fspath(path)
    try:
        raw = sys.stdin.buffer.read() if path == "-" else _read_bytes(path)
    except FileNotFoundError:
        raise InvalidMessage(None, f"{source} does not exist") from None
    except IsADirectoryError:
        raise InvalidMessage(None, f"{source} is a directory, not a messages file") from None
    except OSError as error:
        raise InvalidMessage(None, f"{source} cannot be read ({error.strerror or error})") from None
    return parse_messages(raw, source)


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def parse_messages(raw: bytes, source: str = "input") -> list[Any]:
    """The bytes of a messages file as a list of (unchecked) entries, as the CLI reads
    them; ``source`` names the file in errors. Anything else is one InvalidMessage."""
    text = _decoded(raw, source)
    stripped = text.strip()
    if not stripped:
        raise InvalidMessage(None, f"{source} is empty; {FORMAT_HINT}")
    if stripped.startswith("["):
        data = _parsed(stripped, source, "")
        if not isinstance(data, list):  # pragma: no cover - a JSON text starting '[' is a list
            raise InvalidMessage(None, f"{source} must hold a JSON array of messages")
        return data
    messages = []
    # split on newlines only: str.splitlines() also splits on U+2028, U+0085 and others,
    # which JSON allows unescaped inside strings
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            messages.append(_parsed(line, source, f" line {number}"))
        except InvalidMessage:
            if stripped.startswith("{") and number == 1 and _is_one_object(stripped):
                raise InvalidMessage(
                    None,
                    f"{source} holds one JSON object spread over lines, not a list of "
                    f"messages; put it in a JSON array ([...]) or on a single line",
                ) from None
            raise
    return messages


def _decoded(raw: bytes, source: str) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InvalidMessage(
            None, f"{source} is UTF-16 text, not UTF-8; save it as UTF-8 and try again"
        )
    if b"\x00" in raw:
        raise InvalidMessage(
            None, f"{source} holds NUL bytes, so it is no text file (is it binary?); {FORMAT_HINT}"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InvalidMessage(
            None,
            f"{source} is not UTF-8 text (byte {error.start}; is it a binary file?); "
            f"save it as UTF-8",
        ) from None


class NonFiniteNumber(ValueError):
    """A NaN or an infinity in JSON text: Python's reader takes ``NaN``, ``Infinity``
    and ``1e999``, but JSON has no such number, so no JSON output could hold it."""


def load_json(text: str | bytes) -> Any:
    """``json.loads``, but a NaN or an infinity raises NonFiniteNumber naming where the
    first one is (``[3].metadata.score``)."""
    import json  # here: only reading a file needs it, not `import ctxwindow`

    found: list[str] = []

    def constant(name: str) -> float:  # NaN, Infinity, -Infinity
        found.append(name)
        return float(name)

    def number(literal: str) -> float:  # 1e999 reads as an infinity
        value = float(literal)
        if not math.isfinite(value):
            found.append(literal)
        return value

    data = json.loads(text, parse_constant=constant, parse_float=number)
    if found:
        raise NonFiniteNumber(f"{found[0]} at {_path_of_non_finite(data)}")
    return data


def _path_of_non_finite(data: Any) -> str:
    """Where the first non-finite number in ``data`` is, as ``[0].metadata.score``
    (walked without recursion: the value may be nested as deep as JSON allows)."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return path or "the top level"
        if isinstance(value, dict):
            stack.extend((item, f"{path}.{key}") for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(
                (item, f"{path}[{index}]") for index, item in reversed(list(enumerate(value)))
            )
    return "the top level"  # pragma: no cover - load_json found one


def non_finite_error(source: str, where: str, error: NonFiniteNumber) -> InvalidMessage:
    """The InvalidMessage for a NaN or infinity in ``source``."""
    return InvalidMessage(
        None,
        f"{source}{where} holds {error}, which is not a JSON number (JSON has no NaN or "
        f"Infinity); write null or a finite number there",
    )


def _parsed(text: str, source: str, where: str) -> Any:
    """One JSON value, or InvalidMessage naming the file, the line and what to do."""
    import json  # here: only reading a file needs it, not `import ctxwindow`

    try:
        return load_json(text)
    except NonFiniteNumber as error:
        raise non_finite_error(source, where, error) from None
    except json.JSONDecodeError as error:
        problem = f"{error.msg} at line {error.lineno} column {error.colno}"
        if where:  # a JSONL line: its own line and column are the line's
            problem = f"{error.msg} at column {error.colno}"
    except RecursionError:
        problem = "its arrays or objects are nested too deeply"
    except ValueError as error:  # such as an integer with more digits than Python reads
        problem = str(error)
    raise InvalidMessage(None, f"{source}{where} is not valid JSON ({problem}); {FORMAT_HINT}")


def _is_one_object(text: str) -> bool:
    try:
        return isinstance(load_json(text), dict)
    except (ValueError, RecursionError):
        return False
