"""Edges in BigQuery: an edge table's raw endpoints -> dense ids and the partition of each edge.

One statement per edge type (:func:`map_edges`) joins the user's table to the two numbered node
tables (graphstore.partition.bigquery_numbering) and writes the scratch table
``gsp_<tag>_edges_<edge type>`` ``(src INT64, dst INT64, part INT64 [, weight FLOAT64]
[, f_0 .. FLOAT64])``; the reverse type (:func:`reverse_edges`) flips it into
``gsp_<tag>_edges_<reverse type>``, and a supervision type's labels (:func:`labels_by_source`)
are ``gsp_<tag>_labels_<edge type>`` ``(src, dst, part)``. Placement is the format's
(graphstore.formats.shards.format): an edge lives in the partition of its anchor (the source for
``out`` sampling, the destination for ``in``), a label in its source's, computed from the dense
id by the ranges rule (:func:`partition_of_sql`), so neither needs a second join. A hard-negative
type is mapped with the source as its anchor and no values: its table is its labels.

Checks, with the local engine's messages (graphstore.partition.edges): an empty table, a null
endpoint (an error whatever ``danglingEdges`` says), and an endpoint missing from its node table:
an error naming an example id and the count, or with ``danglingEdges: drop`` a warning and the
count in :attr:`DenseEdges.dropped`. BigQuery tables have no row order, so no row is named.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from graphstore.formats.shards.format import NodeRanges
from graphstore.partition.bigquery_jobs import BigQueryJobs, SourceColumn, quoted
from graphstore.partition.bigquery_numbering import NumberedNodes
from graphstore.partition.bigquery_values import NO_VALUES, ValueColumns, feature_names
from graphstore.runtime.errors import InputDataError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DenseEdges:
    """One edge type in dense ids: ``table`` (``project.dataset.table``) holds ``(src, dst,
    part)`` and then :attr:`value_columns`; ``counts[p]`` edges live in partition ``p``;
    ``dropped`` edges had an endpoint missing from its node table (``danglingEdges: drop``)."""

    key: str
    table: str
    counts: tuple[int, ...]
    dropped: int
    has_weight: bool = False
    feature_dim: int = 0

    @property
    def value_columns(self) -> tuple[str, ...]:
        """``weight`` (when there is one) and ``f_0 .. f_{d-1}``: the format's columns after
        ``src, dst``."""
        return ("weight",) * self.has_weight + feature_names(self.feature_dim)


def partition_of_sql(ranges: NodeRanges, dense: str) -> str:
    """BigQuery SQL of ``NodeRanges.partition_of`` over the INT64 expression ``dense``."""
    a, c = divmod(ranges.count, ranges.num_partitions)
    big = c * (a + 1)
    return (f"(CASE WHEN ({dense}) < {big} THEN DIV(({dense}), {a + 1}) "
            f"ELSE {c} + DIV((({dense}) - {big}), {max(a, 1)}) END)")


def _counts(jobs: BigQueryJobs, key: str, table: str, num_partitions: int) -> tuple[int, ...]:
    rows = jobs.run(f"counting the edges of {key} per partition",
                    f"SELECT part, COUNT(*) FROM `{table}` GROUP BY part")
    found = {int(p): int(n) for p, n in rows}
    return tuple(found.get(p, 0) for p in range(num_partitions))


def endpoint_check_sql(ref: str, src_column: str, dst_column: str) -> str:
    """The first statement on an edge table ``ref``: its rows and the null ids of each endpoint
    column. It reads only the source table (``pipeline plan`` dry-runs it)."""
    sc, dc = quoted(src_column), quoted(dst_column)
    return (f"SELECT COUNT(*), COUNTIF({sc} IS NULL), COUNTIF({dc} IS NULL) "
            f"FROM {quoted(ref)}")


def map_edges(jobs: BigQueryJobs, key: str, src: SourceColumn, dst: SourceColumn,
              src_nodes: NumberedNodes, dst_nodes: NumberedNodes,
              anchor: Literal["src", "dst"], dangling: Literal["error", "drop"],
              weight: ValueColumns = NO_VALUES, features: ValueColumns = NO_VALUES
              ) -> DenseEdges:
    """Map one edge table (``src`` and ``dst``: its two endpoint columns, one table) to dense ids
    and partitions (module docs), carrying its checked ``weight`` and ``features``
    (graphstore.partition.bigquery_values)."""
    if src.ref != dst.ref:
        raise ValueError(f"{key}: the endpoints of one edge type come from one table")
    raw, sc, dc = quoted(src.ref), quoted(src.column), quoted(dst.column)
    ((total, src_nulls, dst_nulls),) = jobs.run(f"checking the endpoints of {key}",
                                                endpoint_check_sql(src.ref, src.column,
                                                                   dst.column))
    if total == 0:
        raise InputDataError(f"{src.uri}: edge table for {key} is empty")
    for column, nulls in ((src.column, src_nulls), (dst.column, dst_nulls)):
        if nulls:
            raise InputDataError(f"{src.uri}: column {column!r}: null id ({nulls} null(s) in "
                                 "total)")
    nodes = src_nodes if anchor == "src" else dst_nodes
    values = weight.select("e", ("weight",)) + features.select("e", feature_names(features.width))
    table = jobs.create_scratch(
        f"mapping the edges of {key} to dense ids", f"edges_{key}",
        f"SELECT s.int_id AS src, d.int_id AS dst, "
        f"{partition_of_sql(nodes.ranges, anchor[0] + '.int_id')} AS part"
        + "".join(f", {v}" for v in values) + f" FROM {raw} AS e "
        f"JOIN `{src_nodes.table}` AS s ON e.{sc} = s.raw_id "
        f"JOIN `{dst_nodes.table}` AS d ON e.{dc} = d.raw_id",
        partitions=nodes.ranges.num_partitions)
    counts = _counts(jobs, key, table, nodes.ranges.num_partitions)
    missing = int(total) - sum(counts)
    if missing and dangling == "error":
        for column, ends in ((src, src_nodes), (dst, dst_nodes)):
            col = quoted(column.column)
            found = jobs.run(
                f"finding an edge of {key} whose {column.column!r} is not a node",
                f"SELECT e.{col} FROM {raw} AS e LEFT JOIN `{ends.table}` AS n "
                f"ON e.{col} = n.raw_id WHERE n.raw_id IS NULL ORDER BY e.{col} LIMIT 1")
            if found:
                raise InputDataError(
                    f"{src.uri}: column {column.column!r}: id {str(found[0][0])!r} is not in the "
                    f"{ends.node_type!r} node table ({missing} such edge(s) in total; set "
                    "datasetConfig.partitionConfig.danglingEdges: drop to drop them)")
    if missing:
        log.warning("edges %s: dropped %d edge(s) whose endpoint is not in its node table "
                    "(danglingEdges: drop)", key, missing)
    return DenseEdges(key=key, table=table, counts=counts, dropped=missing,
                      has_weight=bool(weight.width), feature_dim=features.width)


def reverse_edges(jobs: BigQueryJobs, edges: DenseEdges, reverse_key: str,
                  new_anchor_nodes: NumberedNodes, anchor: Literal["src", "dst"]) -> DenseEdges:
    """``edges`` flipped (dst -> src) as the type ``reverse_key``, each placed by its own anchor
    (``anchor`` of the flipped edge, a node of ``new_anchor_nodes``), with the same values."""
    end = "dst" if anchor == "src" else "src"  # the flipped edge's anchor, in the original
    table = jobs.create_scratch(
        f"writing the reverse edges {reverse_key}", f"edges_{reverse_key}",
        f"SELECT dst AS src, src AS dst, {partition_of_sql(new_anchor_nodes.ranges, end)} AS part"
        + "".join(f", {c}" for c in edges.value_columns) + f" FROM `{edges.table}`",
        partitions=new_anchor_nodes.ranges.num_partitions)
    counts = _counts(jobs, reverse_key, table, new_anchor_nodes.ranges.num_partitions)
    return DenseEdges(key=reverse_key, table=table, counts=counts, dropped=0,
                      has_weight=edges.has_weight, feature_dim=edges.feature_dim)


def labels_by_source(jobs: BigQueryJobs, edges: DenseEdges, src_nodes: NumberedNodes
                     ) -> DenseEdges:
    """A supervision type's labels: ``edges``' ``(src, dst)`` placed by the source (the anchor
    of link prediction), in the scratch table ``labels_<key>``."""
    table = jobs.create_scratch(
        f"placing the labels of {edges.key} by source", f"labels_{edges.key}",
        f"SELECT src, dst, {partition_of_sql(src_nodes.ranges, 'src')} AS part "
        f"FROM `{edges.table}`", partitions=src_nodes.ranges.num_partitions)
    counts = _counts(jobs, edges.key, table, src_nodes.ranges.num_partitions)
    return DenseEdges(key=edges.key, table=table, counts=counts, dropped=0)
