"""Relevance of each unit to the query: dense similarity and BM25, fused, then spread
a little to each unit's neighbours (an answer often sits next to the turn that matches).
"""

from __future__ import annotations

import numpy as np


def _scaled(values: np.ndarray) -> np.ndarray:
    """To [0, 1] by rank-preserving min-max; all-equal values become zeros."""
    if values.size == 0:
        return values
    low, high = float(values.min()), float(values.max())
    if high - low < 1e-9:
        return np.zeros_like(values)
    return (values - low) / (high - low)


def fuse(dense: np.ndarray, lexical: np.ndarray, lexical_weight: float) -> np.ndarray:
    """A weighted sum of the two signals, each scaled to [0, 1] first."""
    return (1.0 - lexical_weight) * _scaled(dense) + lexical_weight * _scaled(lexical)


def spread_to_neighbours(scores: np.ndarray, share: float) -> np.ndarray:
    """Each unit gets at least ``share`` of its best neighbour's score."""
    if share <= 0 or scores.size < 2:
        return scores
    neighbours = np.zeros_like(scores)
    neighbours[1:] = scores[:-1]
    neighbours[:-1] = np.maximum(neighbours[:-1], scores[1:])
    return np.maximum(scores, share * neighbours)
