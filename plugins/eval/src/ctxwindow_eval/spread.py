"""How far a mean over agent steps could move on other runs of the same kind of work.

Steps of one trajectory are not independent samples (an agent that loses a
reservation id at one step tends to at the next), and neither are runs of one task.
So the interval is a cluster bootstrap: whole groups of steps (a task's runs, else
one trajectory) are drawn with replacement, and the step mean of each draw read.
A figure whose interval straddles a bar may well fall on the other side of it on
tasks nobody measured.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

#: Draws per interval (about 0.06 s each in Python). Another seed moves the ends of
#: tau-bench's intervals by about 0.001: their third decimal is indicative only.
DRAWS = 20_000
#: Draws are seeded: the same results file gives the same interval on every run.
SEED = 20_260_101


def cluster_interval(
    groups: Sequence[tuple[float, int]], draws: int = DRAWS
) -> tuple[float, float] | None:
    """The 95% percentile interval of the step mean, each group being ``(sum of its
    steps' values, number of steps)``; None with fewer than two groups with steps (one
    group says nothing of another). A percentile interval never reaches past the
    group means seen: when every group scores the same (all at 1.0, say) it is a
    point, and with few groups it is narrower than the truth."""
    measured = [group for group in groups if group[1] > 0]
    if len(measured) < 2:
        return None
    pick = random.Random(SEED).choices
    means = []
    for _ in range(draws):
        drawn = pick(measured, k=len(measured))
        means.append(sum(total for total, _ in drawn) / sum(count for _, count in drawn))
    cuts = statistics.quantiles(means, n=40, method="inclusive")  # every 2.5%
    return cuts[0], cuts[-1]
