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
    """To [0, 1] by min-max; all-equal values become zeros. Always a new array."""
    if values.size == 0:
        return values.astype(np.float32)
    low, high = float(values.min()), float(values.max())
    if high - low < 1e-9:
        return np.zeros_like(values, dtype=np.float32)
    out: np.ndarray = np.subtract(values, low)
    out /= high - low
    return out.astype(np.float32, copy=False)


def fuse(dense: np.ndarray, lexical: np.ndarray, lexical_weight: float) -> np.ndarray:
    """A weighted sum of the two signals, each scaled to [0, 1] first (in place in the
    scaled copies: the same float32 operations as the plain expression, fewer arrays)."""
    fused = scaled(dense)
    fused *= 1.0 - lexical_weight
    keywords = scaled(lexical)
    keywords *= lexical_weight
    fused += keywords
    return fused


def spread_to_neighbours(scores: np.ndarray, strength: float, reach: int) -> np.ndarray:
    """Add to each unit ``strength * decay**(k-1)`` of the scores ``k`` units away, both
    sides, for ``k`` up to ``reach``. Each share is computed into one reused buffer: the
    same operations as a new array per share, without allocating 2 * ``reach`` of them."""
    out = scores.astype(np.float32, copy=True)
    share = np.empty_like(scores)
    size = scores.size
    weight = strength
    for distance in range(1, min(reach, size - 1) + 1):
        part = share[: size - distance]
        np.multiply(scores[:-distance], weight, out=part)
        out[distance:] += part
        np.multiply(scores[distance:], weight, out=part)
        out[:-distance] += part
        weight *= NEIGHBOUR_DECAY
    return out
