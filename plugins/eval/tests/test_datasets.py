"""``ctxwindow eval locomo`` / ``tau-airline``: the public file fetched on first use into
the user cache, its sha256 checked, its source and licence said. A local HTTP server
stands for the source (``CTXWINDOW_DATASET_MIRROR``); the network is never used."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ctxwindow._cli import main
from ctxwindow.errors import ConfigError
from ctxwindow_eval import datasets

ROOT = Path(__file__).resolve().parents[3]

#: One conversation in the shape of LoCoMo's public data/locomo10.json.
LOCOMO_SAMPLE = {
    "sample_id": "conv-1",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog called Biscuit."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! " + "chat " * 60},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "We walk by the river. " * 10},
        ],
        "session_2_date_time": "3:00 pm on 9 May, 2023",
        "session_2": [
            {"speaker": "Bob", "dia_id": "D2:1", "text": "How is the new job? " * 10},
            {"speaker": "Ann", "dia_id": "D2:2", "text": "Busy, but fine. " * 10},
        ],
    },
    "qa": [
        {"question": "What is Ann's dog called?", "answer": "Biscuit",
         "evidence": ["D1:1"], "category": 4},
        {"question": "Where do they walk?", "answer": "by the river",
         "evidence": ["D1:3"], "category": 4},
    ],
    "observation": {}, "session_summary": {}, "event_summary": {},
}  # fmt: skip


def tau_trajectories() -> list[dict[str, Any]]:
    """The example agent runs in the shape of tau-bench's historical_trajectories."""
    lines = (ROOT / "examples" / "agent-runs.jsonl").read_text(encoding="utf-8").splitlines()
    return [
        {"task_id": number, "reward": 1.0, "info": {}, "traj": json.loads(line)["messages"],
         "trial": 0}
        for number, line in enumerate(lines)
    ]  # fmt: skip


