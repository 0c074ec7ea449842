"""The partition stage: raw node/edge tables -> a shard set (format: graphstore.shards.format).

Order of work (each step logs rows and rows/s):
  1. open every source (gs:// inputs are streamed to a local work folder first) and check columns
     and id types agree per node type;
  2. per node type (two at a time), number the ids: from the node table when one is given
     (nulls, duplicates, bad features rejected), else the distinct edge endpoints; dense ids
     follow ascending raw id. A Parquet node table that fits :data:`LOOKUP_SHARE` of
     ``memoryLimitMb`` is read and sorted in memory (:mod:`graphstore.partition.node_arrays`),
     otherwise DuckDB sorts it; either way a DuckDB table ``(int_id, raw_id)`` results;
  3. per edge type, both endpoints are mapped to dense ids and the edges written split by the
     anchor's partition: in one chunked pass that also writes the reverse type and the labels
     when both id maps fit in memory (:mod:`graphstore.partition.edge_stream`, Parquet input),
     else by a DuckDB join that spills; fewer rows out than in means null or dangling
     endpoints: an error naming the first offending row, or (``danglingEdges: drop``) a count;
  4. id maps, partition books and per-partition node files (steps 3 and 4 run two at a time,
     :data:`PARALLEL_STEPS`; they only read the node tables);
  5. checksums, then ``manifest.json`` LAST, then the new version is published: the output's
     ``CURRENT`` pointer switches to it in one atomic step (graphstore.shards.publish).

Memory: DuckDB runs with ``memoryLimitMb`` and spills to the run's work folder; a node table or id
map held in memory may use up to :data:`LOOKUP_SHARE` of that limit, and so may the chunks of the
edge pass. Peak RSS does not grow with the edge count. The new shard set is written into its own
version folder under the output (gs://: built locally, then uploaded); a crash at any moment
leaves the previous version current and complete, and never a manifest for a partial set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Literal, Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphstore import uris
from graphstore.errors import InputDataError, UsageError
from graphstore.literal_paths import duckdb_literal_glob
from graphstore.partition import node_arrays, read_errors
from graphstore.partition import sources as src_mod
from graphstore.partition.edge_stream import EdgeOutput, IdLookup, stream_edges
from graphstore.partition.sources import IdKind, Table, id_expr, sql_ident, sql_str
from graphstore.shards.format import (
    MANIFEST,
    SCHEMA_VERSION,
    EdgeTypeInfo,
    FileEntry,
    Manifest,
    NodeTypeInfo,
    anchor_side,
    edge_dir,
    id_map_path,
    label_dir,
    node_dir,
    partition_book_path,
)
from graphstore.shards.publish import MARKER, NewVersion, ShardRoot
from graphstore.shards.reader import sha256_file

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import EdgeSource, NodeSource, TaskConfig

log = logging.getLogger(__name__)
PARALLEL_STEPS = 2
"""Edge-type and node-file steps run this many at a time (each on its own DuckDB connection;
DuckDB's own threads and ``memoryLimitMb`` are shared by all of them)."""
LOOKUP_SHARE = 0.25
"""Fraction of ``memoryLimitMb`` one node type's in-memory id map may take (else: SQL join)."""


@dataclass(frozen=True)
class _NodeType:
    name: str
    kind: IdKind
    count: int
    feature_dim: int


def _fmt(uri: str, declared: str | None) -> Literal["parquet", "csv"]:
    if declared:
        return declared  # type: ignore[return-value]
    return "csv" if uri.lower().endswith((".csv", ".csv.gz")) else "parquet"


class _Run:
    """State of one partition run (a DuckDB connection and the staging folders)."""

    def __init__(self, task: "TaskConfig", num_partitions: int, work_dir: str, out_dir: str) -> None:
        """``out_dir``: the (existing) folder the shard files go to; ``work_dir``: scratch on
        the same file system (hive folders are moved from there into ``out_dir``)."""
        self.task = task
        self.P = num_partitions
        self.direction = task.trainer.storage.storage_args.sample_edge_direction
        self.out = out_dir
        self.work = work_dir
        self.hive = os.path.join(work_dir, "hive")
        os.makedirs(os.path.join(self.hive, "edges"))
        os.makedirs(os.path.join(self.hive, "nodes"))
        os.makedirs(os.path.join(self.hive, "labels"))
        pcfg = task.dataset.partition
        self.dangling = pcfg.dangling_edges
        self.memory_limit_mb = pcfg.memory_limit_mb  # named when a step runs out of memory
        # COPY options of every file written; uncompressed is the default: dense int64 ids and
        # float features barely compress, and snappy cost ~25% of the run (DuckDB 1.5.5, 10 M edges)
        self.parquet = f"FORMAT PARQUET, COMPRESSION {sql_str(pcfg.parquet_compression)}"
        self.con = duckdb.connect(config={
            "memory_limit": f"{pcfg.memory_limit_mb}MB",
            "temp_directory": os.path.join(work_dir, "spill"),
            "preserve_insertion_order": False,
        })
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._cursor_lock = threading.Lock()
        self.dropped: dict[str, int] = {}
        self.node_tables: dict[str, tuple] = {}  # node type -> (NodeSource, Table, IdKind)
        self.node_arrays: dict[str, node_arrays.NodeArrays] = {}  # node tables held in memory
        self._node_tables_made: set[str] = set()  # of those, which have their DuckDB table too
        self._node_table_lock = threading.Lock()
        self.lookups: dict[str, IdLookup | None] = {}  # node type -> in-memory id map, if it fits
        self.lookup_budget = int(pcfg.memory_limit_mb * LOOKUP_SHARE) << 20
        self.stats: dict[str, float] = {}

    @property
    def db(self) -> duckdb.DuckDBPyConnection:
        """The calling thread's connection to the run's database (steps 3 and 4 run on a few
        threads at once; a DuckDB connection must not be shared between threads)."""
        cur = getattr(self._local, "con", None)
        if cur is None:
            cur = self.con.cursor()
            cur.execute("SET enable_progress_bar = false")
            self._local.con = cur
            with self._cursor_lock:
                self._cursors.append(cur)
        return cur

    def close(self) -> None:
        """Close every DuckDB connection (idempotent)."""
        for cur in self._cursors:
            cur.close()
        self._cursors.clear()
        self.con.close()

    # -- 1. sources ---------------------------------------------------------------------------
    @read_errors.step("opening {uri}")
    def open_source(self, uri: str, declared_format: str | None,
                    columns: Sequence[str]) -> Table:
        """A source table, local, on gs:// (copied locally) or in BigQuery (``bq://``: the
        ``columns`` the config uses copied to a local Parquet file, graphstore.bigquery_source)."""
        inputs = os.path.join(self.work, "inputs")
        if declared_format == "bigquery":
            from graphstore import bigquery_source

            name = uri[len(bigquery_source.SCHEME):].replace(".", "__") + ".parquet"
            path = bigquery_source.to_parquet(uri, columns, os.path.join(inputs, "bigquery", name))
            return src_mod.open_table(self.db, uri, path, "parquet")
        path = uris.localize(uri, inputs)
        return src_mod.open_table(self.db, uri, path, _fmt(uri, declared_format))

    def resolve_id_kinds(self, node_tables: dict[str, tuple["NodeSource", Table]],
                         edge_tables: dict[str, tuple["EdgeSource", Table]]) -> dict[str, IdKind]:
        """Each node type's id kind; every column that holds ids of one type must agree."""
        seen: dict[str, tuple[IdKind, str]] = {}

        def note(nt: str, kind: IdKind, where: str) -> None:
            if nt in seen and seen[nt][0] != kind:
                raise InputDataError(
                    f"ids of node type {nt!r} are {seen[nt][0]} in {seen[nt][1]} but {kind} in "
                    f"{where}; make the id columns the same type"
                )
            seen.setdefault(nt, (kind, where))

        for nt, (ns, table) in node_tables.items():
            note(nt, src_mod.id_kind(table, ns.id_column, f"nodes[{nt}].idColumn"),
                 f"{table.uri} column {ns.id_column!r}")
        for key, (es, table) in edge_tables.items():
            for col, nt, side in ((es.src_column, es.edge_type.src_node_type, "srcColumn"),
                                  (es.dst_column, es.edge_type.dst_node_type, "dstColumn")):
                note(nt, src_mod.id_kind(table, col, f"edges[{key}].{side}"),
                     f"{table.uri} column {col!r}")
        return {nt: kind for nt, (kind, _) in seen.items()}

    # -- 2. node tables -----------------------------------------------------------------------
    @read_errors.step("numbering node type {nt!r}", "table")
    def build_nodes_from_table(self, nt: str, ns: "NodeSource", table: Table, kind: IdKind) -> _NodeType:
        """Number a node table's ids (in memory when it fits :attr:`lookup_budget`, else in
        DuckDB); null and duplicate ids are errors naming their rows."""
        t0 = time.perf_counter()
        if table.num_rows == 0:
            raise InputDataError(f"{table.uri}: node table for {nt!r} is empty")
        key = f"datasetConfig.dataSources.nodes[{nt}].featureColumns"
        scalar = not (ns.feature_columns and src_mod.features_are_one_list(
            table, ns.feature_columns, key))
        width = len(ns.feature_columns)
        in_memory = scalar and table.fmt == "parquet" and node_arrays.estimated_bytes(
            table.num_rows, kind == "string", width) <= self.lookup_budget
        if not in_memory:  # values checked by a scan; in memory they are checked once read
            width = src_mod.check_features(self.db, table, table.relation, ns.feature_columns, key)
        nodes = self._nodes(nt)
        if in_memory:
            arrays = node_arrays.read_nodes(table.path, ns.id_column, kind == "string",
                                            ns.feature_columns, width, source=table.uri)
            if arrays.feats is not None and not np.isfinite(arrays.feats).all():
                self.report_bad_values(table, [(ns.feature_columns, key)])
            nulls, distinct = arrays.nulls, table.num_rows - arrays.duplicates
        else:
            self.db.execute(
                f"CREATE TABLE {nodes} AS SELECT row_number() OVER (ORDER BY raw_id) - 1 AS int_id, "
                f"raw_id FROM (SELECT {id_expr(ns.id_column, kind)} AS raw_id FROM {table.relation})"
            )
            nulls, distinct = self.db.execute(
                f"SELECT count_if(raw_id IS NULL), count(DISTINCT raw_id) FROM {nodes}").fetchone()
        if nulls:
            src_mod.report_null_ids(self.db, table, ns.id_column)
        if distinct != table.num_rows:
            idc = sql_ident(ns.id_column)
            raw, rows = self.db.execute(
                f"SELECT CAST({idc} AS VARCHAR), list(__row ORDER BY __row) FROM {table.numbered()} "
                f"GROUP BY {idc} HAVING count(*) > 1 ORDER BY min(__row) LIMIT 1"
            ).fetchone()
            raise InputDataError(
                f"{table.uri}: column {ns.id_column!r}: duplicate node id {raw!r} at rows "
                f"{', '.join(map(str, rows[:5]))} ({table.num_rows - distinct} duplicate row(s))"
            )
        if in_memory:
            self.node_arrays[nt] = arrays
        self.node_tables[nt] = (ns, table, kind)
        self._log_rate(f"nodes {nt}" + " (in memory)" * in_memory, table.num_rows, t0)
        return _NodeType(nt, kind, table.num_rows, width)

    @read_errors.step("numbering node type {nt!r} from its edges", "edge_tables")
    def build_nodes_from_edges(self, nt: str, kind: IdKind,
                               edge_tables: dict[str, tuple["EdgeSource", Table]]) -> _NodeType:
        t0 = time.perf_counter()
        selects = []
        for es, table in edge_tables.values():
            if es.edge_type.src_node_type == nt:
                selects.append(f"SELECT {id_expr(es.src_column, kind)} AS raw_id FROM {table.relation}")
            if es.edge_type.dst_node_type == nt:
                selects.append(f"SELECT {id_expr(es.dst_column, kind)} AS raw_id FROM {table.relation}")
        union = " UNION ALL ".join(selects)
        self.db.execute(
            f"CREATE TABLE {self._nodes(nt)} AS SELECT row_number() OVER (ORDER BY raw_id) - 1 "
            f"AS int_id, raw_id FROM (SELECT DISTINCT raw_id FROM ({union}) WHERE raw_id IS NOT NULL)"
        )
        count = self.db.execute(f"SELECT count(*) FROM {self._nodes(nt)}").fetchone()[0]
        self._log_rate(f"nodes {nt} (from edge endpoints)", count, t0)
        return _NodeType(nt, kind, int(count), 0)

    def _nodes(self, nt: str) -> str:
        """The DuckDB table ``(int_id, raw_id)`` of a node type. For a type numbered in memory it
        is created on first use (only the SQL paths need it: error reports, edge types that
        cannot stream), from the sorted ids."""
        name = sql_ident(f"nodes__{nt}")
        arrays = self.node_arrays.get(nt)
        if arrays is not None and nt not in self._node_tables_made:
            with self._node_table_lock:
                if nt not in self._node_tables_made:
                    ids = pa.table({"int_id": np.arange(arrays.count, dtype=np.int64),
                                    "raw_id": arrays.sorted_ids})
                    view = f"__ids_{nt}"
                    self.db.register(view, ids)
                    self.db.execute(f"CREATE TABLE {name} AS SELECT * FROM {sql_ident(view)}")
                    self.db.unregister(view)
                    self._node_tables_made.add(nt)
        return name

    @read_errors.step("mapping the ids of {nt!r} in memory")
    def build_lookup(self, nt: str) -> None:
        """Keep ``nt``'s raw ids in memory for the chunked edge path when they fit the budget."""
        t0 = time.perf_counter()
        if nt in self.node_arrays:
            self.lookups[nt] = IdLookup.build(self.node_arrays[nt].sorted_ids, self.lookup_budget)
        else:  # numbered in DuckDB: fetch the ids only if a lookup of them could fit
            count, low, high = self.db.execute(
                f"SELECT count(*), min(raw_id), max(raw_id) FROM {self._nodes(nt)}").fetchone()
            integer_ids = isinstance(low, int)
            span = high - low + 1 if integer_ids else 0
            self.lookups[nt] = None
            if count and IdLookup.could_fit(integer_ids, count, span, self.lookup_budget):
                ids = self.db.execute(f"SELECT raw_id FROM {self._nodes(nt)} ORDER BY int_id"
                                      ).to_arrow_table().column(0).combine_chunks()
                self.lookups[nt] = IdLookup.build(ids, self.lookup_budget)
        log.info("step=%r in_memory=%s seconds=%.2f", f"id lookup {nt}",
                 self.lookups[nt] is not None, time.perf_counter() - t0)

    # -- 3. edges -----------------------------------------------------------------------------
    def check_edge_table(self, key: str, es: "EdgeSource", table: Table, scan: bool = True) -> int:
        """Reject an empty table and bad weights or features; return the feature width.

        With ``scan=False`` only the column types are checked when every weight and feature
        column is scalar (the caller checks the values, see :meth:`report_bad_values`).
        """
        if table.num_rows == 0:
            raise InputDataError(f"{table.uri}: edge table for {key} is empty")
        checks = self._value_checks(key, es)
        if not scan and not any(cols and src_mod.features_are_one_list(table, cols, ck)
                                for cols, ck in checks):
            return len(es.feature_columns)
        widths = [src_mod.check_features(self.db, table, table.relation, cols, ck)
                  for cols, ck in checks]
        return widths[-1]

    @staticmethod
    def _value_checks(key: str, es: "EdgeSource") -> list[tuple[tuple[str, ...], str]]:
        """(columns, config key) of an edge type's weight and feature values."""
        cfg = f"datasetConfig.dataSources.edges[{key}]"
        checks = [((es.weight_column,), f"{cfg}.weightColumn")] if es.weight_column else []
        return checks + [(es.feature_columns, f"{cfg}.featureColumns")]

    def report_bad_values(self, table: Table, checks: list[tuple[tuple[str, ...], str]]) -> None:
        """Raise the row-level error for values an in-memory check found null, NaN or infinite."""
        for cols, config_key in checks:
            src_mod.check_features(self.db, table, table.relation, cols, config_key)
        raise InputDataError(f"{table.uri}: null, NaN or infinite weight or feature values")

    def can_stream(self, es: "EdgeSource", table: Table) -> bool:
        """True when :meth:`stream_edges` can write this edge type (Parquet, id maps in memory)."""
        et = es.edge_type
        return (table.fmt == "parquet" and self.lookups.get(et.src_node_type) is not None
                and self.lookups.get(et.dst_node_type) is not None)

    @read_errors.step("writing edges {key}", "table")
    def stream_edges(self, key: str, es: "EdgeSource", table: Table, kinds: dict[str, IdKind],
                     reverse_key: str | None, own_labels: bool) -> tuple[bool, int]:
        """Write one edge type, its reverse type and its labels in one chunked pass over the
        raw file (:mod:`graphstore.partition.edge_stream`); returns (has_weight, feature_dim)."""
        t0 = time.perf_counter()
        width = self.check_edge_table(key, es, table, scan=False)
        et = es.edge_type
        outputs = [EdgeOutput(lambda p: os.path.join(self.out, edge_dir(p, key)),
                              "src", anchor_side(self.direction), True)]
        if reverse_key:  # the flipped edge's anchor: old src for "in" sampling, old dst for "out"
            outputs.append(EdgeOutput(lambda p: os.path.join(self.out, edge_dir(p, reverse_key)),
                                      "dst", "src" if self.direction == "in" else "dst", True))
        if own_labels:  # labels sit with their source, the anchor of link prediction
            outputs.append(EdgeOutput(lambda p: os.path.join(self.out, label_dir(p, key)),
                                      "src", "src", False))
        result = stream_edges(
            table.path, src_column=es.src_column, dst_column=es.dst_column,
            weight_column=es.weight_column, feature_columns=es.feature_columns,
            feature_width=width, src_lookup=self.lookups[et.src_node_type],
            dst_lookup=self.lookups[et.dst_node_type], num_partitions=self.P, outputs=outputs,
            compression=self.task.dataset.partition.parquet_compression,
            stop_on_missing=self.dangling == "error", budget_bytes=self.lookup_budget,
            label=f"edges {key}", source=table.uri)
        if result.bad_values:
            self.report_bad_values(table, self._value_checks(key, es))
        if result.missing:
            missing = result.missing
            if result.stopped_early:  # the pass stopped at the first bad chunk: count them all
                missing = table.num_rows - self.db.execute(
                    f"SELECT count(*) FROM {table.relation} e "
                    f"JOIN {self._nodes(et.src_node_type)} s "
                    f"ON {id_expr(es.src_column, kinds[et.src_node_type], 'e')} = s.raw_id "
                    f"JOIN {self._nodes(et.dst_node_type)} d "
                    f"ON {id_expr(es.dst_column, kinds[et.dst_node_type], 'e')} = d.raw_id"
                ).fetchone()[0]
            self._explain_missing_edges(key, es, table, kinds, missing)
        written = " + reverse" * bool(reverse_key) + " + labels" * own_labels
        self._log_rate(f"edges {key}{written} (in memory)", table.num_rows, t0)
        self.stats[f"edges_per_s.{key}"] = round(table.num_rows / (time.perf_counter() - t0), 1)
        return bool(es.weight_column), width

    @read_errors.step("writing edges {key}", "table")
    def write_edges(self, key: str, es: "EdgeSource", table: Table,
                    kinds: dict[str, IdKind]) -> tuple[bool, int]:
        """Write one edge type split by partition with a DuckDB join (any size, spills);
        returns (has_weight, feature_dim)."""
        t0 = time.perf_counter()
        et = es.edge_type
        width = self.check_edge_table(key, es, table)
        cols = [f"{id_expr(es.src_column, kinds[et.src_node_type])} AS __s",
                f"{id_expr(es.dst_column, kinds[et.dst_node_type])} AS __d"]
        out_cols = ["s.int_id AS src", "d.int_id AS dst"]
        if es.weight_column:
            cols.append(f"CAST({sql_ident(es.weight_column)} AS FLOAT) AS __w")
            out_cols.append("e.__w AS weight")
        if width:
            cols.append(src_mod.feature_sql(table, es.feature_columns, width))
            out_cols.extend(f"e.f_{i}" for i in range(width))
        anchor = "s" if anchor_side(self.direction) == "src" else "d"
        target = os.path.join(self.hive, "edges", key)
        written = self.db.execute(
            f"COPY (SELECT {', '.join(out_cols)}, {anchor}.int_id % {self.P} AS part "
            f"FROM (SELECT {', '.join(cols)} FROM {table.relation}) e "
            f"JOIN {self._nodes(et.src_node_type)} s ON e.__s = s.raw_id "
            f"JOIN {self._nodes(et.dst_node_type)} d ON e.__d = d.raw_id) "
            f"TO {sql_str(target)} ({self.parquet}, PARTITION_BY (part))"
        ).fetchone()[0]
        missing = table.num_rows - int(written)
        if missing:
            self._explain_missing_edges(key, es, table, kinds, missing)
        self._move_hive(target, lambda p: edge_dir(p, key))
        self._log_rate(f"edges {key}", table.num_rows, t0)
        self.stats[f"edges_per_s.{key}"] = round(table.num_rows / (time.perf_counter() - t0), 1)
        return bool(es.weight_column), width

    @read_errors.step("writing labels {key}")
    def write_labels(self, key: str) -> None:
        """Copy a supervision edge type's edges into ``labels/``, placed by the source (anchor).

        Graph edges are placed by the sampling anchor, which for ``in`` is the destination; the
        splitter and ``fetch_ablp_input`` need each anchor's positives on the anchor's own storage.
        """
        t0 = time.perf_counter()
        files = self._edge_files(key)
        target = os.path.join(self.hive, "labels", key)
        rows = self.db.execute(
            f"COPY (SELECT src, dst, src % {self.P} AS part FROM read_parquet([{files}])) "
            f"TO {sql_str(target)} ({self.parquet}, PARTITION_BY (part))"
        ).fetchone()[0]
        self._move_hive(target, lambda p: label_dir(p, key))
        self._log_rate(f"labels {key} (placed by source)", int(rows), t0)

    def _edge_files(self, key: str) -> str:
        """SQL list items of the written Parquet files of an edge type."""
        return ", ".join(sql_str(duckdb_literal_glob(os.path.join(self.out, edge_dir(p, key)),
                                                     "*.parquet"))
                         for p in range(self.P)
                         if os.path.isdir(os.path.join(self.out, edge_dir(p, key))))

    @read_errors.step("writing edges {reverse_key}")
    def write_reverse_edges(self, key: str, reverse_key: str, has_weight: bool, width: int) -> None:
        """Write ``reverse_key`` (dst -> src of ``key``) from the already-written dense edges.

        Each reversed edge is placed by its own anchor, like any other edge type.
        """
        t0 = time.perf_counter()
        extra = (", weight" if has_weight else "") + "".join(f", f_{i}" for i in range(width))
        # the reversed edge's anchor: its new dst (= old src) for "in", its new src (= old dst) for "out"
        anchor = "src" if self.direction == "in" else "dst"
        target = os.path.join(self.hive, "edges", reverse_key)
        rows = self.db.execute(
            f"COPY (SELECT dst AS src, src AS dst{extra}, {anchor} % {self.P} AS part "
            f"FROM read_parquet([{self._edge_files(key)}])) "
            f"TO {sql_str(target)} ({self.parquet}, PARTITION_BY (part))"
        ).fetchone()[0]
        self._move_hive(target, lambda p: edge_dir(p, reverse_key))
        self._log_rate(f"edges {reverse_key} (reverse of {key})", int(rows), t0)

    def _explain_missing_edges(self, key: str, es: "EdgeSource", table: Table,
                               kinds: dict[str, IdKind], missing: int) -> None:
        for col in (es.src_column, es.dst_column):
            nulls = self.db.execute(
                f"SELECT count_if({sql_ident(col)} IS NULL) FROM {table.relation}").fetchone()[0]
            if nulls:
                src_mod.report_null_ids(self.db, table, col)
        if self.dangling == "drop":
            log.warning("edges %s: dropped %d edge(s) whose endpoint is not in its node table "
                        "(danglingEdges: drop)", key, missing)
            self.dropped[key] = missing
            return
        et = es.edge_type
        for col, nt in ((es.src_column, et.src_node_type), (es.dst_column, et.dst_node_type)):
            row = self.db.execute(
                f"SELECT e.__row, CAST(e.{sql_ident(col)} AS VARCHAR) FROM {table.numbered()} e "
                f"ANTI JOIN {self._nodes(nt)} n ON {id_expr(col, kinds[nt], 'e')} = n.raw_id "
                f"ORDER BY e.__row LIMIT 1"
            ).fetchone()
            if row:
                raise InputDataError(
                    f"{table.uri}: column {col!r} row {row[0]}: id {row[1]!r} is not in the "
                    f"{nt!r} node table ({missing} such edge(s) in total; set "
                    f"datasetConfig.partitionConfig.danglingEdges: drop to drop them)"
                )

    # -- 4. id maps, partition books, node files ------------------------------------------------
    @read_errors.step("writing the id map and node files of {node.name!r}")
    def write_node_outputs(self, node: _NodeType) -> None:
        t0 = time.perf_counter()
        nt = node.name
        os.makedirs(os.path.join(self.out, "id_map"), exist_ok=True)
        compression = self.task.dataset.partition.parquet_compression
        arrays = self.node_arrays.get(nt)
        # a type numbered in memory writes from its arrays; self._nodes() would build its
        # DuckDB table, which only the SQL paths need
        table = None if arrays is not None else self._nodes(nt)
        if arrays is not None:
            node_arrays.write_id_map(arrays, os.path.join(self.out, id_map_path(nt)), compression)
        else:
            self.db.execute(
                f"COPY (SELECT int_id, raw_id FROM {table} ORDER BY int_id) TO "
                f"{sql_str(os.path.join(self.out, id_map_path(nt)))} ({self.parquet})"
            )
        book_path = os.path.join(self.out, partition_book_path(nt))
        os.makedirs(os.path.dirname(book_path), exist_ok=True)
        book = np.lib.format.open_memmap(book_path, mode="w+", dtype=np.int32, shape=(node.count,))
        step = 1 << 22
        for lo in range(0, node.count, step):
            hi = min(node.count, lo + step)
            book[lo:hi] = np.arange(lo, hi, dtype=np.int64) % self.P
        book.flush()
        del book
        if arrays is not None:
            node_arrays.write_node_files(arrays, self.P,
                                         lambda p: os.path.join(self.out, node_dir(p, nt)),
                                         compression)
            self._log_rate(f"id map + node files {nt} (in memory)", node.count, t0)
            return
        target = os.path.join(self.hive, "nodes", nt)
        if nt in self.node_tables and node.feature_dim:
            ns, raw, kind = self.node_tables[nt]
            feats = src_mod.feature_sql(raw, ns.feature_columns, node.feature_dim, alias="r")
            source = (f"SELECT n.int_id, {feats}, n.int_id % {self.P} AS part FROM {raw.relation} r "
                      f"JOIN {table} n ON {id_expr(ns.id_column, kind, 'r')} = n.raw_id")
        else:
            source = f"SELECT int_id, int_id % {self.P} AS part FROM {table}"
        self.db.execute(f"COPY ({source}) TO {sql_str(target)} ({self.parquet}, PARTITION_BY (part))")
        self._move_hive(target, lambda p: node_dir(p, nt))
        self._log_rate(f"id map + node files {nt}", node.count, t0)

    def _move_hive(self, hive_dir: str, dest_for: "callable") -> None:
        """Move DuckDB's ``part=<p>/*.parquet`` folders to the shard layout."""
        if not os.path.isdir(hive_dir):
            return
        for entry in os.listdir(hive_dir):
            part = int(entry.split("=", 1)[1])
            dest = os.path.join(self.out, dest_for(part))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.replace(os.path.join(hive_dir, entry), dest)

    def rows_per_partition(self, rel_dir_for: "callable") -> tuple[int, ...]:
        counts = []
        for p in range(self.P):
            d = os.path.join(self.out, rel_dir_for(p))
            files = sorted(os.listdir(d)) if os.path.isdir(d) else []
            counts.append(sum(pq.ParquetFile(os.path.join(d, f)).metadata.num_rows for f in files))
        return tuple(counts)

    def _log_rate(self, what: str, rows: int, t0: float) -> None:
        dt = max(time.perf_counter() - t0, 1e-9)
        log.info("step=%r rows=%d seconds=%.2f rows_per_s=%.0f", what, rows, dt, rows / dt)


def _file_entry(out: str, rel: str) -> FileEntry:
    path = os.path.join(out, rel)
    rows = None
    if rel.endswith(".parquet"):
        rows = pq.ParquetFile(path).metadata.num_rows
    elif rel.endswith(".npy"):
        rows = int(np.load(path, mmap_mode="r").shape[0])
    return FileEntry(sha256=sha256_file(path), bytes=os.path.getsize(path), rows=rows)


def _file_entries(out: str) -> dict[str, FileEntry]:
    """Checksum every output file; hashlib releases the GIL, so threads use every core."""
    rels = [r for r in uris.iter_files(out) if r not in (MANIFEST, MARKER)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(rels, pool.map(lambda r: _file_entry(out, r), rels)))


def config_hash(task: "TaskConfig", num_partitions: int) -> str:
    """sha256 over what determines the shard contents (graph, data sources, direction, P)."""
    d = task.to_dict()
    keyed = {k: d.get(k) for k in ("graphMetadata", "taskMetadata", "datasetConfig")}
    keyed["sample_edge_direction"] = task.trainer.storage.storage_args.sample_edge_direction
    keyed["num_partitions"] = num_partitions
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()


def _write_edge_type(run: _Run, task: "TaskConfig", key: str, es: "EdgeSource", table: Table,
                     kinds: dict[str, IdKind], supervision: set[str]) -> dict[str, EdgeTypeInfo]:
    """Write one edge type, its reverse (when added) and its labels (supervision types).

    With ``in`` sampling the reverse type is already placed by the source, i.e. exactly like the
    labels, so its files serve as the labels (``labels_from``) instead of a second copy.
    """
    et = es.edge_type
    reverse_key = None
    if task.dataset.partition.add_reverse_edges and et.src_node_type != et.dst_node_type:
        reverse_key = str(et.reverse())
    labels_from = reverse_key if key in supervision and run.direction == "in" else None
    own_labels = key in supervision and not labels_from
    if run.can_stream(es, table):
        has_weight, width = run.stream_edges(key, es, table, kinds, reverse_key, own_labels)
    else:
        has_weight, width = run.write_edges(key, es, table, kinds)
        if reverse_key:
            run.write_reverse_edges(key, reverse_key, has_weight, width)
        if own_labels:
            run.write_labels(key)
    written = [(key, et, None)] + ([(reverse_key, et.reverse(), key)] if reverse_key else [])
    infos = {}
    for out_key, out_et, reverse_of in written:
        counts = run.rows_per_partition(lambda p, k=out_key: edge_dir(p, k))
        labels = None
        if out_key in supervision:
            labels = (run.rows_per_partition(lambda p: edge_dir(p, labels_from)) if labels_from
                      else run.rows_per_partition(lambda p: label_dir(p, out_key)))
        infos[out_key] = EdgeTypeInfo(
            src_node_type=out_et.src_node_type, relation=out_et.relation,
            dst_node_type=out_et.dst_node_type, count=sum(counts), counts_per_partition=counts,
            has_weight=has_weight, feature_dim=width, is_supervision=out_key in supervision,
            reverse_of=reverse_of, labels_per_partition=labels,
            labels_from=labels_from if out_key == key else None,
            dropped_dangling=run.dropped.get(out_key, 0))
    return infos


def partition_graph(task: "TaskConfig", *, num_partitions: int, output_uri: str) -> Manifest:
    """Partition the task's raw tables into ``num_partitions`` shards at ``output_uri``."""
    if num_partitions < 1:
        raise UsageError(f"number of partitions must be >= 1, got {num_partitions}")
    root = ShardRoot.claim(output_uri)
    t_start = time.perf_counter()
    with NewVersion.start(root) as version, contextlib.closing(
            _Run(task, num_partitions, version.work_dir, version.local_dir)) as run:
        node_srcs = {ns.node_type: (ns, run.open_source(
                         ns.uri, ns.format, (ns.id_column, *ns.feature_columns)))
                     for ns in task.dataset.node_sources}
        edge_srcs = {str(es.edge_type): (es, run.open_source(
                         es.uri, es.format, (es.src_column, es.dst_column,
                                             *([es.weight_column] if es.weight_column else []),
                                             *es.feature_columns)))
                     for es in task.dataset.edge_sources}
        kinds = run.resolve_id_kinds(node_srcs, edge_srcs)
        for nt in task.graph_metadata.node_types:
            if nt not in node_srcs and nt not in kinds:
                raise UsageError(f"node type {nt!r} has no node table and appears in no edge type")

        def build_nodes(nt: str) -> _NodeType:
            node = (run.build_nodes_from_table(nt, *node_srcs[nt], kinds[nt]) if nt in node_srcs
                    else run.build_nodes_from_edges(nt, kinds[nt], edge_srcs))
            run.build_lookup(nt)
            return node

        with ThreadPoolExecutor(max_workers=PARALLEL_STEPS) as pool:
            nodes = dict(zip(task.graph_metadata.node_types,
                             pool.map(build_nodes, task.graph_metadata.node_types)))
        supervision = {str(et) for et in task.supervision_edge_types}
        # steps 3 and 4 only read the node tables and write disjoint folders: run them side by
        # side, so one step's single-threaded stretches (Parquet finalisation, file moves, footer
        # reads) overlap another's scans; results are collected in config order
        with ThreadPoolExecutor(max_workers=PARALLEL_STEPS) as pool:
            edge_jobs = [pool.submit(_write_edge_type, run, task, key, es, table, kinds, supervision)
                         for key, (es, table) in edge_srcs.items()]
            node_jobs = {nt: pool.submit(run.write_node_outputs, node) for nt, node in nodes.items()}
            edge_infos: dict[str, EdgeTypeInfo] = {}
            for job in edge_jobs:
                edge_infos.update(job.result())
            node_infos: dict[str, NodeTypeInfo] = {}
            for nt, job in node_jobs.items():
                job.result()
                node = nodes[nt]
                node_infos[nt] = NodeTypeInfo(
                    count=node.count, id_dtype=node.kind, feature_dim=node.feature_dim,
                    counts_per_partition=run.rows_per_partition(lambda p, n=nt: node_dir(p, n)))
        run.close()
        total_edges = sum(e.count for e in edge_infos.values())
        elapsed = time.perf_counter() - t_start
        manifest = Manifest(
            schema_version=SCHEMA_VERSION, num_partitions=num_partitions,
            sample_edge_direction=run.direction, node_types=node_infos, edge_types=edge_infos,
            files=_file_entries(run.out), config_hash=config_hash(task, num_partitions),
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            stats={**run.stats, "seconds": round(elapsed, 3),
                   "edges_per_s": round(total_edges / max(elapsed, 1e-9), 1)})
        with open(os.path.join(run.out, MANIFEST), "w") as fh:
            fh.write(manifest.to_json())
        version.publish()
        log.info("partitioned edges=%d nodes=%d partitions=%d seconds=%.2f edges_per_s=%.0f "
                 "output=%s version=%s", total_edges, sum(n.count for n in node_infos.values()),
                 num_partitions, elapsed, total_edges / max(elapsed, 1e-9), output_uri,
                 version.name)
        return manifest
