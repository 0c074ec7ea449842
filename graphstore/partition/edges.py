"""Edge types: mapping raw endpoints to dense ids and writing the edges split by partition
(step 3 of :mod:`graphstore.partition.engine`), with the reverse type and the labels.

Per edge type, :func:`write_edge_type` takes one of two paths that write the same rows:

- **in memory** (Parquet input, both endpoint types have an id lookup in the workspace): one
  chunked pass over the raw file writes the edge type, its reverse type and its labels
  (:mod:`graphstore.partition.edge_stream`); files ``<chunk:06d>.parquet``;
- **DuckDB** (anything else): a join of the raw table with both node tables, ``COPY ...
  PARTITION_BY``, which spills to disk; the reverse type and the labels are then read back from
  the written edges.

Placement rules:
- a graph edge lives in the partition of its *anchor*: the destination for
  ``sample_edge_direction: in``, the source for ``out``; a reverse edge (dst -> src) by its own
  anchor, like any other edge type;
- labels (supervision types) live with their source, the anchor of link prediction: the splitter
  and ``fetch_ablp_input`` need each anchor's positives on its own storage. With ``in`` sampling
  the reverse type is already placed that way, so its files serve as the labels
  (``labels_from``) instead of a second copy;
- a hard-negative edge type (``hardNegativeEdgeTypes``) is written as labels only, placed by its
  source like supervision labels: no graph edges (it never passes messages, so its edge counts
  are 0), no reverse type, no weight or features; its manifest entry names its supervision type
  (``negative_of``).

Missing rows: fewer rows out than in means null or dangling endpoints: an error naming the first
offending row, or (``danglingEdges: drop``) a warning and a count in ``ws.dropped``.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Mapping

from graphstore.runtime.errors import InputDataError
from graphstore.io.literal_paths import duckdb_literal_glob
from graphstore.partition import read_errors
from graphstore.partition import sources as src_mod
from graphstore.partition.edge_stream import EdgeOutput, stream_edges
from graphstore.partition.sources import IdKind, Table, id_expr, sql_ident, sql_str
from graphstore.partition.workspace import Workspace, log_rate
from graphstore.formats.shards.format import EdgeTypeInfo, anchor_side, edge_dir, label_dir

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import EdgeSource, EdgeType

log = logging.getLogger(__name__)
ValueChecks = list[tuple[tuple[str, ...], str]]
"""(columns, config key) of an edge type's weight and feature groups."""


def write_edge_type(ws: Workspace, key: str, es: "EdgeSource", table: Table,
                    kinds: dict[str, IdKind], supervision: set[str],
                    negatives: Mapping[str, str] | None = None) -> dict[str, EdgeTypeInfo]:
    """Write one edge type, its reverse (when added) and its labels (supervision types); return
    the manifest entry of each type written (rules in the module docstring). ``negatives``:
    hard-negative edge type -> the supervision type it serves (written as labels only)."""
    negative_of = (negatives or {}).get(key)
    if negative_of is not None:
        return {key: write_negative_type(ws, key, es, table, kinds, negative_of)}
    et = es.edge_type
    reverse_key = None
    if ws.task.dataset.partition.add_reverse_edges and et.src_node_type != et.dst_node_type:
        reverse_key = str(et.reverse())
    labels_from = reverse_key if key in supervision and ws.direction == "in" else None
    own_labels = key in supervision and not labels_from
    if can_stream(ws, es, table):
        has_weight, width = write_streamed(ws, key, es, table, kinds, reverse_key, own_labels)
    else:
        has_weight, width = write_joined(ws, key, es, table, kinds)
        if reverse_key:
            write_reverse(ws, key, et, reverse_key, has_weight, width)
        if own_labels:
            write_labels(ws, key, et)
    written = [(key, et, None)] + ([(reverse_key, et.reverse(), key)] if reverse_key else [])
    infos = {}
    for out_key, out_et, reverse_of in written:
        counts = ws.rows_per_partition(lambda p, k=out_key: edge_dir(p, k))
        labels = None
        if out_key in supervision:
            labels = (ws.rows_per_partition(lambda p: edge_dir(p, labels_from)) if labels_from
                      else ws.rows_per_partition(lambda p: label_dir(p, out_key)))
        infos[out_key] = EdgeTypeInfo(
            src_node_type=out_et.src_node_type, relation=out_et.relation,
            dst_node_type=out_et.dst_node_type, count=sum(counts), counts_per_partition=counts,
            has_weight=has_weight, feature_dim=width, is_supervision=out_key in supervision,
            reverse_of=reverse_of, labels_per_partition=labels,
            labels_from=labels_from if out_key == key else None,
            dropped_dangling=ws.dropped.get(out_key, 0))
    return infos


