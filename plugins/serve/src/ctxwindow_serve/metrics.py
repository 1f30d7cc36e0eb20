"""The proxy's counters, as Prometheus text or JSON: requests by route, model and
outcome, tokens before and after windowing, and the visit latency's percentiles. No
label carries anything a user sent but the model name.
"""

from __future__ import annotations

import statistics
from collections import Counter, deque
from typing import Any

from ctxwindow_serve.windowing import Outcome

#: Visit latencies kept for the percentiles.
LATENCIES_KEPT = 10_000


class Metrics:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.tokens_before = 0
        self.tokens_after = 0
        self.visit_ms: deque[float] = deque(maxlen=LATENCIES_KEPT)

    def observe(self, route: str, outcome: Outcome) -> None:
        self.requests[(route, outcome.model or "", outcome.outcome)] += 1
        record = outcome.record
        if record is not None:
            self.tokens_before += record.tokens_before
            self.tokens_after += record.tokens_after
            self.visit_ms.append(record.elapsed_ms)

    def upstream_error(self, route: str) -> None:
        self.requests[(route, "", "upstream_error")] += 1

    def percentiles(self) -> dict[str, float]:
        latencies = list(self.visit_ms)
        if len(latencies) < 2:
            only = latencies[0] if latencies else 0.0
            return {"p50": only, "p90": only, "p99": only}
        cuts = statistics.quantiles(latencies, n=100, method="inclusive")
        return {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": [
                {"route": route, "model": model, "outcome": outcome, "count": count}
                for (route, model, outcome), count in sorted(self.requests.items())
            ],
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "tokens_saved": self.tokens_before - self.tokens_after,
            "visit_ms": self.percentiles(),
        }

    def prometheus(self) -> str:
        lines = [
            "# HELP ctxwindow_requests_total Requests by route, model and outcome.",
            "# TYPE ctxwindow_requests_total counter",
        ]
        for (route, model, outcome), count in sorted(self.requests.items()):
            labels = f'route="{_label(route)}",model="{_label(model)}",outcome="{outcome}"'
            lines.append(f"ctxwindow_requests_total{{{labels}}} {count}")
        for name, value, text in (
            ("tokens_before", self.tokens_before, "History tokens before windowing."),
            ("tokens_after", self.tokens_after, "History tokens after windowing."),
            ("tokens_saved", self.tokens_before - self.tokens_after, "Tokens windowing saved."),
        ):
            lines += [
                f"# HELP ctxwindow_{name}_total {text}",
                f"# TYPE ctxwindow_{name}_total counter",
                f"ctxwindow_{name}_total {value}",
            ]
        lines += [
            "# HELP ctxwindow_visit_ms Visit latency percentiles (milliseconds).",
            "# TYPE ctxwindow_visit_ms gauge",
        ]
        for quantile, milliseconds in self.percentiles().items():
            lines.append(f'ctxwindow_visit_ms{{quantile="0.{quantile[1:]}"}} {milliseconds:.3f}')
        return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
