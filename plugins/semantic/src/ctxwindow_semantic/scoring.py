"""Relevance of each unit to the query.

Dense similarity and BM25 are each scaled to [0, 1] and added with weights; then each
unit inherits a decaying share of its neighbours' relevance, because the turn a question
needs often sits beside the turn that matches it (the reply to a matching question, the
next part of a story). On LoCoMo this spreading is worth six points of recall at 1,000
and 2,000 tokens; see the plugin's README for the numbers behind every default.
"""

from __future__ import annotations

import numpy as np

#: Each further neighbour inherits this much less than the one before.
NEIGHBOUR_DECAY = 0.7


def scaled(values: np.ndarray) -> np.ndarray:
    """To [0, 1] by min-max; all-equal values become zeros."""
    if values.size == 0:
        return values.astype(np.float32)
    low, high = float(values.min()), float(values.max())
    if high - low < 1e-9:
        return np.zeros_like(values, dtype=np.float32)
    return ((values - low) / (high - low)).astype(np.float32)


def fuse(dense: np.ndarray, lexical: np.ndarray, lexical_weight: float) -> np.ndarray:
    """A weighted sum of the two signals, each scaled to [0, 1] first."""
    return (1.0 - lexical_weight) * scaled(dense) + lexical_weight * scaled(lexical)


def spread_to_neighbours(scores: np.ndarray, strength: float, reach: int) -> np.ndarray:
    """Add to each unit ``strength * decay**(k-1)`` of the scores ``k`` units away, both
    sides, for ``k`` up to ``reach``."""
    out = scores.astype(np.float32, copy=True)
    weight = strength
    for distance in range(1, min(reach, scores.size - 1) + 1):
        out[distance:] += weight * scores[:-distance]
        out[:-distance] += weight * scores[distance:]
        weight *= NEIGHBOUR_DECAY
    return out
