"""Build one storage partition: shard files -> GLT ``DistDataset`` + the storage-side state.

Order (docs/runtime.md, "Graph-store sessions"; once per storage machine, before any session):
  1. per supervision edge type (and per hard-negative type): its labels, grouped by their split,
     sorted by anchor within a split (graphstore.dataset.splitter.SplitRules: node-based, by the
     anchor, or per edge; the hard negatives of a supervision type split with their anchor, or
     per edge by the hash of their own edge type, anchor and node);
  2. per edge type of the message-passing graph: the adjacency GLT samples from, one row per
     anchor (CSR for ``out`` sampling, CSC for ``in``), without the val/test supervision edges
     (all supervision edges when ``should_convert_labels_to_edges`` is false), forward and
     reverse types alike, so evaluation never samples the edge it is asked to predict;
  3. per node type with features: the float32 feature matrix of the partition's range;
  4. the GLT ``DistDataset`` on CPU (``graph_mode='CPU'``), its partition books the ranges of
     the shard format (``P + 1`` bounds per type, graphstore.dataset.glt_adapter.range_partition_book),
     its feature rows the range's ids minus the range's start.

Steps 1-3 need torch only (:func:`load_partition_graph`: a :class:`PartitionGraph` of tensors);
step 4 needs GLT (:func:`glt_dataset`). A storage machine's main process does 1-3 and hands the
tensors to each session process, which does 4: the main process never imports GLT and PyG (a
few hundred MB and ~2 s of CPU saved per storage machine). :func:`build_storage_dataset` does all
four (colocated mode, tests).

Memory (the scale rules of DESIGN 6b): everything is built from files streamed in batches of
:data:`STREAM_ROWS` rows, each read twice (count, then place: graphstore.dataset.csr), straight into the
arrays that stay: per stored edge its neighbour and its edge id (16 B), per label its anchor and
node (16 B), per feature value 4 B, per node of the
partition a few int64 (the adjacency's row pointer and a write cursor while it is built). Nothing
is held per node of the whole graph: the row pointer GLT 0.2.4 needs is indexed by global id, so
its rows below the partition's range are left as a hole of a sparse shared-memory file (never
written, never resident: graphstore.dataset.glt_adapter.shared_zeros). Arrays GLT reads are allocated in
shared memory, so the session process and its sampling workers map the same pages (GLT copies a
tensor into shared memory unless it already is).

The returned :class:`StorageState` is what a partition answers the storage protocol from
(graphstore.dataset.service: splits, labels, node ids, the graph's ``DatasetMetadata``, built here
from the manifest, where its edge type names are parsed); its arrays are shared-memory torch
tensors too, so they pickle into each spawned session process as handles, not copies.
"""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import torch

from graphstore.dataset import glt_adapter
from graphstore.config import EdgeType, StorageArgs
from graphstore.dataset.csr import count_rows, indptr_of, scatter_positions
from graphstore.dataset.metadata import DatasetMetadata
from graphstore.runtime.errors import UsageError
from graphstore.formats.shards.format import Manifest, edge_dir, label_dir, node_dir
from graphstore.formats.shards.reader import ShardFormatError, ShardSet, column_numpy
from graphstore.dataset.splitter import SPLITS, DistNodeAnchorLinkSplitter, SplitRules

log = logging.getLogger(__name__)
STREAM_ROWS = 1 << 20
"""Rows per batch when a partition's edge and label files are streamed (two int64 columns:
16 MiB)."""
STREAM_BYTES = 1 << 20
"""Bytes per batch when node feature files are streamed: ``STREAM_BYTES // row bytes`` rows (a
row of 128 float32 features is 520 B: ~2 k rows per batch). 16 MiB batches held ~40 MiB more at
the load's peak than 1 MiB ones, in the same time (graphstore.partition.edge_stream,
``ROW_GROUP_BYTES``)."""


@dataclass(frozen=True)
class Supervision:
    """The labels of one supervision (or hard-negative) edge type whose anchors this partition
    owns. Tensors are int64, in shared memory; ``numpy()`` views them.

    Row order: grouped by split (train, val, test; one group without a splitter), ascending
    anchor within a group, file order within one anchor. ``split_rows[s]`` is the ``[start, end)``
    of split ``s``'s rows (only with a splitter); ``split_rows["all"]`` is every row. So the
    labels of one split's contiguous slice of anchors (``fetch_ablp_input``'s share of a rank) are
    one contiguous range of rows (graphstore.dataset.queries.ablp_rows), copied out once."""

    edge_type: EdgeType
    anchor_src: torch.Tensor  # anchor of each label row (see the row order above)
    label_dst: torch.Tensor  # label node of each row
    anchors_by_split: dict[str, torch.Tensor]  # "all" / "train" / "val" / "test" -> ascending, unique
    split_rows: dict[str, tuple[int, int]]  # "all" and, with a splitter, each split -> [start, end)

    @property
    def sorted_runs(self) -> list[tuple[int, int]]:
        """The row ranges each sorted by anchor: one per split group (or the one group)."""
        runs = [self.split_rows[s] for s in SPLITS if s in self.split_rows]
        return runs or [self.split_rows["all"]]