def write_negative_type(ws: Workspace, key: str, es: "EdgeSource", table: Table,
                        kinds: dict[str, IdKind], negative_of: str) -> EdgeTypeInfo:
    """Write a hard-negative edge type as labels only, placed by source (module docstring)."""
    if can_stream(ws, es, table):
        write_streamed(ws, key, es, table, kinds, None, True, graph_edges=False)
    else:
        write_joined(ws, key, es, table, kinds, as_labels=True)
    et = es.edge_type
    return EdgeTypeInfo(
        src_node_type=et.src_node_type, relation=et.relation, dst_node_type=et.dst_node_type,
        count=0, counts_per_partition=(0,) * ws.P, has_weight=False, feature_dim=0,
        is_supervision=False, labels_per_partition=ws.rows_per_partition(lambda p: label_dir(p, key)),
        negative_of=negative_of, dropped_dangling=ws.dropped.get(key, 0))


def check_edge_table(ws: Workspace, key: str, es: "EdgeSource", table: Table,
                     scan: bool = True) -> int:
    """Reject an empty table and bad weights or features; return the feature width.

    With ``scan=False`` only the column types are checked when every weight and feature
    column is scalar (the caller checks the values, see :func:`sources.report_bad_values`).
    """
    if table.num_rows == 0:
        raise InputDataError(f"{table.uri}: edge table for {key} is empty")
    checks = _value_checks(key, es)
    if not scan and not any(cols and src_mod.features_are_one_list(table, cols, ck)
                            for cols, ck in checks):
        return len(es.feature_columns)
    widths = [src_mod.check_features(ws.db, table, table.relation, cols, ck)
              for cols, ck in checks]
    return widths[-1]


def _value_checks(key: str, es: "EdgeSource") -> ValueChecks:
    """(columns, config key) of an edge type's weight and feature values."""
    cfg = f"datasetConfig.dataSources.edges[{key}]"
    checks = [((es.weight_column,), f"{cfg}.weightColumn")] if es.weight_column else []
    return checks + [(es.feature_columns, f"{cfg}.featureColumns")]


def can_stream(ws: Workspace, es: "EdgeSource", table: Table) -> bool:
    """True when :func:`write_streamed` can write this edge type (Parquet, id maps in memory)."""
    et = es.edge_type
    return (table.fmt == "parquet" and ws.lookups.get(et.src_node_type) is not None
            and ws.lookups.get(et.dst_node_type) is not None)


