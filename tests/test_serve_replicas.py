"""docs/serve.md's "Many replicas", run as its plain commands say: one redis-server,
three ``ctxwindow serve --config ctxwindow.toml --port P --require-key`` processes
reading one config whose strategy (``summarize``) keeps its summaries in that Redis,
and a recording upstream behind them.

What the page claims, checked from outside the processes: every replica windows a
conversation to the model's budget whichever replica gets each turn; a summary one
replica wrote is read, never written again, by the others (Redis's own command
counters say who wrote what); metrics stay per replica; a request without the client
key is refused. (The page's compose file needs Docker and a registry, so it is not run
here; these are the same processes without the containers and the balancer.)
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import httpx
import pytest

import ctxwindow
from ctxwindow.testing import check_window

if TYPE_CHECKING:
    from redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
#: The client key every replica requires (CTXWINDOW_PROXY_KEY, as the docs set it).
KEY = "replicas-test-key-5b0d"
MODEL = "small"
CONTEXT = 800
RESERVE = 0.05
MAX_TOKENS = 60
#: The history's budget the proxy computes: context - output - ceil(reserve * context).
BUDGET = CONTEXT - MAX_TOKENS - math.ceil(RESERVE * CONTEXT)
REPLICAS = 3
TURNS = 24
TOPICS = (
    "the hotel in Lisbon near the river",
    "train tickets from Porto to Coimbra",
    "a dentist appointment on Thursday morning",
    "the kitchen budget and the new oven",
    "Alma's move to Porto in the spring",
    "the football match on Saturday evening",
    "a birthday present for my brother",
    "the car repair and the insurance claim",
)


def _serve_test_servers() -> ModuleType:
    """The serve plugin's own test servers (its conftest: the recording upstream and
    uvicorn in a thread), loaded from their file rather than copied here."""
    name = "ctxwindow_serve_test_servers"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "plugins" / "serve" / "tests" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


EXAMPLE = ROOT / "examples" / "serve" / "ctxwindow.toml"


def config_text(upstream: str, cache: str | None) -> str:
    """examples/serve/ctxwindow.toml as a replica reads it, with this test's upstream and
    Redis in place of the example's (None: its cache line taken out), and a model whose
    small context makes a short chat overflow."""
    text = EXAMPLE.read_text(encoding="utf-8")
    example_cache = 'cache = "redis://redis:6379/0"\n'
    example_upstream = 'upstream = "https://api.openai.com"'
    assert example_cache in text and example_upstream in text, "the example changed"
    text = text.replace(example_cache, f'cache = "{cache}"\n' if cache else "")
    text = text.replace(example_upstream, f'upstream = "{upstream}"')
    return (
        text
        + f'\n[models."{MODEL}"]\ncontext = {CONTEXT}\noutput = {MAX_TOKENS}\nreserve = {RESERVE}\n'
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Replica:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def requests(self, http: httpx.Client) -> int:
        """The requests for MODEL its /metrics counts."""
        answer = http.get(
            f"{self.url}/metrics", params={"format": "json"}, headers={"x-ctxwindow-key": KEY}
        )
        assert answer.status_code == 200, answer.text
        return sum(row["count"] for row in answer.json()["requests"] if row["model"] == MODEL)


def start_replicas(config: Path, count: int, folder: Path) -> list[Replica]:
    """``count`` replicas, started at once as the docs' loop starts them, each answering
    /healthz (about a second each, in parallel)."""
    command = shutil.which("ctxwindow", path=str(Path(sys.executable).parent))
    assert command is not None, "the ctxwindow command is not installed beside this Python"
    env = {**os.environ, "CTXWINDOW_PROXY_KEY": KEY}
    replicas = []
    for number in range(count):
        port = _free_port()
        log = folder / f"replica-{number}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [command, "serve", "--config", str(config), "--host", "127.0.0.1",
                 "--port", str(port), "--require-key"],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        replicas.append(Replica(f"http://127.0.0.1:{port}", process, log))
    deadline = time.monotonic() + 60
    for replica in replicas:
        while True:
            assert replica.process.poll() is None, replica.output()
            try:
                if httpx.get(f"{replica.url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"replica did not start: {replica.output()}"
            time.sleep(0.05)
    return replicas


def stop_replicas(replicas: list[Replica]) -> None:
    for replica in replicas:
        replica.process.terminate()
    for replica in replicas:
        try:
            replica.process.wait(20)
        except subprocess.TimeoutExpired:
            replica.process.kill()
            replica.process.wait(20)


@dataclass
class Deployment:
    redis: RedisServer
    upstream: Any  # the serve tests' recording Upstream: what reached it, in order
    replicas: list[Replica]
    http: httpx.Client

    def commands(self) -> dict[str, int]:
        """Redis's count of each command it has run (INFO commandstats), by name: who
        wrote (SET) and who looked (MGET), seen from outside every replica."""
        import redis

        with redis.Redis.from_url(self.redis.url) as client:
            stats = client.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}

    def summaries(self) -> int:
        """Summaries held in Redis."""
        import redis

        with redis.Redis.from_url(self.redis.url) as client:
            return len(client.keys("ctxwindow:v1:summary:*"))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The docs' plain commands: redis-server, then the replicas on one config; started
    once for the module (tests/support's server, as its ``redis_server`` fixture runs it:
    skipped without redis-server, failed with CI=true)."""
    from redis_server import RedisServer  # not at the top: test_shared_cache makes it a plugin

    servers = _serve_test_servers()
    folder = tmp_path_factory.mktemp("replicas")
    with RedisServer() as redis_server:
        upstream = servers.Upstream()
        running = servers.serve(servers.recording_app(upstream))
        upstream.url = running.url
        config = folder / "ctxwindow.toml"
        config.write_text(config_text(upstream.url, redis_server.url))
        replicas = start_replicas(config, REPLICAS, folder)
        try:
            with httpx.Client(timeout=30) as http:
                yield Deployment(redis_server, upstream, replicas, http)
        finally:
            stop_replicas(replicas)
            running.stop()