@dataclass(frozen=True)
class StorageState:
    """What one partition answers from (graphstore.dataset.queries): the graph's metadata, the
    range of ids it owns per node type, its supervision labels and splits. Keys are node type
    names and ``EdgeType`` values; ``supervision`` has a key for each of
    ``metadata.supervision_edge_types``."""

    partition: int
    metadata: DatasetMetadata
    owned_ranges: dict[str, tuple[int, int]]  # node type -> [start, end) of its dense ids here
    supervision: dict[EdgeType, Supervision]
    edge_counts: dict[EdgeType, int] = field(default_factory=dict)  # after split filtering
    negatives: dict[EdgeType, Supervision] = field(default_factory=dict)
    """Hard negatives per supervision edge type (keys of ``metadata.hard_negative_edge_types``):
    the negative type's (anchor, node) rows, split like the supervision type's labels."""

    def owned_ids(self, node_type: str) -> np.ndarray:
        """The dense ids of ``node_type`` this partition owns (its range), ascending."""
        lo, hi = self.owned_ranges[node_type]
        return np.arange(lo, hi, dtype=np.int64)


def load_splitter(args: StorageArgs) -> DistNodeAnchorLinkSplitter | None:
    """Instantiate ``splitter_cls_path(**splitter_kwargs)``; ``None`` when no splitter is set."""
    if not args.splitter_cls_path:
        return None
    module_name, _, cls_name = args.splitter_cls_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UsageError(f"storageArgs.splitter_cls_path {args.splitter_cls_path!r} cannot be "
                         f"imported: {exc}") from None
    try:
        return cls(**dict(args.splitter_kwargs))
    except TypeError as exc:
        raise UsageError(f"storageArgs.splitter_kwargs do not fit {args.splitter_cls_path}: {exc}") from None


# -- streaming a partition's files ----------------------------------------------------------------
def _pairs(shards: ShardSet, rel_dir: str, columns: tuple[str, str],
           verify: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(a, b)`` int64 arrays of two columns of the files under ``rel_dir``, batch by batch, in
    file order (the order edge ids follow)."""
    for batch in shards.stream_dir(rel_dir, list(columns), batch_rows=STREAM_ROWS, verify=verify):
        yield column_numpy(batch.column(0), np.int64), column_numpy(batch.column(1), np.int64)


def _shared_numpy(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, np.ndarray]:
    tensor = glt_adapter.shared_zeros(shape, dtype)
    return tensor, tensor.numpy()


def _local_rows(keys: np.ndarray, lo: int, hi: int, where: str) -> np.ndarray:
    """``keys - lo``, checked to lie in the partition's range ``[lo, hi)``."""
    if len(keys) and (keys.min() < lo or keys.max() >= hi):
        raise ShardFormatError(f"{where}: a row's anchor is outside the partition's range "
                               f"[{lo}, {hi}); re-partition")
    return keys - lo


@dataclass(frozen=True)
class _Adjacency:
    """One edge type's rows for GLT: ``indptr`` over global anchor ids (rows below the range a
    hole), ``indices`` the other endpoint of each edge, ``eids`` its edge id."""

    indptr: torch.Tensor
    indices: torch.Tensor
    eids: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.indices.numel())


