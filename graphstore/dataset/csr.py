"""Building a CSR from edge batches streamed twice, in bounded memory (pure numpy).

Pass 1 adds each batch's row keys to a degree array (:func:`count_rows`); ``indptr`` is its
prefix sum (:func:`indptr_of`); pass 2 places every element of a batch at ``cursor[row] + rank``
(rank: its position among the batch's elements of that row; :func:`scatter_positions`) and
advances ``cursor``. Batches read in edge id order therefore leave each row's elements in edge id
order. Memory: the degree / cursor arrays (one int64 per row) and one batch; no Python loop per
edge. Used by the storage partition loader (graphstore.dataset.partition_graph) and the graph-file
writer of replicated mode (graphstore.modes.replicated.writer).
"""

from __future__ import annotations

import numpy as np

_BINCOUNT_ROWS_PER_KEY = 8
"""Above this many rows per key, a batch's counts come from its sorted keys, not a bincount
over every row (whose cost grows with the rows, not with the batch)."""


def count_rows(keys: np.ndarray, degree: np.ndarray) -> None:
    """``degree[k] += (number of times k occurs in keys)``, in place."""
    if not len(keys):
        return
    if len(degree) > _BINCOUNT_ROWS_PER_KEY * len(keys):
        uniq, counts = np.unique(keys, return_counts=True)
        degree[uniq] += counts
    else:
        degree += np.bincount(keys, minlength=len(degree))


def indptr_of(degree: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``[0, d0, d0+d1, ...]``: int64, one longer than ``degree`` (written into ``out`` when
    given: an int64 array of that length)."""
    if out is None:
        out = np.zeros(len(degree) + 1, dtype=np.int64)
    out[0] = 0
    np.cumsum(degree, out=out[1:])
    return out


def scatter_positions(keys: np.ndarray, cursor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, positions)``: element ``order[i]`` of the batch goes to ``positions[i]``.

    Stable: elements of one row keep their batch order. ``cursor[k]`` (the next free slot of
    row k) is advanced by the count of k in ``keys``."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    uniq, first, counts = np.unique(sorted_keys, return_index=True, return_counts=True)
    rank = np.arange(len(sorted_keys), dtype=np.int64) - np.repeat(first, counts)
    positions = cursor[sorted_keys] + rank
    cursor[uniq] += counts
    return order, positions
