"""What the proxy adds to a request: ``python -m ctxwindow_serve.bench``.

An upstream that answers at once (a small JSON completion, or three SSE chunks) runs in
one process, the proxy in front of it in another, and this process sends the same
requests to each, alternating, over kept-alive connections (``http.client``, whose own
cost is the same in both arms): a chat history of ``--messages`` messages growing by one
message a request, so the proxy is warm (it recognises the history it saw and reads the
new message only). Reports the median and p90 of each arm's latency (and time to the
first streamed chunk), their difference and their ratio, the proxy process's CPU time
per request (steady where the machine is busy and latencies are not), and what the
proxy ran on (parser, loop, client, JSON library); ``--pure`` runs the proxy on the
pure-Python parts whatever is installed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import socket
import statistics
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from ctxwindow_serve import runtime

#: The model the bench's config windows.
MODEL = "bench"
#: Its context: the history's budget is 4,000 tokens (as `ctxwindow bench`'s) after the
#: request's 256 output tokens.
CONTEXT = 4256
CHUNKS = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"bench",'
    b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"bench",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
)
COMPLETION = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hi"}}
        ],
    }
).encode()


def _upstream_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def answer(request: Request) -> Response:
        body = await request.body()
        if b'"stream":true' in body:

            async def chunks() -> Any:
                for chunk in CHUNKS:
                    yield chunk

            return StreamingResponse(chunks(), media_type="text/event-stream")
        return Response(COMPLETION, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])


def _run_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(_upstream_app(), host="127.0.0.1", port=port, log_level="warning")


def _run_proxy(port: int, upstream: str, strategy: str, context: int, pure: bool = False) -> None:
    if pure:  # before aiohttp is imported
        os.environ["AIOHTTP_NO_EXTENSIONS"] = "1"
    import uvicorn

    from ctxwindow_serve import ModelEntry, ServeSettings, build_app

    settings = ServeSettings(
        upstream=upstream,
        strategy={"strategy": strategy, "counter": "approx"},
        models=(ModelEntry(MODEL, context=context, output=256, reserve=0.0),),
    )
    http, loop = (runtime.PURE_HTTP, runtime.PURE_LOOP) if pure else ("auto", "auto")
    uvicorn.run(
        build_app(settings), host="127.0.0.1", port=port, log_level="warning", http=http, loop=loop
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        connection = _connect(url)
        try:
            connection.request("POST", urlsplit(url).path, b"{}")
            connection.getresponse().read()
            return
        except OSError:
            time.sleep(0.1)
        finally:
            connection.close()
    raise RuntimeError(f"{url} did not start")


def _connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)


def _message(number: int) -> dict[str, str]:
    role = "user" if number % 2 == 0 else "assistant"
    return {"role": role, "content": f"message {number}: " + "some words of a chat " * 8}


def _body(model: str, history: list[dict[str, str]], stream: bool) -> bytes:
    """The request, compact as SDKs send it: the upstream finds ``"stream":true`` in
    it alike whether it came directly or through the proxy."""
    request = {"model": model, "messages": history, "max_tokens": 256, "stream": stream}
    return json.dumps(request, separators=(",", ":")).encode()


def _time(connection: http.client.HTTPConnection, path: str, body: bytes) -> tuple[float, float]:
    """(total ms, ms to the first body chunk) of one request on a kept-alive connection."""
    started = time.perf_counter()
    first = None
    connection.request("POST", path, body, {"content-type": "application/json"})
    answer = connection.getresponse()
    while answer.read1(65536):
        if first is None:
            first = time.perf_counter()
    answer.read()  # the end of the body: the connection is ready for the next request
    if answer.status != 200:
        raise RuntimeError(f"{path} answered {answer.status}")
    ended = time.perf_counter()
    return (ended - started) * 1000, ((first or ended) - started) * 1000


def measure(
    messages: int,
    requests: int,
    strategy: str,
    stream: bool,
    passthrough: bool = False,
    warmup: int = 20,
    pure: bool = False,
) -> dict[str, Any]:
    """Start the upstream and the proxy, alternate requests between them, summarise."""
    context = CONTEXT
    up_port, proxy_port = _free_port(), _free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    spawn = multiprocessing.get_context("spawn")
    processes = [
        spawn.Process(target=_run_upstream, args=(up_port,), daemon=True),
        spawn.Process(
            target=_run_proxy,
            args=(proxy_port, upstream, strategy, context, pure),
            daemon=True,
        ),
    ]
    for process in processes:
        process.start()
    try:
        direct_url = f"{upstream}/v1/chat/completions"
        proxy_url = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
        _wait(direct_url)
        _wait(proxy_url)
        history = [_message(number) for number in range(messages)]
        model = "not-configured" if passthrough else MODEL  # forwarded as it came
        arms: dict[str, list[tuple[float, float]]] = {"direct": [], "proxy": []}
        connections = {"direct": _connect(direct_url), "proxy": _connect(proxy_url)}
        path = urlsplit(direct_url).path
        cpu: list[float | None] = []
        try:
            for number in range(warmup + requests):
                if number == warmup:
                    cpu.append(_cpu_seconds(processes[1].pid))
                history.append(_message(messages + number))
                body = _body(model, history, stream)
                order = ("direct", "proxy") if number % 2 == 0 else ("proxy", "direct")
                for arm in order:
                    timing = _time(connections[arm], path, body)
                    if number >= warmup:
                        arms[arm].append(timing)
            cpu.append(_cpu_seconds(processes[1].pid))
        finally:
            for connection in connections.values():
                connection.close()
    finally:
        for process in processes:
            process.terminate()
            process.join(10)
    summary = _summary(arms, messages, requests, strategy, stream)
    summary["passthrough"] = passthrough
    before, after = cpu
    summary["proxy_cpu_ms"] = (
        round((after - before) * 1000 / requests, 3)
        if before is not None and after is not None
        else None
    )
    summary["runtime"] = runtime.describe(pure)
    return summary


def _cpu_seconds(pid: int | None) -> float | None:
    """The CPU time (user and system) process ``pid`` has used: what the proxy spends
    on a request whatever else the machine runs (Linux only; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _summary(
    arms: dict[str, list[tuple[float, float]]],
    messages: int,
    requests: int,
    strategy: str,
    stream: bool,
) -> dict[str, Any]:
    def stats(values: list[float]) -> dict[str, float]:
        return {
            "median": round(statistics.median(values), 3),
            "p90": round(statistics.quantiles(values, n=10)[8], 3),
        }

    out: dict[str, Any] = {
        "strategy": strategy, "messages": messages, "requests": requests, "stream": stream,
    }  # fmt: skip
    for arm, timings in arms.items():
        out[arm] = {"total_ms": stats([t for t, _ in timings]),
                    "first_chunk_ms": stats([f for _, f in timings])}  # fmt: skip
    for key in ("total_ms", "first_chunk_ms"):
        direct, proxied = out["direct"][key]["median"], out["proxy"][key]["median"]
        out[f"added_{key}"] = round(proxied - direct, 3)
        out[f"ratio_{key}"] = round(proxied / direct, 3) if direct else None
    return out


#: The runs ``--suite`` makes, in the order the docs show them: (label, messages,
#: stream, passthrough). The passthrough runs name a model with no entry, so the proxy
#: forwards them untouched: the cost of the hop alone.
SUITE = (
    ("windowed, JSON", 1000, False, False),
    ("windowed, SSE (first chunk)", 1000, True, False),
    ("passthrough, 1,000 messages", 1000, False, True),
    ("passthrough, 10 messages", 10, False, True),
)


def suite(requests: int, strategy: str, pure: bool = False) -> dict[str, Any]:
    """Every run of :data:`SUITE`, with the machine they ran on (docs/results/serve-bench.json)."""
    import os
    import platform

    runs = []
    for label, messages, stream, passthrough in SUITE:
        run = measure(messages, requests, strategy, stream, passthrough, pure=pure)
        runs.append({"label": label, **run})
        added = run["added_first_chunk_ms" if stream else "added_total_ms"]
        print(f"{label}: added {added} ms, proxy CPU {run['proxy_cpu_ms']} ms", file=sys.stderr)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "load": load}
    return {"machine": machine, "runtime": runtime.describe(pure), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctxwindow_serve.bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200, help="per arm")
    parser.add_argument("--strategy", default="fixed")
    parser.add_argument("--stream", action="store_true", help="SSE answers")
    parser.add_argument(
        "--passthrough",
        action="store_true",
        help="requests for a model with no entry: the proxy's hop alone, no windowing",
    )
    parser.add_argument(
        "--suite",
        action="store_true",
        help="every run the docs show (windowed JSON and SSE, two passthroughs), one after "
        "another; --messages, --stream and --passthrough are then ignored",
    )
    parser.add_argument(
        "--pure",
        action="store_true",
        help="serve the proxy on the pure-Python parts (h11, asyncio's loop, aiohttp without "
        "its compiled parser) even where the fast ones are installed",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    args = parser.parse_args(argv)
    if args.suite:
        result = suite(args.requests, args.strategy, args.pure)
    else:
        result = measure(
            args.messages,
            args.requests,
            args.strategy,
            args.stream,
            args.passthrough,
            pure=args.pure,
        )
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as file:
            file.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
