"""Build one storage partition: shard files -> GLT ``DistDataset`` + the storage-side state.

Order (docs/runtime.md, "Graph-store sessions"; once per storage machine, before any session):
  1. read and verify the partition's shard files (graphstore.shards.reader);
  2. if ``storageArgs.splitter_cls_path`` names a splitter, split every supervision anchor
     (node-based) or every supervision edge (``per_edge`` splitters), hash-deterministic
     (graphstore.splitter), and remove the val/test supervision edges from the message-passing
     graph (all supervision edges when ``should_convert_labels_to_edges`` is false), forward and
     reverse types alike, so evaluation never samples the edge it is asked to predict; the hard
     negatives of a supervision type (``hardNegativeEdgeTypes``: labels only, never in the graph)
     are split by the same rule: with their anchor (node-based), or per edge by the same hash of
     (their own edge type, anchor, node);
  3. build the GLT ``DistDataset`` on CPU (``graph_mode='CPU'``, features without GPU).

The returned :class:`StorageState` is what a partition answers the storage protocol from
(graphstore.storage.service: splits, labels, node ids, the graph's ``DatasetMetadata``, built here
from the manifest, where its edge type names are parsed); it is plain numpy and frozen values and
pickles into each spawned session process.
"""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from graphstore import glt_adapter
from graphstore.config import EdgeType, StorageArgs
from graphstore.dataset_metadata import DatasetMetadata
from graphstore.errors import UsageError
from graphstore.shards.reader import PartitionData, ShardSet
from graphstore.splitter import SPLIT_CODE, DistNodeAnchorLinkSplitter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Supervision:
    """The labels of one supervision edge type whose anchors this partition owns."""

    edge_type: EdgeType
    anchor_src: np.ndarray  # int64 anchors, sorted ascending (one row per positive label)
    label_dst: np.ndarray  # int64 label nodes, aligned with anchor_src
    anchors_by_split: dict[str, np.ndarray]  # "all" / "train" / "val" / "test" -> sorted unique
    label_split: np.ndarray | None = None  # per-edge splits: int8 split code of each label row


@dataclass(frozen=True)
class StorageState:
    """What one partition answers from (graphstore.storage.queries): the graph's metadata, the
    ids it owns, its supervision labels and splits. Keys are node type names and ``EdgeType``
    values; ``supervision`` has a key for each of ``metadata.supervision_edge_types``."""

    partition: int
    metadata: DatasetMetadata
    owned_nodes: dict[str, np.ndarray]  # sorted dense ids this partition owns, per node type
    supervision: dict[EdgeType, Supervision]
    edge_counts: dict[EdgeType, int] = field(default_factory=dict)  # after split filtering
    negatives: dict[EdgeType, Supervision] = field(default_factory=dict)
    """Hard negatives per supervision edge type (keys of ``metadata.hard_negative_edge_types``):
    the negative type's (anchor, node) rows, split like the supervision type's labels."""


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


def _supervision(data: PartitionData, et: EdgeType, splitter: DistNodeAnchorLinkSplitter | None,
                 node_counts: Mapping[str, int], num_edges: int) -> Supervision:
    """The labels of ``et`` (a supervision or a hard-negative type) sorted by anchor, and their
    split: per edge by the hash of (``et``, anchor, node), or per anchor by the anchor node type's
    hash, which a negative type shares with its supervision type (same anchors, same split)."""
    lab = data.labels[str(et)]
    order = np.argsort(lab.src, kind="stable")
    src, dst = lab.src[order], lab.dst[order]
    anchors = np.unique(src)
    by_split = {"all": anchors}
    label_split = None
    if splitter is not None and splitter.per_edge:
        label_split = splitter.assign_edges(str(et), src, dst, num_edges)
        for name, code in SPLIT_CODE.items():
            by_split[name] = np.unique(src[label_split == code])
    elif splitter is not None:
        codes = splitter.assign(et.src_node_type, anchors, node_counts[et.src_node_type])
        for name, code in SPLIT_CODE.items():
            by_split[name] = anchors[codes == code]
    return Supervision(et, src, dst, by_split, label_split)


def _negatives(data: PartitionData, manifest, meta: DatasetMetadata,
               splitter: DistNodeAnchorLinkSplitter | None) -> dict[EdgeType, Supervision]:
    """Hard negatives per supervision type (module docs, step 2); an integer ``num_val`` /
    ``num_test`` of a per-edge splitter counts over the negative type's own rows."""
    out = {}
    for sup, neg in meta.hard_negative_edge_types.items():
        rows = sum(manifest.edge_types[str(neg)].labels_per_partition or ())
        out[sup] = _supervision(data, neg, splitter, meta.node_counts, rows)
    return out


