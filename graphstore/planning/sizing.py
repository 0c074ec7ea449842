"""How much memory and disk one storage machine needs for its partition (torch-free, pure).

What a storage machine holds is counted per partition (:class:`PartitionLoad`), either from a
shard set's manifest (exact), from raw table row counts before partitioning, or from counts alone
(``pipeline plan --nodes N --edges E ...``; both an even split of the graph over the partitions:
each partition owns one range of ``~N/P`` nodes per type, edges go with their anchor). The
memory model is linear in those counts, all of them the partition's own: nothing in it grows with
the whole graph (DESIGN 6b). Its coefficients were **measured** on our own storage
processes (see :data:`MEASURED`): ``benchmarks/plan.py --calibrate`` generates graphs of
different shapes, partitions each into 2, runs the real train stage through the local launcher
(``components.storage`` processes, a short ``components.train``), samples the proportional set
size (PSS: shared memory counted once) of each storage process tree (the main process, its
server-session process and the session's sampling workers) every 0.2 s, and fits the peak
against the counts by least squares; the compute-process term comes from the same graph served
to 1 and to 2 compute processes. ``benchmarks/plan.py`` (no flag) compares the estimate with the
measured peak on the ``large`` generated graph.

Ordering rule: every function here is a pure function of its arguments; counts are per
partition, in partition order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import TaskConfig
    from graphstore.formats.shards.format import Manifest

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryModel:
    """Peak memory of one storage machine's processes, linear in its :class:`PartitionLoad`."""

    base_mib: float  # the processes themselves (Python, torch, GLT, one session, no data)
    bytes_per_edge: float  # per stored edge row of the message-passing graph (reverse types too)
    bytes_per_label: float  # per supervision label row the partition answers from
    bytes_per_owned_node: float  # per node the partition owns (row pointers, cursors)
    bytes_per_feature_value: float  # per float32 feature value the partition holds
    per_compute_process_mib: float  # per compute process served (its loaders' channels, workers)
    measured: str  # how and where the numbers were measured

    def peak_bytes(self, load: PartitionLoad, compute_processes: int) -> int:
        """Estimated peak memory (bytes) of the storage machine holding ``load``, serving
        ``compute_processes`` compute processes (>= 1)."""
        return int(self.base_mib * MIB + self.bytes_per_edge * load.edges
                   + self.bytes_per_label * load.labels
                   + self.bytes_per_owned_node * load.nodes_owned
                   + self.bytes_per_feature_value * load.feature_values
                   + self.per_compute_process_mib * MIB * max(0, compute_processes - 1))


MEASURED = MemoryModel(
    base_mib=940.3, bytes_per_edge=21.9, bytes_per_label=20.8, bytes_per_owned_node=16.8,
    bytes_per_feature_value=4.2, per_compute_process_mib=38.3,
    measured=("2026-12-06, `python benchmarks/plan.py --calibrate --repeats 3` (2 CPUs, commit "
              "de63c68: the storage main process without pandas and torch's nested-tensor "
              "imports, shard schema 3): median of 3 interleaved peak-PSS measurements of 8 "
              "generated graphs (20 k-16 M edges, 2 k-1.5 M nodes, 16-128 features, up to 64 M "
              "feature values per partition, 6 homogeneous, 2 hetero including the large preset: "
              "9 M stored edges and 4 M labels per partition) x 2 partitions, non-negative least "
              "squares, fit within 1.2%; the compute term from 1, 2 and 4 compute processes"))
"""The coefficients ``pipeline plan`` uses (see the module docs for how they were measured).
What they mean, from how the storage process builds a partition (graphstore.dataset.partition_graph) and
serves it: per edge, its neighbour and edge id in shared memory (16 B) and GLT's row bookkeeping;
per label, the anchor and label arrays (16 B) and the answer to ``fetch_ablp_input`` while it
is built and sent (the pairs then stay in the compute process:
graphstore.dataset.partitioned_sampler); per feature value, the float32 matrix (4 B) and the
batches the sampling workers gather from it; per owned node, the row pointer (8 B per edge type a node anchors; 0 to
16.8 B in the fits of 2026-12-05 and 2026-12-06); the base is four Python processes with torch
loaded, three of them with GLT (the storage main process, its session process, the session's
sampling forkserver and workers; torch 2.3's CUDA build alone is ~190 MiB of private memory per fresh interpreter). A
single peak sample is sometimes 60-80 MiB above the others of the same graph (3 of the 60
samples of the fit): a transient the x1.25 margin covers."""

