"""Node types: numbering their ids (step 2 of :mod:`graphstore.partition.engine`) and writing
their id maps, partition books and per-partition node files (step 4).

Numbering: from the node table when one is given (nulls, duplicates, bad features rejected, each
error naming its row), else from the distinct edge endpoints. Raw ids sorted ascending (strings:
UTF-8 byte order) get ranks, and ranks dense ids by the ranges rule of the format
(:class:`~graphstore.formats.shards.format.NodeRanges`), on both paths. A Parquet node table with scalar features that fits
the workspace's ``lookup_budget`` (``PartitionTuning.lookup_share`` of ``memoryLimitMb``) is read
and sorted in memory (:mod:`graphstore.partition.node_arrays`); otherwise DuckDB sorts it into a
table ``(int_id, raw_id)`` (``int_id`` the dense id), which a type numbered in memory also gets, on demand
(:meth:`Workspace.node_table`). :func:`build_lookup` then keeps the raw ids as an in-memory id map
for the edge pass when they fit the same budget.

Node outputs: ``id_map/<type>.parquet`` (int_id, raw_id, ascending int_id) and
``part_<p>/nodes/<type>/`` (the range of dense ids partition ``p`` owns, and their features).
No partition book is written: the manifest's counts are the ranges. Step 4 only reads what step
2 left in the workspace, so it runs beside the edge step.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from graphstore.runtime.errors import InputDataError
from graphstore.partition import node_arrays, read_errors
from graphstore.partition import sources as src_mod
from graphstore.partition.edge_stream import IdLookup, row_group_rows
from graphstore.partition.sources import IdKind, Table, id_expr, sql_ident, sql_str
from graphstore.partition.workspace import Workspace, log_rate
from graphstore.formats.shards.format import NodeRanges, id_map_path, node_dir

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import EdgeSource, NodeSource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeType:
    """A numbered node type: ``count`` dense ids ``0..count-1``; ``feature_dim`` 0 without
    features (always 0 for a type numbered from its edges)."""

    name: str
    kind: IdKind
    count: int
    feature_dim: int


@read_errors.step("numbering node type {nt!r}", "table")
def number_from_table(ws: Workspace, nt: str, ns: "NodeSource", table: Table,
                      kind: IdKind) -> NodeType:
    """Number a node table's ids (in memory when it fits ``ws.lookup_budget``, else in
    DuckDB); null and duplicate ids are errors naming their rows."""
    t0 = time.perf_counter()
    if table.num_rows == 0:
        raise InputDataError(f"{table.uri}: node table for {nt!r} is empty")
    key = f"datasetConfig.dataSources.nodes[{nt}].featureColumns"
    scalar = not (ns.feature_columns and src_mod.features_are_one_list(
        table, ns.feature_columns, key))
    width = len(ns.feature_columns)
    in_memory = scalar and table.fmt == "parquet" and node_arrays.estimated_bytes(
        table.num_rows, kind == "string", width) <= ws.lookup_budget
    if not in_memory:  # values checked by a scan; in memory they are checked once read
        width = src_mod.check_features(ws.db, table, table.relation, ns.feature_columns, key)
    nodes = ws.node_table(nt)
    if in_memory:
        arrays = node_arrays.read_nodes(table.path, ns.id_column, kind == "string",
                                        ns.feature_columns, width, source=table.uri)
        if arrays.feats is not None and not np.isfinite(arrays.feats).all():
            src_mod.report_bad_values(ws.db, table, [(ns.feature_columns, key)])
        nulls, distinct = arrays.nulls, table.num_rows - arrays.duplicates
    else:
        rank = "row_number() OVER (ORDER BY raw_id) - 1"
        ws.db.execute(
            f"CREATE TABLE {nodes} AS SELECT "
            f"{NodeRanges(table.num_rows, ws.P).sql_dense_of_rank(rank)} AS int_id, "
            f"raw_id FROM (SELECT {id_expr(ns.id_column, kind)} AS raw_id FROM {table.relation})"
        )
        nulls, distinct = ws.db.execute(
            f"SELECT count_if(raw_id IS NULL), count(DISTINCT raw_id) FROM {nodes}").fetchone()
    if nulls:
        src_mod.report_null_ids(ws.db, table, ns.id_column)
    if distinct != table.num_rows:
        _report_duplicates(ws, table, ns.id_column, distinct)
    if in_memory:
        ws.node_arrays[nt] = arrays
    ws.ranges[nt] = NodeRanges(table.num_rows, ws.P)
    ws.node_tables[nt] = (ns, table, kind)
    log_rate(log, f"nodes {nt}" + " (in memory)" * in_memory, table.num_rows, t0)
    return NodeType(nt, kind, table.num_rows, width)


def _report_duplicates(ws: Workspace, table: Table, id_column: str, distinct: int) -> None:
    """Raise the error for a node table with ``table.num_rows - distinct`` duplicate ids,
    naming the first duplicated id and its rows."""
    idc = sql_ident(id_column)
    raw, rows = ws.db.execute(
        f"SELECT CAST({idc} AS VARCHAR), list(__row ORDER BY __row) FROM {table.numbered()} "
        f"GROUP BY {idc} HAVING count(*) > 1 ORDER BY min(__row) LIMIT 1"
    ).fetchone()
    raise InputDataError(
        f"{table.uri}: column {id_column!r}: duplicate node id {raw!r} at rows "
        f"{', '.join(map(str, rows[:5]))} ({table.num_rows - distinct} duplicate row(s))"
    )


@read_errors.step("numbering node type {nt!r} from its edges", "edge_tables")
def number_from_edges(ws: Workspace, nt: str, kind: IdKind,
                      edge_tables: dict[str, tuple["EdgeSource", Table]]) -> NodeType:
    """Number a node type without a node table: the distinct non-null ids of every edge column
    that holds it (a null endpoint is reported by the edge step)."""
    t0 = time.perf_counter()
    selects = []
    for es, table in edge_tables.values():
        if es.edge_type.src_node_type == nt:
            selects.append(f"SELECT {id_expr(es.src_column, kind)} AS raw_id FROM {table.relation}")
        if es.edge_type.dst_node_type == nt:
            selects.append(f"SELECT {id_expr(es.dst_column, kind)} AS raw_id FROM {table.relation}")
    union = " UNION ALL ".join(selects)
    name = ws.node_table(nt)
    ws.db.execute(  # ranks first: the count the dense ids depend on is known only then
        f"CREATE TABLE {name} AS SELECT row_number() OVER (ORDER BY raw_id) - 1 "
        f"AS int_id, raw_id FROM (SELECT DISTINCT raw_id FROM ({union}) WHERE raw_id IS NOT NULL)"
    )
    count = ws.db.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    ws.ranges[nt] = NodeRanges(int(count), ws.P)
    ws.db.execute(f"UPDATE {name} SET int_id = {ws.ranges[nt].sql_dense_of_rank('int_id')}")
    log_rate(log, f"nodes {nt} (from edge endpoints)", count, t0)
    return NodeType(nt, kind, int(count), 0)


@read_errors.step("mapping the ids of {nt!r} in memory")
def build_lookup(ws: Workspace, nt: str) -> None:
    """Keep ``nt``'s raw ids in memory for the chunked edge path when they fit the budget
    (``ws.lookups[nt]``: the lookup, or None)."""
    t0 = time.perf_counter()
    if nt in ws.node_arrays:
        ws.lookups[nt] = IdLookup.build(ws.node_arrays[nt].sorted_ids, ws.lookup_budget, ws.P)
    else:  # numbered in DuckDB: fetch the ids only if a lookup of them could fit
        count, low, high = ws.db.execute(
            f"SELECT count(*), min(raw_id), max(raw_id) FROM {ws.node_table(nt)}").fetchone()
        integer_ids = isinstance(low, int)
        span = high - low + 1 if integer_ids else 0
        ws.lookups[nt] = None
        if count and IdLookup.could_fit(integer_ids, count, span, ws.lookup_budget):
            ids = ws.db.execute(f"SELECT raw_id FROM {ws.node_table(nt)} ORDER BY raw_id"
                                ).to_arrow_table().column(0).combine_chunks()
            ws.lookups[nt] = IdLookup.build(ids, ws.lookup_budget, ws.P)
    log.info("step=%r in_memory=%s seconds=%.2f", f"id lookup {nt}",
             ws.lookups[nt] is not None, time.perf_counter() - t0)


@read_errors.step("writing the id map and node files of {node.name!r}")
def write_node_outputs(ws: Workspace, node: NodeType) -> None:
    """Write a numbered type's id map and per-partition node files."""
    t0 = time.perf_counter()
    nt = node.name
    os.makedirs(os.path.join(ws.out, "id_map"), exist_ok=True)
    arrays = ws.node_arrays.get(nt)
    # a type numbered in memory writes from its arrays; ws.node_table() would build its
    # DuckDB table, which only the SQL paths need
    table = None if arrays is not None else ws.node_table(nt)
    if arrays is not None:
        node_arrays.write_id_map(arrays, ws.P, os.path.join(ws.out, id_map_path(nt)),
                                 ws.compression)
    else:
        ws.db.execute(
            f"COPY (SELECT int_id, raw_id FROM {table} ORDER BY int_id) TO "
            f"{sql_str(os.path.join(ws.out, id_map_path(nt)))} ({ws.parquet})"
        )
    if arrays is not None:
        node_arrays.write_node_files(arrays, ws.P, lambda p: os.path.join(ws.out, node_dir(p, nt)),
                                     ws.compression)
        log_rate(log, f"id map + node files {nt} (in memory)", node.count, t0)
        return
    target = os.path.join(ws.hive, "nodes", nt)
    part = ws.ranges[nt].sql_partition_of("n.int_id")
    if nt in ws.node_tables and node.feature_dim:
        ns, raw, kind = ws.node_tables[nt]
        feats = src_mod.feature_sql(raw, ns.feature_columns, node.feature_dim, alias="r")
        source = (f"SELECT n.int_id, {feats}, {part} AS part FROM {raw.relation} r "
                  f"JOIN {table} n ON {id_expr(ns.id_column, kind, 'r')} = n.raw_id")
    else:
        source = f"SELECT n.int_id, {part} AS part FROM {table} n"
    # int_id and float32 features; DuckDB rounds a row group up to a multiple of 2048 rows
    rows = max(2048, row_group_rows(8 + 4 * node.feature_dim) // 2048 * 2048)
    ws.db.execute(f"COPY ({source}) TO {sql_str(target)} ({ws.parquet}, ROW_GROUP_SIZE {rows}, "
                  "PARTITION_BY (part))")
    ws.move_hive(target, lambda p: node_dir(p, nt))
    log_rate(log, f"id map + node files {nt}", node.count, t0)
