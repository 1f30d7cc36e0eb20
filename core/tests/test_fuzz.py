"""Fuzzing the message loader and the config loader: bytes in, only ctxwindow errors out.

By default, hypothesis over bytes runs a bounded few hundred inputs per loader: random
bytes, and valid inputs mutated (bytes flipped, cut, spliced with JSON and TOML
tokens), and structured JSON and TOML built from the fields ctxwindow reads. When
atheris is installed a short coverage-guided run checks the harness works.

The long run is the nox session ``fuzz``: ``CTXWINDOW_FUZZ_SECONDS=300`` gives each
loader that many seconds of atheris (and multiplies the hypothesis examples).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
FUZZ = Path(__file__).resolve().parent / "fuzz"
sys.path.insert(0, str(FUZZ))

import loaders  # noqa: E402  (the shared targets live beside the atheris driver)

SECONDS = int(os.environ.get("CTXWINDOW_FUZZ_SECONDS") or 0)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: Strategies that persist (embeddings) write under a throwaway cache folder.
pytestmark = pytest.mark.usefixtures("ctxwindow_cache_home")
EXAMPLES = 200 if not SECONDS else max(200, SECONDS * 10)


def _settings() -> settings:
    return settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=IN_CI,
        database=None if IN_CI else settings.default.database,
        suppress_health_check=list(HealthCheck),
    )


@st.composite
def mutated(draw: Any, base: list[bytes]) -> bytes:
    """A valid input with a few byte-level edits: flips, cuts, splices, repeats."""
    data = bytearray(draw(st.sampled_from(base)))
    tokens = [t.encode() for t in loaders.DICTIONARY]
    for _ in range(draw(st.integers(1, 6))):
        edit = draw(st.sampled_from(["flip", "cut", "insert", "token", "repeat", "delete"]))
        at = draw(st.integers(0, len(data)))
        if edit == "flip" and data:
            at = min(at, len(data) - 1)
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif edit == "cut":
            del data[at:]
        elif edit == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif edit == "token":
            data[at:at] = draw(st.sampled_from(tokens))
        elif edit == "repeat":
            data[at:at] = data[at : at + draw(st.integers(1, 40))] * draw(st.integers(1, 50))
        elif edit == "delete":
            del data[at : at + draw(st.integers(1, 20))]
    return bytes(data)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["system", "user", "assistant", "tool", "developer", "text", "image_url"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(
                    [
                        "role",
                        "content",
                        "tool_calls",
                        "tool_call_id",
                        "function",
                        "arguments",
                        "name",
                        "metadata",
                        "pinned",
                        "id",
                        "type",
                        "text",
                    ]
                ),
                st.text(max_size=8),
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=30,
)


@st.composite
def json_messages(draw: Any) -> bytes:
    """JSON built from message-like values, as an array or as JSONL."""
    value = draw(st.lists(json_values, max_size=8))
    if draw(st.booleans()):
        return json.dumps(value, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    return "\n".join(json.dumps(v) for v in value).encode()


toml_values = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda f: {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(f), repr(f))
    ),
    st.text(max_size=15).map(json.dumps),
    st.sampled_from(["true", "false", "[]", "{}", '["extractive", "drop"]', "{a = 1}"]),
    st.sampled_from(['"fixed"', '"sliding"', '"recency-decay"', '"approx"', '"truncate"']),
)
toml_keys = st.sampled_from(
    ["strategy", "budget", "counter", "oversize", "orphans", "max_messages", "important_share",
     "keywords", "half_life", "scorer", "bogus", '"quoted key"', "a.b"]
)  # fmt: skip


@st.composite
def toml_configs(draw: Any) -> bytes:
    """TOML lines of known and unknown keys with values of every type."""
    lines = [f"{draw(toml_keys)} = {draw(toml_values)}" for _ in range(draw(st.integers(0, 6)))]
    if draw(st.booleans()):
        lines.insert(0, "[tool.ctxwindow]")
    return "\n".join(lines).encode("utf-8", "surrogatepass")


@_settings()
@given(
    data=st.one_of(st.binary(max_size=2000), mutated(loaders.seeds("messages")), json_messages())
)
def test_message_loader_gives_only_ctxwindow_errors(data: bytes) -> None:
    assert loaders.messages_target(data)


@_settings()
@given(data=st.one_of(st.binary(max_size=600), mutated(loaders.seeds("config")), toml_configs()))
def test_config_loader_gives_only_ctxwindow_errors(data: bytes) -> None:
    assert loaders.config_target(data)


def test_the_targets_accept_their_seeds() -> None:
    """The seeds are valid inputs, so mutations start from code that reads them."""
    for seed in loaders.seeds("messages")[:3]:
        assert loaders.messages_target(seed) == "read"
    assert loaders.config_target(loaders.seeds("config")[0]) == "read"


def test_a_finding_is_reported_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The targets fail on an exception that is not a ctxwindow error."""

    def broken(raw: bytes, source: str = "") -> list[Any]:
        raise KeyError("a bug")

    monkeypatch.setattr(loaders, "parse_messages", broken)
    with pytest.raises(loaders.Finding, match="KeyError"):
        loaders.messages_target(b"[]")


ATHERIS = importlib.util.find_spec("atheris") is not None


def _atheris(target: str, tmp_path: Path, *limit: str) -> dict[str, Any]:
    report = tmp_path / f"{target}.json"
    artifacts = tmp_path / f"artifacts-{target}"
    artifacts.mkdir(exist_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            str(FUZZ / "run_atheris.py"),
            target,
            *limit,
            "--corpus",
            str(tmp_path / f"corpus-{target}"),
            "--artifacts",
            str(artifacts),
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=max(SECONDS, 60) * 3 + 120,  # a hang of the whole driver, not a slow input
        check=False,
        cwd=tmp_path,
    )
    crashes = sorted(p.name for p in artifacts.iterdir())  # crash-*, timeout-*, oom-*
    tail = "\n".join(done.stderr.splitlines()[-30:])
    assert done.returncode == 0 and not crashes, f"{target}: {crashes}\n{tail}"
    runs = re.search(r"^Done (\d+) runs in (\d+) second", done.stderr, re.MULTILINE)
    assert runs, tail
    summary = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
    summary["runs"], summary["seconds"] = int(runs.group(1)), int(runs.group(2))
    return summary


@pytest.mark.skipif(not ATHERIS, reason="atheris is not installed (pip install atheris)")
@pytest.mark.parametrize("target", sorted(loaders.TARGETS))
def test_atheris_harness_runs(target: str, tmp_path: Path) -> None:
    """A few thousand coverage-guided inputs: the driver works and finds nothing."""
    summary = _atheris(target, tmp_path, "--runs", "3000")
    assert summary["runs"] >= 3000


@pytest.mark.skipif(not SECONDS, reason="set CTXWINDOW_FUZZ_SECONDS for the bounded-time run")
@pytest.mark.skipif(not ATHERIS, reason="atheris is not installed (pip install atheris)")
@pytest.mark.parametrize("target", sorted(loaders.TARGETS))
def test_atheris_bounded_time(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus_home = os.environ.get("CTXWINDOW_FUZZ_CORPUS")  # keep the corpus between runs
    where = Path(corpus_home) if corpus_home else tmp_path
    where.mkdir(parents=True, exist_ok=True)
    summary = _atheris(target, where, "--seconds", str(SECONDS))
    with capsys.disabled():
        print(f"\nctxwindow fuzz {target}: {json.dumps(summary)}")
    assert summary["runs"] > 0
