"""The proxy's counters, as Prometheus text or JSON: windowed requests by route, model
and outcome (each counted once), upstream errors by route, tokens before and after
windowing, and the visit latency's percentiles.

No label takes a value a client chose: a route is one of the windowed ones or
``other``, a model is the name of its ``[models]`` entry or ``other``, so that no
client can grow the metric set (each label set is a series kept for ever).
"""

from __future__ import annotations

import statistics
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from ctxwindow_serve.settings import ModelEntry
from ctxwindow_serve.shapes import ROUTES
from ctxwindow_serve.windowing import Outcome

#: Visit latencies kept for the percentiles.
LATENCIES_KEPT = 10_000
#: The label of a route or a model the proxy does not know.
OTHER = "other"


class Metrics:
    """The counters of one proxy; ``entry_of`` finds a model's ``[models]`` entry, whose
    name is the model's label."""

    def __init__(self, entry_of: Callable[[object], ModelEntry | None] = lambda _: None) -> None:
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.upstream_errors: Counter[str] = Counter()
        self.upstream_unreachable: Counter[str] = Counter()
        self.tokens_before = 0
        self.tokens_after = 0
        self.visit_ms: deque[float] = deque(maxlen=LATENCIES_KEPT)
        self._entry_of = entry_of

    def observe(self, route: str, outcome: Outcome) -> None:
        """Count one windowed request (once, whatever the upstream answers)."""
        self.requests[(_route(route), self._model(outcome.model), outcome.outcome)] += 1
        record = outcome.record
        if record is not None:
            self.tokens_before += record.tokens_before
            self.tokens_after += record.tokens_after
        if outcome.visit_ms is not None:  # the proxy's whole step, conversions included
            self.visit_ms.append(outcome.visit_ms)

    def upstream_error(self, route: str) -> None:
        """Count an upstream answer of 400 or more, on any route (apart from requests:
        a windowed request that gets one is still one request)."""
        self.upstream_errors[_route(route)] += 1

    def unreachable(self, route: str) -> None:
        """Count a request the upstream gave no answer to (the proxy's own 502)."""
        self.upstream_unreachable[_route(route)] += 1

    def _model(self, name: str | None) -> str:
        """The model's label: its entry's name, ``other`` for a model with none or a
        request that names none (a body that is not JSON, say)."""
        if name is None:
            return OTHER
        entry = self._entry_of(name)
        return OTHER if entry is None else entry.name

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
            "upstream_errors": dict(sorted(self.upstream_errors.items())),
            "upstream_unreachable": dict(sorted(self.upstream_unreachable.items())),
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "tokens_saved": self.tokens_before - self.tokens_after,
            "visit_ms": self.percentiles(),
        }

    def prometheus(self) -> str:
        lines = [
            "# HELP ctxwindow_requests_total Windowed requests by route, model and outcome.",
            "# TYPE ctxwindow_requests_total counter",
        ]
        for (route, model, outcome), count in sorted(self.requests.items()):
            labels = f'route="{_label(route)}",model="{_label(model)}",outcome="{outcome}"'
            lines.append(f"ctxwindow_requests_total{{{labels}}} {count}")
        lines += [
            "# HELP ctxwindow_upstream_errors_total Upstream answers of 400 or more by route.",
            "# TYPE ctxwindow_upstream_errors_total counter",
        ]
        for route, count in sorted(self.upstream_errors.items()):
            lines.append(f'ctxwindow_upstream_errors_total{{route="{_label(route)}"}} {count}')
        lines += [
            "# HELP ctxwindow_upstream_unreachable_total Requests the upstream could not be "
            "reached for (answered 502 by the proxy) by route.",
            "# TYPE ctxwindow_upstream_unreachable_total counter",
        ]
        for route, count in sorted(self.upstream_unreachable.items()):
            lines.append(f'ctxwindow_upstream_unreachable_total{{route="{_label(route)}"}} {count}')
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
            "# HELP ctxwindow_visit_ms Percentiles of the time the proxy spent windowing a "
            "request, body parsing and conversions included (milliseconds).",
            "# TYPE ctxwindow_visit_ms gauge",
        ]
        for quantile, milliseconds in self.percentiles().items():
            lines.append(f'ctxwindow_visit_ms{{quantile="0.{quantile[1:]}"}} {milliseconds:.3f}')
        return "\n".join(lines) + "\n"


def _route(path: str) -> str:
    """The route's label: a windowed route's path, ``other`` for any other path."""
    route = path.rstrip("/")
    return route if route in ROUTES else OTHER


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