def _keep_mask(data: PartitionData, et: EdgeType, reverse_of: EdgeType | None,
               splitter: DistNodeAnchorLinkSplitter, node_counts: Mapping[str, int],
               num_edges: int) -> np.ndarray:
    """Which edges of a supervision type (or of ``reverse_of``'s reverse type ``et``) stay in
    the message-passing graph."""
    edges = data.edges[str(et)]
    base = reverse_of or et
    anchors, labels = (edges.dst, edges.src) if reverse_of else (edges.src, edges.dst)
    if not splitter.should_convert_labels_to_edges:
        return np.zeros(len(anchors), dtype=bool)
    if splitter.per_edge:
        codes = splitter.assign_edges(str(base), anchors, labels, num_edges)
    else:
        codes = splitter.assign(base.src_node_type, anchors, node_counts[base.src_node_type])
    return codes == SPLIT_CODE["train"]


def build_storage_dataset(shards: ShardSet, partition: int, storage_args: StorageArgs,
                          sample_edge_direction: str):
    """Return ``(glt DistDataset, StorageState)`` for one partition (see module docs)."""
    import torch
    from graphlearn_torch.distributed import DistDataset

    glt_adapter.check_glt_version()
    t0 = time.perf_counter()
    m = shards.manifest
    if m.sample_edge_direction != sample_edge_direction:
        raise UsageError(
            f"shards at {shards.source_uri} were partitioned for sample_edge_direction "
            f"{m.sample_edge_direction!r} but storageArgs say {sample_edge_direction!r}; re-partition")
    data = shards.load_partition(partition)
    splitter = load_splitter(storage_args)
    meta = DatasetMetadata.from_manifest(m, has_splits=splitter is not None)
    supervision = {et: _supervision(data, et, splitter, meta.node_counts, meta.edge_count(et))
                   for et in meta.supervision_edge_types}
    edge_index, edge_ids, edge_counts = {}, {}, {}
    for et in meta.edge_types:
        info = m.edge_types[str(et)]
        reverse_of = EdgeType.parse(info.reverse_of) if info.reverse_of else None
        e = data.edges[str(et)]
        src, dst, eids = e.src, e.dst, e.eids
        if splitter is not None and (et in supervision or reverse_of in supervision):
            keep = _keep_mask(data, et, reverse_of, splitter, meta.node_counts,
                              meta.edge_count(reverse_of or et))
            src, dst, eids = src[keep], dst[keep], eids[keep]
        edge_index[et.as_tuple()] = torch.from_numpy(np.stack([src, dst]))
        edge_ids[et.as_tuple()] = torch.from_numpy(eids)
        edge_counts[et] = int(len(src))
    # one range of ids per partition: P + 1 bounds per type, rows offset by the range's start
    node_pb = {nt: glt_adapter.range_partition_book(m.node_bounds(nt), partition)
               for nt in m.node_types}
    feats, id2idx = {}, {}
    for nt, shard in data.nodes.items():
        if shard.feats is None:
            continue
        feats[nt], id2idx[nt] = torch.from_numpy(shard.feats), node_pb[nt].id2index
    ds = DistDataset(num_partitions=m.num_partitions, partition_idx=partition,
                     edge_dir=sample_edge_direction)
    if meta.is_homogeneous:
        (nt,) = m.node_types
        (et,) = edge_index
        ds.init_graph(edge_index=edge_index[et], edge_ids=edge_ids[et], layout="COO",
                      graph_mode="CPU", directed=True)
        ds.node_pb = node_pb[nt]
        if feats:
            ds.init_node_features(feats[nt], id2idx[nt], with_gpu=False)
    else:
        ds.init_graph(edge_index=edge_index, edge_ids=edge_ids, layout="COO", graph_mode="CPU",
                      directed=True)
        ds.node_pb = node_pb
        if feats:
            ds.init_node_features(feats, id2idx, with_gpu=False)
        glt_adapter.set_no_node_labels(ds)
    state = StorageState(
        partition=partition, metadata=meta,
        owned_nodes={nt: np.sort(s.ids) for nt, s in data.nodes.items()},
        supervision=supervision, edge_counts=edge_counts,
        negatives=_negatives(data, m, meta, splitter))
    log.info("partition=%d loaded edges=%d nodes=%d splits=%s seconds=%.2f", partition,
             sum(edge_counts.values()), sum(len(v) for v in state.owned_nodes.values()),
             meta.has_splits, time.perf_counter() - t0)
    return ds, state
