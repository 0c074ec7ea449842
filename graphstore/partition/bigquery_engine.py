"""The BigQuery partition engine: ``bq://`` tables -> a shard set on gs://, every row handled by
BigQuery, none by this process (``partitionConfig.engine: bigquery``).

Order of work (each step one or more SQL jobs, graphstore.partition.bigquery_jobs):
  1. claim the output root and start a version folder (graphstore.formats.shards.publish: the
     same crash-atomic publishing as the local engine); the scratch tables' tag is made from the
     version's name, so two runs never share a table;
  2. check every source table and column (ids INT64 or STRING and of one type per node type,
     weights and features numeric and finite: graphstore.partition.bigquery_values);
  3. number each node type (graphstore.partition.bigquery_numbering): from its node table, or
     the distinct endpoints of its edges;
  4. map each edge type to dense ids and partitions, with its reverse type and its labels
     (graphstore.partition.bigquery_edges), the rules of graphstore.partition.edges;
  5. export every folder of the format into the version folder (graphstore.partition
     .bigquery_shards), list it for the manifest's entries (sizes and crc32c from GCS, rows from
     Parquet footers), write ``manifest.json`` and switch ``CURRENT``;
  6. drop the scratch tables (they also expire by themselves: a killed run leaves nothing that
     lasts).
The shard set holds the same dense ids, edges per partition, labels and features as the local
engine's for the same tables (tests/emulator/test_bigquery_engine.py); edges and files are in
another order (edge ids follow the files, so they differ, as the format allows).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from graphstore.formats.shards.format import (
    MANIFEST, SCHEMA_VERSION, EdgeTypeInfo, Manifest, NodeTypeInfo, anchor_side, edge_dir,
    id_map_dir, label_dir, node_dir,
)
from graphstore.formats.shards.publish import NewVersion, ShardRoot
from graphstore.io import uris
from graphstore.partition.bigquery_edges import (
    DenseEdges, labels_by_source, map_edges, reverse_edges,
)
from graphstore.partition.bigquery_jobs import BigQueryJobs, ScratchDataset, SourceColumn, quoted
from graphstore.partition.bigquery_numbering import (
    NumberedNodes, number_from_edges, number_from_table,
)
from graphstore.partition.bigquery_shards import Export, file_entries, run_exports
from graphstore.partition.bigquery_values import NO_VALUES, check_values, feature_names
from graphstore.partition.manifest import config_hash
from graphstore.runtime.errors import InputDataError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import EdgeSource, TaskConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScratchPlace:
    """Where the engine's jobs and scratch tables live: ``project.dataset`` in ``location``
    (None: the project's default)."""

    project: str
    dataset: str
    location: str | None = None


@dataclass(frozen=True)
class _NodeFiles:
    """Where a node type's node files come from: ``table`` holds ``(int_id, part)`` and its
    ``feature_dim`` columns ``f_0 ..`` (the numbering table when there are no features)."""

    table: str
    feature_dim: int


def partition_graph_bigquery(task: "TaskConfig", *, num_partitions: int, output_uri: str,
                             scratch: ScratchPlace, client: Any = None) -> Manifest:
    """Partition the task's ``bq://`` tables into ``num_partitions`` shards at the gs://
    ``output_uri`` in BigQuery (module docs). ``client``: a BigQuery client (default: the
    project's, graphstore.io.gcp). Returns the manifest of the version now current."""
    if num_partitions < 1:
        raise UsageError(f"number of partitions must be >= 1, got {num_partitions}")
    if not uris.is_gcs(output_uri):
        raise UsageError(f"--output {output_uri}: the BigQuery engine writes shards to gs:// "
                         "(BigQuery exports to Cloud Storage only); give a gs:// prefix, or "
                         "set datasetConfig.partitionConfig.engine: local")
    _require_bigquery_sources(task)
    root = ShardRoot.claim(output_uri)
    t0 = time.perf_counter()
    with NewVersion.start(root) as version:
        tag = version.name.lower().replace("-", "_")
        jobs = BigQueryJobs(ScratchDataset(scratch.project, scratch.dataset, scratch.location,
                                           tag), client)
        jobs.ensure_dataset()
        try:
            version_uri = uris.join(root.uri, version.name)
            manifest = _build(jobs, task, num_partitions, version_uri, t0)
            with open(os.path.join(version.local_dir, MANIFEST), "w") as fh:
                fh.write(manifest.to_json())
            version.publish()
        finally:
            jobs.drop_created()
    total = sum(e.count for e in manifest.edge_types.values())
    log.info("partitioned in BigQuery edges=%d nodes=%d partitions=%d seconds=%.1f output=%s "
             "version=%s", total, sum(n.count for n in manifest.node_types.values()),
             num_partitions, time.perf_counter() - t0, output_uri, version.name)
    return manifest


def _require_bigquery_sources(task: "TaskConfig") -> None:
    bad = [f"datasetConfig.dataSources.{kind}[{name}].uri: {uri}"
           for kind, name, uri in (
               [("nodes", ns.node_type, ns.uri) for ns in task.dataset.node_sources]
               + [("edges", str(es.edge_type), es.uri) for es in task.dataset.edge_sources])
           if not uri.startswith("bq://")]
    if bad:
        raise UsageError("the BigQuery engine reads bq:// tables only; "
                         + "; ".join(bad) + " (or set datasetConfig.partitionConfig.engine: "
                         "local)")


def _build(jobs: BigQueryJobs, task: "TaskConfig", P: int, version_uri: str,
           t0: float) -> Manifest:
    direction = task.trainer.storage.storage_args.sample_edge_direction
    nodes, node_files = _number_nodes(jobs, task, P)
    edges, labels, edge_infos = _map_edges(jobs, task, nodes, direction)
    exports = [*_node_exports(nodes, node_files),
               *(Export(edge_dir(p, key), "SELECT src, dst" + "".join(
                   f", {c}" for c in e.value_columns) + f" FROM `{e.table}` WHERE part = {p}",
                   f"exporting the edges of {key} in partition {p}")
                 for key, e in edges.items() for p in range(P) if e.counts[p]),
               *(Export(label_dir(p, key), f"SELECT src, dst FROM `{e.table}` WHERE part = {p}",
                        f"exporting the labels of {key} in partition {p}")
                 for key, e in labels.items() for p in range(P) if e.counts[p])]
    run_exports(jobs, version_uri, exports)
    elapsed = time.perf_counter() - t0
    total = sum(e.count for e in edge_infos.values())
    return Manifest(
        schema_version=SCHEMA_VERSION, num_partitions=P, sample_edge_direction=direction,
        node_types={nt: NodeTypeInfo(count=n.ranges.count,
                                     id_dtype="string" if n.sql_type == "STRING" else "int64",
                                     feature_dim=node_files[nt].feature_dim,
                                     counts_per_partition=n.ranges.counts)
                    for nt, n in nodes.items()},
        edge_types=edge_infos, files=file_entries(version_uri), config_hash=config_hash(task, P),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        stats={"seconds": round(elapsed, 3), "edges_per_s": round(total / max(elapsed, 1e-9), 1),
               "bigquery_exports": len(exports)})


def _endpoints(jobs: BigQueryJobs, task: "TaskConfig", nt: str) -> list[SourceColumn]:
    out = []
    for es in task.dataset.edge_sources:
        key = str(es.edge_type)
        for column, end, side in ((es.src_column, es.edge_type.src_node_type, "srcColumn"),
                                  (es.dst_column, es.edge_type.dst_node_type, "dstColumn")):
            if end == nt:
                out.append(jobs.source_column(es.uri, column,
                                              f"datasetConfig.dataSources.edges[{key}].{side}"))
    return out


def _number_nodes(jobs: BigQueryJobs, task: "TaskConfig", P: int
                  ) -> tuple[dict[str, NumberedNodes], dict[str, _NodeFiles]]:
    """Steps 2 and 3 for every node type, in ``graphMetadata.nodeTypes`` order: the id types of
    every column that holds a type's ids agree (the local engine's message), then numbering,
    then the features joined to the dense ids once."""
    by_type = {ns.node_type: ns for ns in task.dataset.node_sources}
    nodes: dict[str, NumberedNodes] = {}
    files: dict[str, _NodeFiles] = {}
    for nt in task.graph_metadata.node_types:
        ns = by_type.get(nt)
        ends = _endpoints(jobs, task, nt)
        own = (jobs.source_column(ns.uri, ns.id_column,
                                  f"datasetConfig.dataSources.nodes[{nt}].idColumn")
               if ns else None)
        columns = ([own] if own else []) + ends
        if not columns:
            raise UsageError(f"node type {nt!r} has no node table and appears in no edge type")
        first = columns[0]
        for other in columns[1:]:
            if other.sql_type != first.sql_type:
                raise InputDataError(
                    f"ids of node type {nt!r} are {first.sql_type} in {first.uri} column "
                    f"{first.column!r} but {other.sql_type} in {other.uri} column "
                    f"{other.column!r}; make the id columns the same type")
        features = NO_VALUES
        if ns is not None:
            features = check_values(jobs, jobs.table_schema(ns.uri, "nodes"),
                                    ns.feature_columns,
                                    f"datasetConfig.dataSources.nodes[{nt}].featureColumns",
                                    id_column=ns.id_column)
            nodes[nt] = number_from_table(jobs, nt, own, P)
        else:
            nodes[nt] = number_from_edges(jobs, nt, ends, P)
        files[nt] = _NodeFiles(nodes[nt].table, 0)
        if features.width:  # one scan of the features, then P exports of their partitions
            values = ", ".join(features.select("r", feature_names(features.width)))
            files[nt] = _NodeFiles(jobs.create_scratch(
                f"joining the features of {nt!r} to dense ids", f"nodes_{nt}",
                f"SELECT n.int_id, n.part, {values} FROM `{nodes[nt].table}` AS n "
                f"JOIN {quoted(own.ref)} AS r ON r.{quoted(own.column)} = n.raw_id",
                partitions=P), features.width)
    return nodes, files


def _map_edges(jobs: BigQueryJobs, task: "TaskConfig", nodes: dict[str, NumberedNodes],
               direction: str
               ) -> tuple[dict[str, DenseEdges], dict[str, DenseEdges], dict[str, EdgeTypeInfo]]:
    """Step 4: every edge type in config order; graph edges and labels by type, and the
    manifest entries (the rules of graphstore.partition.edges)."""
    supervision = {str(et) for et in task.supervision_edge_types}
    negatives = {str(neg): str(sup) for sup, neg in task.hard_negative_edge_types.items()}
    dangling = task.dataset.partition.dangling_edges
    P = next(iter(nodes.values())).ranges.num_partitions
    edges: dict[str, DenseEdges] = {}
    labels: dict[str, DenseEdges] = {}
    infos: dict[str, EdgeTypeInfo] = {}
    for es in task.dataset.edge_sources:
        et, key = es.edge_type, str(es.edge_type)
        ends = _edge_ends(jobs, es, key)
        src_nodes, dst_nodes = nodes[et.src_node_type], nodes[et.dst_node_type]
        if key in negatives:
            labels[key] = mapped = map_edges(jobs, key, *ends, src_nodes, dst_nodes, "src",
                                             dangling)
            infos[key] = EdgeTypeInfo(
                src_node_type=et.src_node_type, relation=et.relation,
                dst_node_type=et.dst_node_type, count=0, counts_per_partition=(0,) * P,
                has_weight=False, feature_dim=0, is_supervision=False,
                labels_per_partition=mapped.counts, negative_of=negatives[key],
                dropped_dangling=mapped.dropped)
            continue
        cfg = f"datasetConfig.dataSources.edges[{key}]"
        schema = jobs.table_schema(es.uri, f"{cfg}.uri")
        weight = check_values(jobs, schema, (es.weight_column,) if es.weight_column else (),
                              f"{cfg}.weightColumn", what="weight")
        features = check_values(jobs, schema, es.feature_columns, f"{cfg}.featureColumns")
        anchor = anchor_side(direction)
        edges[key] = mapped = map_edges(jobs, key, *ends, src_nodes, dst_nodes, anchor,
                                        dangling, weight=weight, features=features)
        reverse_key = None
        if task.dataset.partition.add_reverse_edges and et.src_node_type != et.dst_node_type:
            reverse_key = str(et.reverse())
            new_anchor = src_nodes if direction == "in" else dst_nodes
            edges[reverse_key] = reverse_edges(jobs, mapped, reverse_key, new_anchor, anchor)
        labels_from = reverse_key if key in supervision and direction == "in" else None
        if key in supervision and not labels_from:
            labels[key] = labels_by_source(jobs, mapped, src_nodes)
        for out_key, out_et, reverse_of in [(key, et, None)] + (
                [(reverse_key, et.reverse(), key)] if reverse_key else []):
            counts = edges[out_key].counts
            label_counts = None
            if out_key in supervision:
                label_counts = (edges[labels_from].counts if labels_from
                                else labels[out_key].counts)
            infos[out_key] = EdgeTypeInfo(
                src_node_type=out_et.src_node_type, relation=out_et.relation,
                dst_node_type=out_et.dst_node_type, count=sum(counts),
                counts_per_partition=counts, has_weight=mapped.has_weight,
                feature_dim=mapped.feature_dim, is_supervision=out_key in supervision,
                reverse_of=reverse_of, labels_per_partition=label_counts,
                labels_from=labels_from if out_key == key else None,
                dropped_dangling=mapped.dropped if out_key == key else 0)
    return edges, labels, infos


def _edge_ends(jobs: BigQueryJobs, es: "EdgeSource", key: str
               ) -> tuple[SourceColumn, SourceColumn]:
    cfg = f"datasetConfig.dataSources.edges[{key}]"
    return (jobs.source_column(es.uri, es.src_column, f"{cfg}.srcColumn"),
            jobs.source_column(es.uri, es.dst_column, f"{cfg}.dstColumn"))


def _node_exports(nodes: dict[str, NumberedNodes], files: dict[str, _NodeFiles]
                  ) -> list[Export]:
    """Id maps (one export per type) and node files (one per partition with nodes)."""
    out = []
    for nt, n in nodes.items():
        out.append(Export(id_map_dir(nt), f"SELECT int_id, raw_id FROM `{n.table}`",
                          f"exporting the id map of {nt!r}"))
        columns = "".join(f", {c}" for c in feature_names(files[nt].feature_dim))
        out.extend(Export(node_dir(p, nt),
                          f"SELECT int_id{columns} FROM `{files[nt].table}` WHERE part = {p}",
                          f"exporting the nodes of {nt!r} in partition {p}")
                   for p, count in enumerate(n.ranges.counts) if count)
    return out