SYSTEM_RESERVE_MIB = 1024
"""Memory a Vertex AI worker needs besides our processes (kernel, container runtime, agents):
an allowance, not a measurement."""
MEMORY_MARGIN = 1.25
"""The estimate is multiplied by this before it is compared with a machine's memory: the
benchmark's acceptance band (estimate within 25% of the measured peak)."""
IMAGE_DISK_GB = 30
"""Boot-disk space taken before our data arrives (OS, the pulled and unpacked container image):
an allowance, not a measurement."""
PARQUET_OVERHEAD = 1.05
"""Raw-table estimates of shard bytes: uncompressed values plus 5% Parquet framing (an upper
bound when ``parquetCompression`` is ``snappy`` or ``zstd``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionLoad:
    """What one storage machine holds (module docs). ``exact`` is True when counted from a
    manifest, False when estimated from raw table row counts."""

    partition: int
    edges: int  # stored edge rows of every type (reverse types included)
    labels: int  # supervision label rows placed here (own files, or a reverse type's edges)
    nodes_total: int  # nodes of every type in the whole graph (the graph file of replicated mode)
    nodes_owned: int  # nodes this partition owns
    feature_values: int  # float32 feature values it holds (owned nodes x dim, edges x edge dim)
    shard_bytes: int  # bytes of the shard files it downloads (its part_<p>/, the manifest)
    exact: bool


def loads_from_manifest(manifest: Manifest, manifest_bytes: int = 0) -> list[PartitionLoad]:
    """One exact :class:`PartitionLoad` per partition of a shard set, from its manifest."""
    parts = manifest.num_partitions
    nodes_total = sum(info.count for info in manifest.node_types.values())
    out = []
    for p in range(parts):
        edges = feats = labels = 0
        for info in manifest.edge_types.values():
            edges += info.counts_per_partition[p]
            feats += info.counts_per_partition[p] * info.feature_dim
            if info.labels_per_partition is not None:
                labels += info.labels_per_partition[p]
        owned = sum(info.counts_per_partition[p] for info in manifest.node_types.values())
        feats += sum(info.counts_per_partition[p] * info.feature_dim
                     for info in manifest.node_types.values())
        prefix = f"part_{p}/"
        files = sum(e.bytes for rel, e in manifest.files.items() if rel.startswith(prefix))
        out.append(PartitionLoad(partition=p, edges=edges, labels=labels, nodes_total=nodes_total,
                                 nodes_owned=owned, feature_values=feats,
                                 shard_bytes=files + manifest_bytes, exact=True))
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class TableCounts:
    """Row counts of a task's raw tables: ``nodes[node_type]`` (types with a table) and
    ``edges[edge_type name]``."""

    nodes: Mapping[str, int]
    edges: Mapping[str, int]


def loads_from_tables(task: TaskConfig, num_partitions: int,
                      counts: TableCounts) -> list[PartitionLoad]:
    """Estimated :class:`PartitionLoad` of each partition before partitioning: the graph's rows
    split evenly (each partition a range of ~N/P nodes per type, edges by anchor). A node type without a table is
    counted as the rows of the edge tables that touch it (an upper bound: its ids come from
    them). Reverse edge types and separate label rows are added as the partitioner adds them; a
    hard-negative edge type (``hardNegativeEdgeTypes``) is label rows only (no edges, no reverse)."""
    ds, graph = task.dataset, task.graph_metadata
    direction = task.trainer.storage.storage_args.sample_edge_direction
    reverse = ds.partition.add_reverse_edges
    supervision = {str(et) for et in task.supervision_edge_types}
    negatives = {str(et) for et in task.hard_negative_edge_types.values()}
    node_dim = {src.node_type: len(src.feature_columns) for src in ds.node_sources}
    nodes = dict(counts.nodes)
    for nt in graph.node_types:
        if nt not in nodes:
            nodes[nt] = sum(counts.edges[str(src.edge_type)] for src in ds.edge_sources
                            if nt in (src.edge_type.src_node_type, src.edge_type.dst_node_type))
    edges = feats = shard = labels = 0.0
    for src in ds.edge_sources:
        et, rows = src.edge_type, counts.edges[str(src.edge_type)]
        if str(et) in negatives:  # labels only, src and dst
            labels += rows
            shard += rows * 16
            continue
        k = len(src.feature_columns)
        row_bytes = 16 + (4 if src.weight_column else 0) + 4 * k
        copies = 2 if reverse and et.src_node_type != et.dst_node_type else 1
        own_file = str(et) in supervision and not (copies == 2 and direction == "in")
        labels += rows if str(et) in supervision else 0
        edges += rows * copies
        feats += rows * copies * k
        shard += rows * copies * row_bytes + (rows * 16 if own_file else 0)
    nodes_total = sum(nodes.values())
    feats += sum(nodes[nt] * node_dim.get(nt, 0) for nt in nodes)
    shard += sum(nodes[nt] * (8 + 4 * node_dim.get(nt, 0)) for nt in nodes)
    p = num_partitions
    return [PartitionLoad(partition=i, edges=math.ceil(edges / p), labels=math.ceil(labels / p),
                          nodes_total=nodes_total,
                          nodes_owned=math.ceil(nodes_total / p),
                          feature_values=math.ceil(feats / p),
                          shard_bytes=math.ceil(PARQUET_OVERHEAD * shard / p), exact=False)
            for i in range(p)]


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphCounts:
    """A graph described by counts alone (``pipeline plan --nodes ...``): ``nodes`` of every type,
    ``edges`` the storage holds (reverse types included), ``feature_dim`` float32 values per node,
    ``labels`` supervision label rows."""

    nodes: int
    edges: int
    feature_dim: int = 0
    labels: int = 0

    def __post_init__(self) -> None:
        for name in ("nodes", "edges", "feature_dim", "labels"):
            if getattr(self, name) < 0:
                raise ValueError(f"GraphCounts.{name} must be >= 0, got {getattr(self, name)}")


def loads_from_counts(counts: GraphCounts, num_partitions: int) -> list[PartitionLoad]:
    """Estimated :class:`PartitionLoad` per partition: an even split (the numbering's node
    ranges differ by at most one node; edges and labels by their anchors). Shard bytes: per
    edge and per label two int64 ids, per node its id and its features, plus Parquet's framing."""
    p = num_partitions
    shard = (16 * (counts.edges + counts.labels) + counts.nodes * (8 + 4 * counts.feature_dim))
    return [PartitionLoad(partition=i, edges=math.ceil(counts.edges / p),
                          labels=math.ceil(counts.labels / p), nodes_total=counts.nodes,
                          nodes_owned=math.ceil(counts.nodes / p),
                          feature_values=math.ceil(counts.nodes / p) * counts.feature_dim,
                          shard_bytes=math.ceil(PARQUET_OVERHEAD * shard / p), exact=False)
            for i in range(p)]