@read_errors.step("writing edges {key}", "table")
def write_streamed(ws: Workspace, key: str, es: "EdgeSource", table: Table,
                   kinds: dict[str, IdKind], reverse_key: str | None,
                   own_labels: bool, graph_edges: bool = True) -> tuple[bool, int]:
    """Write one edge type, its reverse type and its labels in one chunked pass over the
    raw file (:mod:`graphstore.partition.edge_stream`); returns (has_weight, feature_dim).
    ``graph_edges`` False: the labels only (a hard-negative type)."""
    t0 = time.perf_counter()
    width = check_edge_table(ws, key, es, table, scan=False)
    et = es.edge_type
    outputs = [EdgeOutput(lambda p: os.path.join(ws.out, edge_dir(p, key)),
                          "src", anchor_side(ws.direction), True)] if graph_edges else []
    if reverse_key:  # the flipped edge's anchor: old src for "in" sampling, old dst for "out"
        outputs.append(EdgeOutput(lambda p: os.path.join(ws.out, edge_dir(p, reverse_key)),
                                  "dst", "src" if ws.direction == "in" else "dst", True))
    if own_labels:  # labels sit with their source, the anchor of link prediction
        outputs.append(EdgeOutput(lambda p: os.path.join(ws.out, label_dir(p, key)),
                                  "src", "src", False))
    result = stream_edges(
        table.path, src_column=es.src_column, dst_column=es.dst_column,
        weight_column=es.weight_column, feature_columns=es.feature_columns,
        feature_width=width, src_lookup=ws.lookups[et.src_node_type],
        dst_lookup=ws.lookups[et.dst_node_type], num_partitions=ws.P, outputs=outputs,
        compression=ws.compression, stop_on_missing=ws.dangling == "error",
        budget_bytes=ws.lookup_budget, label=f"edges {key}", source=table.uri, tuning=ws.tuning)
    if result.bad_values:
        src_mod.report_bad_values(ws.db, table, _value_checks(key, es))
    if result.missing:
        missing = result.missing
        if result.stopped_early:  # the pass stopped at the first bad chunk: count them all
            missing = table.num_rows - ws.db.execute(
                f"SELECT count(*) FROM {table.relation} e "
                f"JOIN {ws.node_table(et.src_node_type)} s "
                f"ON {id_expr(es.src_column, kinds[et.src_node_type], 'e')} = s.raw_id "
                f"JOIN {ws.node_table(et.dst_node_type)} d "
                f"ON {id_expr(es.dst_column, kinds[et.dst_node_type], 'e')} = d.raw_id"
            ).fetchone()[0]
        _explain_missing_edges(ws, key, es, table, kinds, missing)
    written = " + reverse" * bool(reverse_key) + " + labels" * own_labels
    if not graph_edges:
        written = " as labels only (hard negatives)"
    log_rate(log, f"edges {key}{written} (in memory)", table.num_rows, t0)
    ws.stats[f"edges_per_s.{key}"] = round(table.num_rows / (time.perf_counter() - t0), 1)
    return bool(es.weight_column), width


@read_errors.step("writing edges {key}", "table")
def write_joined(ws: Workspace, key: str, es: "EdgeSource", table: Table,
                 kinds: dict[str, IdKind], as_labels: bool = False) -> tuple[bool, int]:
    """Write one edge type split by partition with a DuckDB join (any size, spills);
    returns (has_weight, feature_dim). ``as_labels``: into ``labels/``, placed by source,
    ``src`` and ``dst`` only (a hard-negative type)."""
    t0 = time.perf_counter()
    et = es.edge_type
    width = check_edge_table(ws, key, es, table)
    cols = [f"{id_expr(es.src_column, kinds[et.src_node_type])} AS __s",
            f"{id_expr(es.dst_column, kinds[et.dst_node_type])} AS __d"]
    out_cols = ["s.int_id AS src", "d.int_id AS dst"]
    if es.weight_column and not as_labels:
        cols.append(f"CAST({sql_ident(es.weight_column)} AS FLOAT) AS __w")
        out_cols.append("e.__w AS weight")
    if width and not as_labels:
        cols.append(src_mod.feature_sql(table, es.feature_columns, width))
        out_cols.extend(f"e.f_{i}" for i in range(width))
    anchor = "s" if as_labels or anchor_side(ws.direction) == "src" else "d"
    anchor_type = et.src_node_type if anchor == "s" else et.dst_node_type
    part = ws.ranges[anchor_type].sql_partition_of(f"{anchor}.int_id")
    target = os.path.join(ws.hive, "labels" if as_labels else "edges", key)
    written = ws.db.execute(
        f"COPY (SELECT {', '.join(out_cols)}, {part} AS part "
        f"FROM (SELECT {', '.join(cols)} FROM {table.relation}) e "
        f"JOIN {ws.node_table(et.src_node_type)} s ON e.__s = s.raw_id "
        f"JOIN {ws.node_table(et.dst_node_type)} d ON e.__d = d.raw_id) "
        f"TO {sql_str(target)} ({ws.parquet}, PARTITION_BY (part))"
    ).fetchone()[0]
    missing = table.num_rows - int(written)
    if missing:
        _explain_missing_edges(ws, key, es, table, kinds, missing)
    ws.move_hive(target, lambda p: (label_dir if as_labels else edge_dir)(p, key))
    log_rate(log, f"edges {key}" + " as labels only (hard negatives)" * as_labels, table.num_rows, t0)
    ws.stats[f"edges_per_s.{key}"] = round(table.num_rows / (time.perf_counter() - t0), 1)
    return bool(es.weight_column), width


