"""Build one storage partition: shard files -> GLT ``DistDataset`` + the storage-side state.

Order (DESIGN §5; called once per storage machine, before any server session):
  1. read and verify the partition's shard files (graphstore.shards.reader);
  2. if ``storageArgs.splitter_cls_path`` names a splitter, split every supervision anchor
     (node-based) or every supervision edge (``per_edge`` splitters), hash-deterministic
     (graphstore.splitter), and remove the val/test supervision edges from the message-passing
     graph (all supervision edges when ``should_convert_labels_to_edges`` is false), forward and
     reverse types alike, so evaluation never samples the edge it is asked to predict;
  3. build the GLT ``DistDataset`` on CPU (``graph_mode='CPU'``, features without GPU).

The returned :class:`StorageState` is what the RPC handlers serve (splits, labels, node ids); it is
plain numpy and pickles into each spawned session process.
"""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from graphstore.config import EdgeType, StorageArgs
from graphstore.errors import UsageError
from graphstore.shards.reader import PartitionData, ShardSet
from graphstore.splitter import SPLIT_CODE, DistNodeAnchorLinkSplitter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Supervision:
    """The labels of one supervision edge type whose anchors this partition owns."""

    edge_type: str
    anchor_src: np.ndarray  # int64 anchors, sorted ascending (one row per positive label)
    label_dst: np.ndarray  # int64 label nodes, aligned with anchor_src
    anchors_by_split: dict[str, np.ndarray]  # "all" / "train" / "val" / "test" -> sorted unique
    label_split: np.ndarray | None = None  # per-edge splits: int8 split code of each label row


@dataclass(frozen=True)
class StorageState:
    partition: int
    num_partitions: int
    edge_dir: str
    homogeneous: bool
    node_types: tuple[str, ...]
    edge_types: tuple[str, ...]  # message-passing edge types (incl. reverse types)
    node_counts: dict[str, int]
    feature_dims: dict[str, int]
    owned_nodes: dict[str, np.ndarray]  # sorted dense ids this partition owns, per node type
    supervision: dict[str, Supervision]
    has_splits: bool
    edge_counts: dict[str, int] = field(default_factory=dict)  # after split filtering


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


def _supervision(data: PartitionData, key: str, splitter: DistNodeAnchorLinkSplitter | None,
                 node_counts: dict[str, int], num_edges: int) -> Supervision:
    lab = data.labels[key]
    order = np.argsort(lab.src, kind="stable")
    src, dst = lab.src[order], lab.dst[order]
    anchors = np.unique(src)
    by_split = {"all": anchors}
    label_split = None
    if splitter is not None and splitter.per_edge:
        label_split = splitter.assign_edges(key, src, dst, num_edges)
        for name, code in SPLIT_CODE.items():
            by_split[name] = np.unique(src[label_split == code])
    elif splitter is not None:
        anchor_type = EdgeType.parse(key).src_node_type
        codes = splitter.assign(anchor_type, anchors, node_counts[anchor_type])
        for name, code in SPLIT_CODE.items():
            by_split[name] = anchors[codes == code]
    return Supervision(key, src, dst, by_split, label_split)


def _keep_mask(data: PartitionData, key: str, reverse_of: str | None,
               splitter: DistNodeAnchorLinkSplitter, node_counts: dict[str, int],
               num_edges: int) -> np.ndarray:
    """Which edges of a supervision type (or its reverse) stay in the message-passing graph."""
    edges = data.edges[key]
    base = EdgeType.parse(reverse_of or key)
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

    t0 = time.perf_counter()
    m = shards.manifest
    if m.sample_edge_direction != sample_edge_direction:
        raise UsageError(
            f"shards at {shards.source_uri} were partitioned for sample_edge_direction "
            f"{m.sample_edge_direction!r} but storageArgs say {sample_edge_direction!r}; re-partition")
    data = shards.load_partition(partition)
    splitter = load_splitter(storage_args)
    node_counts = {nt: info.count for nt, info in m.node_types.items()}
    supervision = {k: _supervision(data, k, splitter, node_counts, info.count)
                   for k, info in m.edge_types.items() if info.is_supervision}
    sup_keys = set(supervision)
    edge_index, edge_ids, edge_counts = {}, {}, {}
    for key, info in m.edge_types.items():
        e = data.edges[key]
        src, dst, eids = e.src, e.dst, e.eids
        if splitter is not None and (key in sup_keys or info.reverse_of in sup_keys):
            keep = _keep_mask(data, key, info.reverse_of, splitter, node_counts,
                              m.edge_types[info.reverse_of or key].count)
            src, dst, eids = src[keep], dst[keep], eids[keep]
        et = EdgeType.parse(key).as_tuple()
        edge_index[et] = torch.from_numpy(np.stack([src, dst]))
        edge_ids[et] = torch.from_numpy(eids)
        edge_counts[key] = int(len(src))
    node_pb = {nt: torch.from_numpy(shards.partition_book(nt).astype(np.int64)) for nt in m.node_types}
    feats, id2idx = {}, {}
    for nt, shard in data.nodes.items():
        if shard.feats is None:
            continue
        index = torch.full((node_counts[nt],), -1, dtype=torch.int64)
        index[torch.from_numpy(shard.ids.copy())] = torch.arange(len(shard.ids))
        feats[nt], id2idx[nt] = torch.from_numpy(shard.feats), index
    homogeneous = len(m.node_types) == 1 and len(m.edge_types) == 1
    ds = DistDataset(num_partitions=m.num_partitions, partition_idx=partition,
                     edge_dir=sample_edge_direction)
    if homogeneous:
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
        # GLT 0.2.4's hetero sampler asserts node_labels is a dict, and wraps a dict of Features
        # (or an empty dict) into a remote feature it then queries; a dict without any real node
        # type key satisfies the assert and is skipped at lookup (labels are not node labels here).
        ds.node_labels = {"__no_node_labels__": torch.empty(0, dtype=torch.long)}
    state = StorageState(
        partition=partition, num_partitions=m.num_partitions, edge_dir=sample_edge_direction,
        homogeneous=homogeneous, node_types=tuple(m.node_types), edge_types=tuple(m.edge_types),
        node_counts=node_counts, feature_dims={nt: i.feature_dim for nt, i in m.node_types.items()},
        owned_nodes={nt: np.sort(s.ids) for nt, s in data.nodes.items()},
        supervision=supervision, has_splits=splitter is not None, edge_counts=edge_counts)
    log.info("partition=%d loaded edges=%d nodes=%d splits=%s seconds=%.2f", partition,
             sum(edge_counts.values()), sum(len(v) for v in state.owned_nodes.values()),
             state.has_splits, time.perf_counter() - t0)
    return ds, state
