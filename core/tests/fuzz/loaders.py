"""Fuzz targets: the message loader and the config loader, bytes in.

The property is the same for both: a valid result or a ctxwindow error comes out, never
any other exception (and never a hang, which the driver bounds). Each target is a plain
function, so hypothesis (``core/tests/test_fuzz.py``) and atheris
(``core/tests/fuzz/run_atheris.py``) drive the same code.

The messages target reads bytes as ``ctxwindow select`` reads a file (JSON array or
JSONL), builds a Conversation from what it read, and windows it with the testing kit's
``newest`` under both orphan policies. The config target reads bytes as ctxwindow.toml or as
pyproject.toml and, when that gives a table, builds the Windower and windows a small
history with it.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import ctxwindow
from ctxwindow._config import parse_config, windower_from
from ctxwindow._files import parse_messages
from ctxwindow.errors import CtxWindowError
from ctxwindow.testing.strategies import Newest

#: Small enough that a generated config with a huge option cannot make a case slow.
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "a", "content": "18C"},
    {"role": "user", "content": "Thanks"},
]
#: Config keys a strategy would otherwise spend real time on (an embedder model, an LLM
#: endpoint): the fuzzer tests the loader, not a network timeout.
SLOW_STRATEGIES = frozenset({"semantic", "summarize"})


class Finding(AssertionError):
    """A fuzz input made a loader raise something other than a ctxwindow error."""


def messages_target(data: bytes) -> str:
    """Read ``data`` as the CLI reads a messages file; what happened, for counting."""
    try:
        entries = parse_messages(data, "fuzz")
        conversation = ctxwindow.Conversation(entries)
        budget = 1 + len(data) % 4000
        for orphans in ("raise", "drop"):
            with contextlib.suppress(CtxWindowError):
                ctxwindow.select(
                    conversation, budget, "newest", orphans=orphans, oversize="truncate"
                )
    except CtxWindowError as error:
        return type(error).__name__
    except Exception as error:
        raise Finding(f"messages loader raised {type(error).__name__}: {error}") from error
    return "read"


def config_target(data: bytes) -> str:
    """Read ``data`` as ctxwindow.toml and as pyproject.toml, and use what it gives."""
    outcome = "read"
    for name in ("ctxwindow.toml", "pyproject.toml"):
        try:
            config = parse_config(data, Path(name))
            if config is None:
                continue
            name_given = config.get("strategy")
            if isinstance(name_given, str) and name_given in SLOW_STRATEGIES:
                config = {**config, "strategy": "newest"}
            windower = windower_from(config)
            windower.select(HISTORY)
        except CtxWindowError as error:
            outcome = type(error).__name__
        except Exception as error:
            raise Finding(
                f"config loader ({name}) raised {type(error).__name__}: {error}"
            ) from error
    return outcome


TARGETS = {"messages": messages_target, "config": config_target}


class _Testing:
    @ctxwindow.hookimpl
    def register_strategies(self, register: Any) -> None:
        register(Newest)


def register_newest() -> None:
    """Register the ``newest`` strategy the targets window with (the tests' conftest does
    it for each test; the atheris driver, a process of its own, calls this)."""
    ctxwindow.register_plugin(_Testing(), "fuzz-testing", "ctxwindow-testing")


def seeds(target: str) -> list[bytes]:
    """Valid inputs (and near misses) to start from: the fuzzer mutates these."""
    root = Path(__file__).resolve().parents[3]
    if target == "messages":
        example = json.loads((root / "examples" / "conversation.json").read_text("utf-8"))
        return [
            json.dumps(HISTORY).encode(),
            "\n".join(json.dumps(m) for m in HISTORY).encode(),
            json.dumps(example[:12], ensure_ascii=False).encode(),
            json.dumps(
                [
                    {"role": "user", "content": [{"type": "text", "text": "hi 🎉"}]},
                    {"role": "user", "content": "x", "metadata": {"pinned": True, "id": 3}},
                    {"role": "tool", "tool_call_id": "ghost", "content": "r"},
                ]
            ).encode(),
            b'[{"role": "user", "content": "\\ud800"}]',
            b"\xef\xbb\xbf[]",
        ]
    return [
        b'strategy = "newest"\nbudget = 400\ntime_limit = 3\n',
        b'strategy = "sliding"\nbudget = 300\ncounter = "approx"\nimportant_share = 0.5\n',
        b'strategy = "recency-decay"\nbudget = 200\nkeywords = ["paris"]\nhalf_life = 2\n',
        b'[tool.ctxwindow]\nstrategy = "newest"\nbudget = 100\noversize = "truncate"\n',
        b'strategy = "newest"\nbudget = 50\norphans = "drop"\ncounter = "tiktoken:cl100k_base"\n',
        b"[tool]\nctxwindow = 5\n",
    ]


#: Tokens that help a byte-level fuzzer find the structure quickly (libFuzzer -dict).
DICTIONARY = [
    '"role"', '"content"', '"tool_calls"', '"tool_call_id"', '"function"', '"arguments"',
    '"name"', '"metadata"', '"pinned"', '"id"', '"type"', '"text"', '"image_url"',
    '"system"', '"user"', '"assistant"', '"tool"', '"developer"', "null", "true", "NaN",
    "strategy", "budget", "counter", "oversize", "orphans", "time_limit", "[tool.ctxwindow]",
    '"newest"', '"fixed"', '"sliding"', '"truncate"', '"drop"', '"approx"',
    '"tiktoken:cl100k_base"',
    '"\\ud800"', "1e999", "-1", "0",
]  # fmt: skip


def write_dictionary(path: Path) -> Path:
    path.write_text(
        "\n".join(f"kw{i}={json.dumps(token)}" for i, token in enumerate(DICTIONARY)) + "\n",
        encoding="utf-8",
    )
    return path