def _adjacency(shards: ShardSet, partition: int, name: str, rules: SplitRules | None
               ) -> _Adjacency:
    """The adjacency of edge type ``name`` in ``partition`` (module docs, step 2)."""
    m = shards.manifest
    info = m.edge_types[name]
    anchor_is_dst = m.sample_edge_direction == "in"
    anchor_type = info.dst_node_type if anchor_is_dst else info.src_node_type
    lo, hi = m.node_bounds(anchor_type)[partition:partition + 2]
    rel = edge_dir(partition, name)
    where = f"{shards.source_uri}/{rel}"
    degree = np.zeros(hi - lo, dtype=np.int64)
    rows_read = 0
    for src, dst in _pairs(shards, rel, ("src", "dst"), verify=True):  # pass 1: degrees
        keep = rules.keep(name, src, dst) if rules is not None else None
        anchors = dst if anchor_is_dst else src
        count_rows(_local_rows(anchors if keep is None else anchors[keep], lo, hi, where), degree)
        rows_read += len(src)
    if rows_read != info.counts_per_partition[partition]:
        raise ShardFormatError(f"{where}: {rows_read} rows, manifest says "
                               f"{info.counts_per_partition[partition]}")
    indptr, indptr_np = _shared_numpy((hi + 1,), torch.int64)
    indptr_of(degree, out=indptr_np[lo:])  # indptr[lo] = 0; rows below lo: the hole
    kept = int(indptr_np[hi])
    cursor = indptr_np[lo:hi].copy()
    del degree
    indices, indices_np = _shared_numpy((kept,), torch.int64)
    eids, eids_np = _shared_numpy((kept,), torch.int64)
    next_id = m.edge_id_base(name, partition)
    for src, dst in _pairs(shards, rel, ("src", "dst"), verify=False):  # pass 2: place
        ids = np.arange(next_id, next_id + len(src), dtype=np.int64)
        next_id += len(src)
        keep = rules.keep(name, src, dst) if rules is not None else None
        if keep is not None:
            src, dst, ids = src[keep], dst[keep], ids[keep]
        anchors, others = (dst, src) if anchor_is_dst else (src, dst)
        order, pos = scatter_positions(anchors - lo, cursor)
        indices_np[pos] = others[order]
        eids_np[pos] = ids[order]
    return _Adjacency(indptr, indices, eids)


def _labels(shards: ShardSet, partition: int, name: str, rules: SplitRules | None,
            per_edge_split: bool) -> Supervision:
    """The labels of supervision (or hard-negative) type ``name`` that ``partition`` holds, in
    :class:`Supervision`'s row order (module docs, step 1); from its own label files, or from the
    reverse type's edges flipped (``labels_from``).

    Two passes over the files (graphstore.dataset.csr). A row's key is its anchor's slot: the
    anchor's offset in the partition's range (no splitter, or a node-based one: an anchor's rows
    all share its split, and the slots are laid out split group by split group), or its split
    code times the range size plus that offset (per-edge splits: each split group has a slot for
    every anchor). Memory beyond the rows themselves: a few int64 per node of the range (three
    per node for per-edge splits) and one batch."""
    m = shards.manifest
    info = m.edge_types[name]
    et = EdgeType.parse(name)
    if info.labels_from:  # the reverse type's (src, dst) are (label, anchor)
        rel, columns = edge_dir(partition, info.labels_from), ("dst", "src")
    else:
        rel, columns = label_dir(partition, name), ("src", "dst")
    lo, hi = m.node_bounds(info.src_node_type)[partition:partition + 2]
    n, where = hi - lo, f"{shards.source_uri}/{rel}"
    edge_codes = rules is not None and per_edge_split
    groups = 1 if rules is None else len(SPLITS)

    def keys(anchors: np.ndarray, labels: np.ndarray) -> np.ndarray:
        local = _local_rows(anchors, lo, hi, where)
        if not edge_codes:
            return local
        return rules.label_codes(name, anchors, labels).astype(np.int64) * n + local

    counts = np.zeros(groups * n if edge_codes else n, dtype=np.int64)
    for anchors, labels in _pairs(shards, rel, columns, verify=True):  # pass 1
        count_rows(keys(anchors, labels), counts)
    total = int(counts.sum())
    if total != info.labels_per_partition[partition]:
        raise ShardFormatError(f"{where}: {total} label rows, manifest says "
                               f"{info.labels_per_partition[partition]}")
    anchor_src, anchor_np = _shared_numpy((total,), torch.int64)
    anchor_codes = (rules.range_codes(name, lo, hi) if rules is not None and not edge_codes
                    else None)
    cursor, split_rows, by_split = _lay_out_rows(counts, lo, hi, groups, edge_codes, anchor_codes,
                                                 anchor_np)
    del anchor_codes
    label_dst, label_np = _shared_numpy((total,), torch.int64)
    for anchors, labels in _pairs(shards, rel, columns, verify=False):  # pass 2
        order, pos = scatter_positions(keys(anchors, labels), cursor)
        label_np[pos] = labels[order]
    return Supervision(et, anchor_src, label_dst,
                       {k: _shared_copy(v) for k, v in by_split.items()}, split_rows)