@read_errors.step("writing labels {key}")
def write_labels(ws: Workspace, key: str, et: "EdgeType") -> None:
    """Copy a supervision edge type's edges into ``labels/``, placed by the source (anchor).

    Graph edges are placed by the sampling anchor, which for ``in`` is the destination; the
    splitter and ``fetch_ablp_input`` need each anchor's positives on the anchor's own storage.
    """
    t0 = time.perf_counter()
    files = _edge_files(ws, key)
    target = os.path.join(ws.hive, "labels", key)
    part = ws.ranges[et.src_node_type].sql_partition_of("src")
    rows = ws.db.execute(
        f"COPY (SELECT src, dst, {part} AS part FROM read_parquet([{files}])) "
        f"TO {sql_str(target)} ({ws.parquet}, PARTITION_BY (part))"
    ).fetchone()[0]
    ws.move_hive(target, lambda p: label_dir(p, key))
    log_rate(log, f"labels {key} (placed by source)", int(rows), t0)


def _edge_files(ws: Workspace, key: str) -> str:
    """SQL list items of the written Parquet files of an edge type."""
    return ", ".join(sql_str(duckdb_literal_glob(os.path.join(ws.out, edge_dir(p, key)),
                                                 "*.parquet"))
                     for p in range(ws.P)
                     if os.path.isdir(os.path.join(ws.out, edge_dir(p, key))))


@read_errors.step("writing edges {reverse_key}")
def write_reverse(ws: Workspace, key: str, et: "EdgeType", reverse_key: str, has_weight: bool,
                  width: int) -> None:
    """Write ``reverse_key`` (dst -> src of ``key``) from the already-written dense edges.

    Each reversed edge is placed by its own anchor, like any other edge type.
    """
    t0 = time.perf_counter()
    extra = (", weight" if has_weight else "") + "".join(f", f_{i}" for i in range(width))
    # the reversed edge's anchor: its new dst (= old src) for "in", its new src (= old dst) for "out"
    anchor = "src" if ws.direction == "in" else "dst"
    part = ws.ranges[et.src_node_type if anchor == "src" else et.dst_node_type].sql_partition_of(
        anchor)
    target = os.path.join(ws.hive, "edges", reverse_key)
    rows = ws.db.execute(
        f"COPY (SELECT dst AS src, src AS dst{extra}, {part} AS part "
        f"FROM read_parquet([{_edge_files(ws, key)}])) "
        f"TO {sql_str(target)} ({ws.parquet}, PARTITION_BY (part))"
    ).fetchone()[0]
    ws.move_hive(target, lambda p: edge_dir(p, reverse_key))
    log_rate(log, f"edges {reverse_key} (reverse of {key})", int(rows), t0)


def _explain_missing_edges(ws: Workspace, key: str, es: "EdgeSource", table: Table,
                           kinds: dict[str, IdKind], missing: int) -> None:
    """``missing`` rows were not written: raise for a null id or (``danglingEdges: error``) the
    first endpoint absent from its node table; with ``drop``, warn and record the count."""
    for col in (es.src_column, es.dst_column):
        nulls = ws.db.execute(
            f"SELECT count_if({sql_ident(col)} IS NULL) FROM {table.relation}").fetchone()[0]
        if nulls:
            src_mod.report_null_ids(ws.db, table, col)
    if ws.dangling == "drop":
        log.warning("edges %s: dropped %d edge(s) whose endpoint is not in its node table "
                    "(danglingEdges: drop)", key, missing)
        ws.dropped[key] = missing
        return
    et = es.edge_type
    for col, nt in ((es.src_column, et.src_node_type), (es.dst_column, et.dst_node_type)):
        row = ws.db.execute(
            f"SELECT e.__row, CAST(e.{sql_ident(col)} AS VARCHAR) FROM {table.numbered()} e "
            f"ANTI JOIN {ws.node_table(nt)} n ON {id_expr(col, kinds[nt], 'e')} = n.raw_id "
            f"ORDER BY e.__row LIMIT 1"
        ).fetchone()
        if row:
            raise InputDataError(
                f"{table.uri}: column {col!r} row {row[0]}: id {row[1]!r} is not in the "
                f"{nt!r} node table ({missing} such edge(s) in total; set "
                f"datasetConfig.partitionConfig.danglingEdges: drop to drop them)"
            )