def turn(name: str, number: int) -> dict[str, str]:
    topic = TOPICS[(number * 3 + len(name)) % len(TOPICS)]
    return {
        "role": "user",
        "content": f"{name}, turn {number}: what should we decide about {topic}? "
        f"Please keep in mind what we said about {topic} before, and list the open points.",
    }


def chat(
    deployment: Deployment, name: str, route: list[int]
) -> list[tuple[list[dict[str, Any]], httpx.Response, dict[str, Any]]]:
    """One conversation growing by a turn a request, the ``i``-th request sent to
    replica ``route[i]`` as an OpenAI client sends it (the answer appended to the
    history); each request's history with its answer and the body the upstream got."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful planner."}]
    sent = []
    for number, replica in enumerate(route):
        history.append(turn(name, number))
        body = {"model": MODEL, "messages": history, "max_tokens": MAX_TOKENS}
        answer = deployment.http.post(
            f"{deployment.replicas[replica].url}/v1/chat/completions",
            json=body,
            headers={"authorization": "Bearer sk-upstream", "x-ctxwindow-key": KEY},
        )
        assert answer.status_code == 200, (answer.text, deployment.replicas[replica].output())
        sent.append((list(history), answer, deployment.upstream.last.json()))
        history.append(answer.json()["choices"][0]["message"])
    return sent


def header(answer: httpx.Response) -> dict[str, str]:
    """``x-ctxwindow: strategy=...; tokens=A->B; ...`` as a dict."""
    parts = (part.split("=", 1) for part in answer.headers["x-ctxwindow"].split("; "))
    return dict(parts)


def test_each_replica_windows_a_conversation_to_the_budget_and_writes_each_summary_once(
    deployment: Deployment,
) -> None:
    """A conversation with no sticky routing: each turn goes to the next replica. Every
    body the upstream gets is the window one process would choose with the shared
    cache, within the budget; every summary is written to Redis by one replica only."""
    writes_before = deployment.commands().get("set", 0)
    summaries_before = deployment.summaries()
    route = [number % REPLICAS for number in range(TURNS)]
    sent = chat(deployment, "Conversation round-robin", route)
    writes = deployment.commands().get("set", 0) - writes_before
    summaries = deployment.summaries() - summaries_before

    counter = ctxwindow.get_counter("approx")
    # one more process on the same cache (this one), its windows checked against the
    # contract: it reads the summaries the replicas wrote and writes none of its own
    reader = ctxwindow.get_strategy("summarize", cache=deployment.redis.url)
    summarized_turns = 0
    for history, answer, forwarded in sent:
        visit = header(answer)
        assert visit["strategy"] == "summarize"
        assert int(visit["budget"]) == BUDGET
        assert forwarded["max_tokens"] == MAX_TOKENS and forwarded["model"] == MODEL
        messages = forwarded["messages"]
        tokens = sum(counter.count_message(ctxwindow.Message.from_dict(m)) for m in messages)
        assert tokens == int(visit["tokens"].split("->")[1]) <= BUDGET
        expected = check_window(reader, history, BUDGET)
        assert expected is not None
        own = set(map(id, history))  # the client's messages go as they came; a summary
        sent = [m if id(m) in own else ctxwindow.to_openai([m])[0] for m in expected.messages]
        assert messages == json.loads(json.dumps(sent))  # without its metadata; tuples as lists
        summarized_turns += int(visit["summarized"]) > 0
    assert deployment.commands().get("set", 0) - writes_before == writes
    print(
        f"\n{TURNS} turns over {REPLICAS} replicas: {summarized_turns} windows held a summary; "
        f"{summaries} summaries in Redis, {writes} writes"
    )
    assert summarized_turns >= TURNS // 3  # the chat overflowed its budget early on
    assert summaries > 0
    assert writes == summaries  # each summary written once, by the replica that needed it


def test_a_replica_new_to_a_conversation_summarizes_nothing_again(
    deployment: Deployment,
) -> None:
    """A conversation windowed on replica 0 (its sticky replica), then sent again to
    replica 1, which has never seen it (as after a rebalance): replica 1 reads every
    summary from Redis, writes none, and forwards the same bodies."""
    first = chat(deployment, "Conversation sticky", [0] * TURNS)
    before = deployment.commands()
    summaries = deployment.summaries()
    again = chat(deployment, "Conversation sticky", [1] * TURNS)
    after = deployment.commands()
    print(
        f"\nreplica 1 replaying {TURNS} turns: {after.get('mget', 0) - before.get('mget', 0)} "
        f"lookups, {after.get('set', 0) - before.get('set', 0)} writes; {summaries} summaries"
    )
    assert summaries > 0
    assert after.get("mget", 0) > before.get("mget", 0)  # it looked in Redis
    assert after.get("set", 0) == before.get("set", 0)  # and wrote nothing: no new summary
    assert [forwarded for _, _, forwarded in again] == [forwarded for _, _, forwarded in first]
    assert sum(int(header(answer)["summarized"]) > 0 for _, answer, _ in again) > 0


def test_metrics_stay_with_each_replica(deployment: Deployment) -> None:
    """Not shared: each replica counts only the requests it served."""
    http = deployment.http
    counts = [replica.requests(http) for replica in deployment.replicas]
    chat(deployment, "Conversation counted", [2, 2, 0])
    grown = [
        replica.requests(http) - count
        for replica, count in zip(deployment.replicas, counts, strict=True)
    ]
    assert grown == [1, 0, 2]


@pytest.mark.parametrize("key", [None, "not-the-key"])
def test_every_replica_refuses_a_request_without_the_key(
    deployment: Deployment, key: str | None
) -> None:
    http = deployment.http
    headers = {"x-ctxwindow-key": key} if key else {}
    seen = len(deployment.upstream.seen)
    body = {"model": MODEL, "messages": [turn("Refused", 0)], "max_tokens": MAX_TOKENS}
    for replica in deployment.replicas:
        answer = http.post(f"{replica.url}/v1/chat/completions", json=body, headers=headers)
        assert answer.status_code == 401
        assert "x-ctxwindow-key" in answer.json()["error"]["message"]
        assert http.get(f"{replica.url}/metrics", headers=headers).status_code == 401
        assert http.get(f"{replica.url}/healthz").status_code == 200  # for the balancer
    assert len(deployment.upstream.seen) == seen  # nothing reached the upstream
