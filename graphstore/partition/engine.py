"""The partition stage: raw node/edge tables -> a shard set (format: graphstore.formats.shards.format).

Order of work (each step logs rows and rows/s):
  1. open every source (gs:// inputs are streamed to a local work folder first) and check columns
     and id types agree per node type (:meth:`Workspace.open_source`,
     :func:`~graphstore.partition.sources.resolve_id_kinds`);
  2. per node type (two at a time), number the ids (:mod:`graphstore.partition.nodes`): from the
     node table when one is given (nulls, duplicates, bad features rejected), else the distinct
     edge endpoints; ranks follow ascending raw id, dense ids the ranges rule of the shard format
     (each partition one contiguous range). A Parquet node table that fits
     ``PartitionTuning.lookup_share`` of ``memoryLimitMb`` is read and sorted in memory
     (:mod:`graphstore.partition.node_arrays`), otherwise DuckDB sorts it; either way a DuckDB
     table ``(int_id, raw_id)`` results (made on demand for in-memory types);
  3. per edge type, both endpoints are mapped to dense ids and the edges written split by the
     anchor's partition (:mod:`graphstore.partition.edges`): in one chunked pass that also writes
     the reverse type and the labels when both id maps fit in memory
     (:mod:`graphstore.partition.edge_stream`, Parquet input), else by a DuckDB join that spills;
     fewer rows out than in means null or dangling endpoints: an error naming the first
     offending row, or (``danglingEdges: drop``) a count;
  4. id maps, partition books and per-partition node files (:mod:`graphstore.partition.nodes`;
     steps 3 and 4 run two at a time, :data:`PARALLEL_STEPS`; they only read the node tables);
  5. checksums, then ``manifest.json`` LAST (:mod:`graphstore.partition.manifest`), then the new
     version is published: the output's ``CURRENT`` pointer switches to it in one atomic step
     (graphstore.formats.shards.publish).

Memory: DuckDB runs with ``memoryLimitMb`` and spills to the run's work folder; a node table or id
map held in memory may use up to ``PartitionTuning.lookup_share`` (default 0.25) of that limit, and
so may the chunks of the edge pass. Peak RSS does not grow with the edge count. The new shard set
is written into its own version folder under the output (gs://: built locally, then uploaded); a
crash at any moment leaves the previous version current and complete, and never a manifest for a
partial set.

Determinism: the same inputs, config and tuning give byte-identical files on the in-memory path
(chunk files by index, results collected in config order whatever the thread timing); the DuckDB
path writes the same rows, in an order that may vary between runs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from graphstore.runtime.errors import UsageError
from graphstore.partition import edges as edge_step
from graphstore.partition import nodes as node_step
from graphstore.partition.manifest import write_manifest
from graphstore.partition.sources import IdKind, Table, resolve_id_kinds
from graphstore.partition.tuning import DEFAULT_TUNING, PartitionTuning
from graphstore.partition.workspace import Workspace
from graphstore.formats.shards.format import EdgeTypeInfo, Manifest, NodeTypeInfo, node_dir
from graphstore.formats.shards.publish import NewVersion, ShardRoot

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import EdgeSource, NodeSource, TaskConfig

log = logging.getLogger(__name__)
PARALLEL_STEPS = 2
"""Node, edge-type and node-file steps run this many at a time (each on its own DuckDB
connection; DuckDB's own threads and ``memoryLimitMb`` are shared by all of them)."""

NodeSources = dict[str, tuple["NodeSource", Table]]
EdgeSources = dict[str, tuple["EdgeSource", Table]]


def partition_graph(task: "TaskConfig", *, num_partitions: int, output_uri: str,
                    tuning: PartitionTuning | None = None) -> Manifest:
    """Partition the task's raw tables into ``num_partitions`` shards at ``output_uri``.

    ``tuning``: memory share and chunk sizes (default :data:`~graphstore.partition.tuning.
    DEFAULT_TUNING`; the memory limit itself is ``partitionConfig.memoryLimitMb``). It chooses
    the path each step takes, never the rows written. Returns the manifest of the version that
    is now current.
    """
    if num_partitions < 1:
        raise UsageError(f"number of partitions must be >= 1, got {num_partitions}")
    root = ShardRoot.claim(output_uri)
    t_start = time.perf_counter()
    with NewVersion.start(root) as version, contextlib.closing(
            Workspace(task, num_partitions, version.work_dir, version.local_dir,
                      tuning or DEFAULT_TUNING)) as ws:
        node_srcs, edge_srcs, kinds = _open_sources(ws, task)
        nodes = _number_nodes(ws, task, node_srcs, edge_srcs, kinds)
        node_infos, edge_infos = _write_shards(ws, task, nodes, edge_srcs, kinds)
        ws.close()
        total_edges = sum(e.count for e in edge_infos.values())
        elapsed = time.perf_counter() - t_start
        manifest = write_manifest(
            ws.out, task, num_partitions=num_partitions, node_types=node_infos,
            edge_types=edge_infos,
            stats={**ws.stats, "seconds": round(elapsed, 3),
                   "edges_per_s": round(total_edges / max(elapsed, 1e-9), 1)})
        version.publish()
        log.info("partitioned edges=%d nodes=%d partitions=%d seconds=%.2f edges_per_s=%.0f "
                 "output=%s version=%s", total_edges, sum(n.count for n in node_infos.values()),
                 num_partitions, elapsed, total_edges / max(elapsed, 1e-9), output_uri,
                 version.name)
        return manifest


def _open_sources(ws: Workspace, task: "TaskConfig"
                  ) -> tuple[NodeSources, EdgeSources, dict[str, IdKind]]:
    """Step 1: every node and edge table (keyed by node type / edge type string, in config
    order) and each node type's id kind; a node type with no table and no edge is an error."""
    node_srcs = {ns.node_type: (ns, ws.open_source(
                     ns.uri, ns.format, (ns.id_column, *ns.feature_columns)))
                 for ns in task.dataset.node_sources}
    edge_srcs = {str(es.edge_type): (es, ws.open_source(
                     es.uri, es.format, (es.src_column, es.dst_column,
                                         *([es.weight_column] if es.weight_column else []),
                                         *es.feature_columns)))
                 for es in task.dataset.edge_sources}
    kinds = resolve_id_kinds(node_srcs, edge_srcs)
    for nt in task.graph_metadata.node_types:
        if nt not in node_srcs and nt not in kinds:
            raise UsageError(f"node type {nt!r} has no node table and appears in no edge type")
    return node_srcs, edge_srcs, kinds


def _number_nodes(ws: Workspace, task: "TaskConfig", node_srcs: NodeSources,
                  edge_srcs: EdgeSources, kinds: dict[str, IdKind]
                  ) -> dict[str, node_step.NodeType]:
    """Step 2: number every node type and build its id lookup, :data:`PARALLEL_STEPS` types at
    a time; the result is in ``graphMetadata.nodeTypes`` order."""
    def number(nt: str) -> node_step.NodeType:
        node = (node_step.number_from_table(ws, nt, *node_srcs[nt], kinds[nt]) if nt in node_srcs
                else node_step.number_from_edges(ws, nt, kinds[nt], edge_srcs))
        node_step.build_lookup(ws, nt)
        return node

    with ThreadPoolExecutor(max_workers=PARALLEL_STEPS) as pool:
        return dict(zip(task.graph_metadata.node_types,
                        pool.map(number, task.graph_metadata.node_types)))


def _write_shards(ws: Workspace, task: "TaskConfig", nodes: dict[str, node_step.NodeType],
                  edge_srcs: EdgeSources, kinds: dict[str, IdKind]
                  ) -> tuple[dict[str, NodeTypeInfo], dict[str, EdgeTypeInfo]]:
    """Steps 3 and 4: every edge type and every node type's files; returns their manifest
    entries (edge types in config order, node types in ``nodes`` order).

    The steps only read the node tables and write disjoint folders, so they run side by side:
    one step's single-threaded stretches (Parquet finalisation, file moves, footer reads)
    overlap another's scans. Results are collected in config order, whatever the timing.
    """
    supervision = {str(et) for et in task.supervision_edge_types}
    negatives = {str(neg): str(sup) for sup, neg in task.hard_negative_edge_types.items()}
    with ThreadPoolExecutor(max_workers=PARALLEL_STEPS) as pool:
        edge_jobs = [pool.submit(edge_step.write_edge_type, ws, key, es, table, kinds, supervision,
                                 negatives)
                     for key, (es, table) in edge_srcs.items()]
        node_jobs = {nt: pool.submit(node_step.write_node_outputs, ws, node)
                     for nt, node in nodes.items()}
        edge_infos: dict[str, EdgeTypeInfo] = {}
        for job in edge_jobs:
            edge_infos.update(job.result())
        node_infos: dict[str, NodeTypeInfo] = {}
        for nt, job in node_jobs.items():
            job.result()
            node = nodes[nt]
            node_infos[nt] = NodeTypeInfo(
                count=node.count, id_dtype=node.kind, feature_dim=node.feature_dim,
                counts_per_partition=ws.rows_per_partition(lambda p, n=nt: node_dir(p, n)))
    return node_infos, edge_infos