class Source:
    """A local HTTP server serving a folder, and the paths it was asked for."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.requests: list[str] = []
        source = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                source.requests.append(self.path)

        self.httpd = ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(folder))
        )
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def serve(self, name: str, content: Any) -> bytes:
        data = json.dumps(content).encode()
        (self.folder / name).write_bytes(data)
        return data


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Source]:
    folder = tmp_path / "served"
    folder.mkdir()
    served = Source(folder)
    yield served
    served.httpd.shutdown()
    served.httpd.server_close()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: Source) -> Path:
    """The user cache in a throwaway folder, and the mirror pointing at the local server."""
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setenv(datasets.MIRROR_ENV, source.url)
    return home / "ctxwindow" / "datasets"


def run_eval(*args: str) -> subprocess.CompletedProcess[str]:
    """``ctxwindow eval ARGS`` as a user runs it, with the shipped pins."""
    return subprocess.run(
        [sys.executable, "-m", "ctxwindow", "eval", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ),
    )


@dataclasses.dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def pinned_to_served(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Ran]:
    """``ctxwindow eval ARGS`` run in this process (``ctxwindow``'s own ``main``), with
    the named datasets pinned to the file the local server serves in place of the
    published one: the published file is never fetched here."""

    def run(served: bytes, name: str, *args: str) -> Ran:
        public = datasets.DATASETS[name]
        digest = hashlib.sha256(served).hexdigest()
        monkeypatch.setitem(datasets.DATASETS, name, dataclasses.replace(public, sha256=digest))
        capsys.readouterr()
        code = main(["eval", name, *args])
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


def test_eval_locomo_fetches_once_checks_and_says_source_and_licence(
    source: Source, cache: Path, pinned_to_served: Callable[..., Ran]
) -> None:
    data = source.serve("locomo10.json", [LOCOMO_SAMPLE])
    run = functools.partial(pinned_to_served, data, "locomo")
    first = run("-s", "fixed", "--budgets", "60,400")
    assert first.returncode == 0, first.stderr
    assert source.requests == ["/locomo10.json"]
    said = " ".join(first.stdout.split())
    assert f"from {source.url}/locomo10.json" in said
    assert "CC BY-NC 4.0" in said and "Maharana et al." in said
    assert f"sha256 {hashlib.sha256(data).hexdigest()}" in said
    cached = cache / "locomo" / "locomo10.json"
    assert cached.read_bytes() == data
    assert "1 conversations" in said and "evidence recall" in said.lower()

    again = run("-s", "fixed", "--budgets", "400")
    assert again.returncode == 0, again.stderr
    assert source.requests == ["/locomo10.json"]  # not fetched again
    assert f"cached at {cached}" in " ".join(again.stdout.split())

    cached.write_bytes(data.replace(b"Biscuit", b"Pickles"))  # changed after the fetch
    changed = run("-s", "fixed", "--budgets", "400")
    assert changed.returncode == 1
    assert "changed since it was fetched" in " ".join(changed.stderr.split())


def test_eval_tau_airline_is_read_as_agent_trajectories(
    source: Source, cache: Path, pinned_to_served: Callable[..., Ran]
) -> None:
    data = source.serve("gpt-4o-airline.json", tau_trajectories())
    done = pinned_to_served(data, "tau-airline", "-s", "fixed", "--budgets", "400")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "2 trajectories" in said and "next-action" in said
    assert "licence MIT" in said
    assert (cache / "tau-airline" / "gpt-4o-airline.json").is_file()


def test_a_file_of_the_same_name_wins_over_the_benchmark(
    source: Source, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "locomo").write_text(json.dumps([LOCOMO_SAMPLE]), encoding="utf-8")
    done = run_eval("locomo", "-s", "fixed", "--budgets", "400")
    assert done.returncode == 0, done.stderr
    assert source.requests == [] and not cache.exists()


def pinned(sha256: str) -> datasets.PublicDataset:
    return datasets.PublicDataset(
        name="tiny",
        kind="locomo",
        url="https://example.invalid/data/tiny.json",
        sha256=sha256,
        what="a tiny test file",
        licence="CC0",
    )


def test_a_pinned_hash_is_checked_and_a_wrong_file_is_not_saved(
    source: Source, cache: Path
) -> None:
    data = source.serve("tiny.json", [LOCOMO_SAMPLE])
    said: list[str] = []
    with pytest.raises(ConfigError, match="not the published file") as error:
        datasets.fetch(pinned("0" * 64), say=said.append)
    assert hashlib.sha256(data).hexdigest() in str(error.value)
    assert not (cache / "tiny").exists() or not any((cache / "tiny").iterdir())

    path = datasets.fetch(pinned(hashlib.sha256(data).hexdigest()), say=said.append)
    assert path.read_bytes() == data
    assert "checked" in said[-1] and "recorded" not in said[-1]
    assert not path.with_name("tiny.json.sha256").exists()  # the pin is the reference


def test_an_unreachable_source_names_the_mirror_variable(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(datasets.MIRROR_ENV, "http://127.0.0.1:9")  # discard: nothing answers
    with pytest.raises(ConfigError, match=datasets.MIRROR_ENV):
        datasets.fetch(datasets.DATASETS["locomo"], say=lambda line: None)
    assert not (cache / "locomo" / "locomo10.json").exists()


def test_the_sources_are_pinned_to_a_commit_and_a_hash() -> None:
    for public in datasets.DATASETS.values():
        assert public.url.startswith("https://raw.githubusercontent.com/")
        ref = public.url.split("/")[5]
        assert len(ref) == 40 and all(c in "0123456789abcdef" for c in ref), public.url
        assert public.sha256 is not None and len(public.sha256) == 64, public.name
        assert all(c in "0123456789abcdef" for c in public.sha256), public.name


@pytest.mark.parametrize(
    ("name", "file_name"), [("locomo", "locomo10.json"), ("tau-airline", "gpt-4o-airline.json")]
)
def test_the_shipped_pin_refuses_a_file_that_is_not_the_published_one(
    source: Source, cache: Path, name: str, file_name: str
) -> None:
    """A mirror (or a tampered source) serving another file: ``ctxwindow eval NAME`` as a
    user runs it fails, says why, and keeps nothing."""
    source.serve(file_name, [LOCOMO_SAMPLE] if name == "locomo" else tau_trajectories())
    done = run_eval(name, "-s", "fixed", "--budgets", "400")
    assert done.returncode == 1
    said = " ".join(done.stderr.split())
    assert "not the published file" in said and datasets.DATASETS[name].sha256 in said
    assert source.requests == [f"/{file_name}"]
    folder = cache / name
    assert not folder.exists() or not any(folder.iterdir())
