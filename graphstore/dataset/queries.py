"""Questions storage state answers: node ids, split anchors and their labels.

Pure functions of a :class:`~graphstore.dataset.partition_graph.StorageState`, which
graphstore.dataset.service turns into replies of the storage protocol (over RPC in graph-store
mode, in-process in colocated mode). The state's arrays are shared-memory tensors; these
functions read them as numpy views and return new arrays (a reply never aliases the state).
Slicing rule:
slice ``rank`` of ``world_size`` is the contiguous range ``[rank*n//w, (rank+1)*n//w)`` of the
sorted ids, so the slices of all ranks cover every id exactly once.
"""

from __future__ import annotations

import numpy as np
import torch

from graphstore.dataset.ablp import ABLPInputNodes
from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError
from graphstore.dataset.partition_graph import StorageState, Supervision


def contiguous_slice(values: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Slice ``rank`` of ``world_size`` of ``values`` (see the module docs)."""
    if not 0 <= rank < world_size:
        raise UsageError(f"rank {rank} is not in [0, {world_size})")
    n = len(values)
    return values[rank * n // world_size:(rank + 1) * n // world_size]


def split_anchors(sup: Supervision, split: str | None) -> np.ndarray:
    key = split or "all"
    if key not in sup.anchors_by_split:
        raise UsageError(f"storage has no {split!r} split: set storageArgs.splitter_cls_path "
                         "(e.g. graphstore.DistNodeAnchorLinkSplitter) in the stage's storage config")
    return sup.anchors_by_split[key].numpy()


def node_ids(s: StorageState, rank: int, world_size: int, node_type: str,
             split: str | None) -> torch.Tensor:
    """Owned ids of ``node_type`` (or its anchors in ``split``), slice ``rank`` of ``world_size``."""
    if split is None:
        if node_type not in s.owned_ranges:
            raise UsageError(f"unknown node type {node_type!r} (have {list(s.owned_ranges)})")
        lo, hi = s.owned_ranges[node_type]
        n = hi - lo
        if not 0 <= rank < world_size:
            raise UsageError(f"rank {rank} is not in [0, {world_size})")
        return torch.arange(lo + rank * n // world_size, lo + (rank + 1) * n // world_size)
    else:
        sups = [v for et, v in s.supervision.items() if et.src_node_type == node_type]
        if not sups:
            raise UsageError(f"node_ids(split={split!r}): {node_type!r} anchors no supervision edge type")
        ids = np.unique(np.concatenate([split_anchors(v, split) for v in sups]))
    return torch.from_numpy(np.ascontiguousarray(contiguous_slice(ids, rank, world_size)))


def supervision(s: StorageState, supervision_edge_type: EdgeType) -> Supervision:
    """The labels of ``supervision_edge_type``; UsageError naming the choices otherwise."""
    if supervision_edge_type not in s.supervision:
        raise UsageError(f"{supervision_edge_type} is not a supervision edge type "
                         f"(have {[str(et) for et in s.supervision]})")
    return s.supervision[supervision_edge_type]


def _runs(sup: Supervision, split: str | None) -> list[tuple[int, int]]:
    """The row ranges holding the labels of ``split`` (None: every split), each ascending by
    anchor (``Supervision``'s row order)."""
    if split is not None and split in sup.split_rows:
        return [sup.split_rows[split]]
    return sup.sorted_runs


def labels_of(sup: Supervision, anchors: np.ndarray, split: str | None = None) -> np.ndarray:
    """``[2, P]`` (anchor, label) pairs of the given owned anchors (sorted anchors in, sorted
    out; within one anchor, by split, then file order). Only the pairs of ``split`` when it is
    given and the storage has splits; every pair otherwise."""
    src = sup.anchor_src.numpy()
    parts = []
    for start, end in _runs(sup, split):
        run = src[start:end]
        lo = np.searchsorted(run, anchors, side="left")
        counts = np.searchsorted(run, anchors, side="right") - lo
        offsets = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        parts.append(start + np.arange(int(counts.sum()), dtype=np.int64) + offsets)
    rows = np.concatenate(parts)
    if len(parts) > 1:
        rows = rows[np.argsort(src[rows], kind="stable")]
    return _pairs(sup, rows)


def _pairs(sup: Supervision, rows: np.ndarray | slice) -> np.ndarray:
    """``[2, len(rows)]`` int64 (anchor, label) of the given label rows (indices, or a slice:
    one range), written straight into the one array returned."""
    src, dst = sup.anchor_src.numpy(), sup.label_dst.numpy()
    if isinstance(rows, slice):  # two views, one copy
        return np.stack([src[rows], dst[rows]])
    out = np.empty((2, len(rows)), dtype=np.int64)
    np.take(src, rows, out=out[0])
    np.take(dst, rows, out=out[1])
    return out


def ablp_rows(s: StorageState, split: str | None, rank: int, world_size: int,
              supervision_edge_type: EdgeType) -> tuple[int, int] | None:
    """``[start, end)``: the label rows whose pairs :func:`ablp_input` returns for these arguments,
    in the same order, when they are one range (a split of a storage with splits, or every
    label of one without); None otherwise (every split of a storage with splits)."""
    sup = supervision(s, supervision_edge_type)
    runs = _runs(sup, split)
    anchors = contiguous_slice(split_anchors(sup, split), rank, world_size)
    if len(runs) != 1:
        return None
    start, end = runs[0]
    if not len(anchors):
        return start, start
    run = sup.anchor_src.numpy()[start:end]
    return (start + int(np.searchsorted(run, anchors[0], side="left")),
            start + int(np.searchsorted(run, anchors[-1], side="right")))


def ablp_input(s: StorageState, split: str | None, rank: int, world_size: int,
               supervision_edge_type: EdgeType) -> ABLPInputNodes:
    """Anchors of ``split`` (slice ``rank`` of ``world_size``) with their positive labels (of
    that split when the storage has splits) and, when the supervision type has hard negatives,
    their negative labels (``[2, N]`` (anchor, node) pairs sorted by anchor, of that split
    likewise; an anchor may have none)."""
    sup = supervision(s, supervision_edge_type)
    anchors = np.array(contiguous_slice(split_anchors(sup, split), rank, world_size))  # a copy
    et = supervision_edge_type
    rows = ablp_rows(s, split, rank, world_size, et)  # one range: copied once, nothing else
    pairs = labels_of(sup, anchors, split) if rows is None else _pairs(sup, slice(*rows))
    negatives = {}
    if et in s.negatives:
        negatives[et.as_tuple()] = torch.from_numpy(labels_of(s.negatives[et], anchors, split))
    return ABLPInputNodes(anchor_node_type=et.src_node_type, anchor_nodes=torch.from_numpy(anchors),
                          positive_labels={et.as_tuple(): torch.from_numpy(pairs)},
                          negative_labels=negatives)


def positive_pairs_to(s: StorageState, supervision_edge_type: EdgeType,
                      label_ids: np.ndarray) -> torch.Tensor:
    """``[2, K]`` (anchor, label) pairs of every split whose label is in ``label_ids``, for the
    anchors this partition owns: what a filtered evaluation skips among its candidates."""
    sup = supervision(s, supervision_edge_type)
    rows = np.flatnonzero(np.isin(sup.label_dst.numpy(), label_ids))
    return torch.from_numpy(_pairs(sup, rows))


def labels_for(s: StorageState, supervision_edge_type: EdgeType, anchors: np.ndarray) -> np.ndarray:
    """``[2, P]`` (anchor, label) pairs of every split for ``anchors``, which must be anchors this
    partition owns (UsageError otherwise)."""
    sup = supervision(s, supervision_edge_type)
    owned = np.sort(anchors)
    if len(owned) and not np.isin(owned, sup.anchors_by_split["all"].numpy()).all():
        raise UsageError(f"partition {s.partition} does not own some of the given "
                         f"{supervision_edge_type} anchors")
    return labels_of(sup, owned)