def _lay_out_rows(counts: np.ndarray, lo: int, hi: int, groups: int, slot_per_group: bool,
                  anchor_codes: np.ndarray | None, anchor_np: np.ndarray
                  ) -> tuple[np.ndarray, dict[str, tuple[int, int]], dict[str, np.ndarray]]:
    """Place the slots of :func:`_labels` group by group: ``(cursor, split_rows, by_split)``,
    the first row of every slot, each split's rows and its anchors (and "all"); fills
    ``anchor_np`` (the anchor of every row). ``counts``: rows per slot, ``groups`` x the range
    when ``slot_per_group`` (per-edge splits), else one per anchor of the range, whose group is
    then ``anchor_codes`` (None: one group, and no split is named)."""
    n = hi - lo
    ids = np.arange(lo, hi, dtype=np.int64)
    cursor = np.empty_like(counts)
    split_rows, by_split, start = {"all": (0, int(counts.sum()))}, {}, 0
    for code in range(groups):
        if slot_per_group:
            sel: slice | np.ndarray = slice(code * n, (code + 1) * n)
            degree, anchors_here = counts[sel], ids
        else:
            sel = slice(None) if anchor_codes is None else anchor_codes == code
            degree, anchors_here = counts[sel], ids[sel]
        cursor[sel] = start + indptr_of(degree)[:-1]
        end = start + int(degree.sum())
        anchor_np[start:end] = np.repeat(anchors_here, degree)
        if groups > 1:
            split_rows[SPLITS[code]] = (start, end)
            by_split[SPLITS[code]] = anchors_here[degree > 0]
        start = end
    by_split["all"] = ids[counts.reshape(-1, n).any(axis=0)] if n else ids
    return cursor, split_rows, by_split


def _shared_copy(values: np.ndarray) -> torch.Tensor:
    tensor, out = _shared_numpy(values.shape, torch.from_numpy(values[:0]).dtype)
    out[...] = values
    return tensor