def memory_needed_bytes(load: PartitionLoad, compute_processes: int,
                        model: MemoryModel = MEASURED) -> int:
    """Memory a storage machine must have for ``load``: the model's peak times
    :data:`MEMORY_MARGIN`, plus :data:`SYSTEM_RESERVE_MIB`."""
    return int(model.peak_bytes(load, compute_processes) * MEMORY_MARGIN
               + SYSTEM_RESERVE_MIB * MIB)


def disk_needed_bytes(load: PartitionLoad) -> int:
    """Boot disk a storage machine must have: :data:`IMAGE_DISK_GB` plus its shard files (they
    are downloaded onto it, then removed once loaded)."""
    return IMAGE_DISK_GB * 10**9 + load.shard_bytes


def graph_file_bytes(loads: list[PartitionLoad], *, edge_types: int, supervision_types: int,
                     train_view: bool) -> int:
    """An upper bound of replicated mode's graph file plus features file (graphstore.modes.replicated.
    format) for the graph of ``loads`` (every partition summed): per stored edge an index and an
    edge id (16 B), again for the supervision edges and their reverses when the file has a
    ``train`` view (2 x 16 B per label); per edge type and view an ``indptr`` over at most every
    node (8 B); per label its id and split code (9 B), per supervision type its ``indptr`` and
    anchors per split (5 x 8 B per node at most); 4 B per feature value; 1 MiB for the headers and
    the sections' alignment. ``edge_types``: stored edge types (reverse types included).
    Checked here on the generated ``medium`` graph (1.8 M stored edges, 150 k nodes, a train
    view): 85.4 MB from its manifest, the files written were 71.3 MB."""
    edges = sum(load.edges for load in loads)
    labels = sum(load.labels for load in loads)
    feats = sum(load.feature_values for load in loads)
    nodes = max((load.nodes_total for load in loads), default=0)
    views = 2 if train_view else 1
    return (16 * edges + (32 * labels if train_view else 0) + 8 * (nodes + 1) * edge_types * views
            + 9 * labels + 40 * (nodes + 1) * supervision_types + 4 * feats + MIB)
