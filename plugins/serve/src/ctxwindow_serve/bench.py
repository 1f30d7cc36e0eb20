"""What the proxy adds to a request: ``python -m ctxwindow_serve.bench``.

An upstream that answers at once (a small JSON completion, or three SSE chunks) runs in
one process, the proxy in front of it in another, and this process sends the same
requests to each, alternating, over kept-alive connections: a chat history of
``--messages`` messages growing by one message a request, so the proxy is warm (it
recognises the history it saw and reads the new message only). Reports the median and
p90 of each arm's latency (and time to the first streamed chunk), their difference and
their ratio.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import sys
import time
from typing import Any

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


def _run_proxy(port: int, upstream: str, strategy: str, context: int) -> None:
    import uvicorn

    from ctxwindow_serve import ModelEntry, ServeSettings, build_app

    settings = ServeSettings(
        upstream=upstream,
        strategy={"strategy": strategy, "counter": "approx"},
        models=(ModelEntry(MODEL, context=context, output=256, reserve=0.0),),
    )
    uvicorn.run(build_app(settings), host="127.0.0.1", port=port, log_level="warning")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.post(url, content=b"{}", timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not start")


def _message(number: int) -> dict[str, str]:
    role = "user" if number % 2 == 0 else "assistant"
    return {"role": role, "content": f"message {number}: " + "some words of a chat " * 8}


def _time(client: Any, url: str, body: bytes, stream: bool) -> tuple[float, float]:
    """(total ms, ms to the first body chunk) of one request."""
    started = time.perf_counter()
    first = None
    with client.stream(
        "POST", url, content=body, headers={"content-type": "application/json"}
    ) as answer:
        for _ in answer.iter_raw():
            if first is None:
                first = time.perf_counter()
        if answer.status_code != 200:
            raise RuntimeError(f"{url} answered {answer.status_code}")
    ended = time.perf_counter()
    return (ended - started) * 1000, ((first or ended) - started) * 1000


def measure(
    messages: int,
    requests: int,
    strategy: str,
    stream: bool,
    passthrough: bool = False,
    warmup: int = 20,
) -> dict[str, Any]:
    """Start the upstream and the proxy, alternate requests between them, summarise."""
    import httpx

    context = CONTEXT
    up_port, proxy_port = _free_port(), _free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    spawn = multiprocessing.get_context("spawn")
    processes = [
        spawn.Process(target=_run_upstream, args=(up_port,), daemon=True),
        spawn.Process(
            target=_run_proxy,
            args=(proxy_port, upstream, strategy, context),
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
        with httpx.Client(timeout=30) as client:
            for number in range(warmup + requests):
                history.append(_message(messages + number))
                body = json.dumps(
                    {"model": model, "messages": history, "max_tokens": 256, "stream": stream}
                ).encode()
                order = ("direct", "proxy") if number % 2 == 0 else ("proxy", "direct")
                for arm in order:
                    timing = _time(
                        client, direct_url if arm == "direct" else proxy_url, body, stream
                    )
                    if number >= warmup:
                        arms[arm].append(timing)
    finally:
        for process in processes:
            process.terminate()
            process.join(10)
    summary = _summary(arms, messages, requests, strategy, stream)
    summary["passthrough"] = passthrough
    return summary


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


def suite(requests: int, strategy: str) -> dict[str, Any]:
    """Every run of :data:`SUITE`, with the machine they ran on (docs/results/serve-bench.json)."""
    import os
    import platform

    runs = []
    for label, messages, stream, passthrough in SUITE:
        run = measure(messages, requests, strategy, stream, passthrough)
        runs.append({"label": label, **run})
        print(f"{label}: added {run['added_total_ms']} ms", file=sys.stderr)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "load": load}
    return {"machine": machine, "runs": runs}


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
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    args = parser.parse_args(argv)
    if args.suite:
        result = suite(args.requests, args.strategy)
    else:
        result = measure(args.messages, args.requests, args.strategy, args.stream, args.passthrough)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as file:
            file.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