def _features(shards: ShardSet, partition: int, node_type: str) -> torch.Tensor:
    """float32 ``[range size, dim]``: row ``i`` is the feature row of dense id ``start + i``
    (module docs, step 3); each id of the range exactly once in the node files."""
    m = shards.manifest
    dim = m.node_types[node_type].feature_dim
    lo, hi = m.node_bounds(node_type)[partition:partition + 2]
    rel = node_dir(partition, node_type)
    where = f"{shards.source_uri}/{rel}"
    feats, out = _shared_numpy((hi - lo, dim), torch.float32)
    seen = np.zeros(hi - lo, dtype=bool)
    columns = ["int_id", *(f"f_{i}" for i in range(dim))]
    batch_rows = max(1, min(STREAM_ROWS, STREAM_BYTES // (8 + 4 * dim)))
    for batch in shards.stream_dir(rel, columns, batch_rows=batch_rows, verify=True):
        rows = _local_rows(column_numpy(batch.column(0), np.int64), lo, hi, where)
        if seen[rows].any() or len(np.unique(rows)) != len(rows):
            raise ShardFormatError(f"{where}: a node id appears twice; re-partition")
        seen[rows] = True
        for i in range(dim):
            out[rows, i] = column_numpy(batch.column(i + 1), np.float32)
    if not seen.all():
        raise ShardFormatError(f"{where}: {int((~seen).sum())} node(s) of the partition's range "
                               f"[{lo}, {hi}) have no feature row; re-partition")
    return feats


@dataclass(frozen=True)
class PartitionGraph:
    """The tensors of one partition GLT serves from (steps 2 and 3), GLT not imported: built by
    :func:`load_partition_graph`, turned into GLT's dataset by :func:`glt_dataset`. Pickles as
    shared-memory handles."""

    partition: int
    num_partitions: int
    edge_dir: str
    node_bounds: dict[str, tuple[int, ...]]  # node type -> P + 1 range bounds
    adjacency: dict[EdgeType, _Adjacency]
    features: dict[str, torch.Tensor]  # node types with features -> [range size, dim] float32
    homogeneous: bool


def _supervisions(shards: ShardSet, partition: int, meta: DatasetMetadata,
                  splitter: DistNodeAnchorLinkSplitter | None
                  ) -> tuple[dict[EdgeType, Supervision], dict[EdgeType, Supervision]]:
    """Labels of every supervision type, and the hard negatives of each (keyed by the
    supervision type they serve)."""
    rules = SplitRules(splitter, shards.manifest) if splitter is not None else None
    per_edge = splitter is not None and splitter.per_edge
    sup = {et: _labels(shards, partition, str(et), rules, per_edge)
           for et in meta.supervision_edge_types}
    neg = {s: _labels(shards, partition, str(n), rules, per_edge)
           for s, n in meta.hard_negative_edge_types.items()}
    return sup, neg


def build_storage_dataset(shards: ShardSet, partition: int, storage_args: StorageArgs,
                          sample_edge_direction: str):
    """Return ``(glt DistDataset, StorageState)`` for one partition (see module docs)."""
    graph, state = load_partition_graph(shards, partition, storage_args, sample_edge_direction)
    return glt_dataset(graph), state


def load_partition_graph(shards: ShardSet, partition: int, storage_args: StorageArgs,
                         sample_edge_direction: str) -> tuple[PartitionGraph, StorageState]:
    """Steps 1-3 of the module docs for one partition: ``(PartitionGraph, StorageState)``."""
    t0 = time.perf_counter()
    m: Manifest = shards.manifest
    if m.sample_edge_direction != sample_edge_direction:
        raise UsageError(
            f"shards at {shards.source_uri} were partitioned for sample_edge_direction "
            f"{m.sample_edge_direction!r} but storageArgs say {sample_edge_direction!r}; re-partition")
    if not 0 <= partition < m.num_partitions:
        raise ShardFormatError(f"partition {partition} does not exist in {shards.source_uri} (it "
                               f"has {m.num_partitions}: 0..{m.num_partitions - 1})")
    splitter = load_splitter(storage_args)
    meta = DatasetMetadata.from_manifest(m, has_splits=splitter is not None)
    supervision, negatives = _supervisions(shards, partition, meta, splitter)
    rules = SplitRules(splitter, m) if splitter is not None else None
    graph = {et: _adjacency(shards, partition, str(et), rules) for et in meta.edge_types}
    feats = {nt: _features(shards, partition, nt) for nt in m.node_types
             if m.node_types[nt].feature_dim}
    bounds = {nt: m.node_bounds(nt)[partition:partition + 2] for nt in m.node_types}
    state = StorageState(
        partition=partition, metadata=meta,
        owned_ranges={nt: (int(lo), int(hi)) for nt, (lo, hi) in bounds.items()},
        supervision=supervision, edge_counts={et: a.count for et, a in graph.items()},
        negatives=negatives)
    log.info("partition=%d loaded edges=%d nodes=%d labels=%d splits=%s seconds=%.2f", partition,
             sum(a.count for a in graph.values()), sum(hi - lo for lo, hi in bounds.values()),
             sum(s.anchor_src.numel() for s in supervision.values()), meta.has_splits,
             time.perf_counter() - t0)
    return PartitionGraph(partition=partition, num_partitions=m.num_partitions,
                          edge_dir=sample_edge_direction,
                          node_bounds={nt: m.node_bounds(nt) for nt in m.node_types},
                          adjacency=graph, features=feats,
                          homogeneous=meta.is_homogeneous), state


def glt_dataset(graph: PartitionGraph):
    """Step 4 of the module docs: GLT's ``DistDataset`` over ``graph``'s tensors (no copy)."""
    from graphlearn_torch.distributed import DistDataset

    glt_adapter.skip_column_count()  # else GLT sorts every edge type's columns to count them
    glt_adapter.slice_seed_batches()  # else GLT batches seeds one 0-d tensor at a time
    glt_adapter.gather_feature_rows()  # index_select: ~3x faster than GLT's advanced indexing
    p = graph.partition
    node_pb = {nt: glt_adapter.range_partition_book(b, p) for nt, b in graph.node_bounds.items()}
    layout = "CSC" if graph.edge_dir == "in" else "CSR"
    edge_index = {et.as_tuple(): ((a.indices, a.indptr) if layout == "CSC" else
                                  (a.indptr, a.indices)) for et, a in graph.adjacency.items()}
    edge_ids = {et.as_tuple(): a.eids for et, a in graph.adjacency.items()}
    feats = graph.features
    ds = DistDataset(num_partitions=graph.num_partitions, partition_idx=p, edge_dir=graph.edge_dir)
    if graph.homogeneous:
        ((nt,), (et,)) = graph.node_bounds, edge_index
        ds.init_graph(edge_index=edge_index[et], edge_ids=edge_ids[et], layout=layout,
                      graph_mode="CPU", directed=True)
        ds.node_pb = node_pb[nt]
        if feats:
            ds.init_node_features(feats[nt], node_pb[nt].id2index, with_gpu=False)
    else:
        ds.init_graph(edge_index=edge_index, edge_ids=edge_ids, layout=layout, graph_mode="CPU",
                      directed=True)
        ds.node_pb = node_pb
        if feats:
            ds.init_node_features(feats, {nt: node_pb[nt].id2index for nt in feats},
                                  with_gpu=False)
        glt_adapter.set_no_node_labels(ds)
    return ds

