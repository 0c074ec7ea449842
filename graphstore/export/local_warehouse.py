"""The embedded local warehouse: one DuckDB file, the same tables and guarantees as BigQuery.

``<folder>/warehouse.duckdb`` holds one table per node type (``{tablePrefix}{node_type}``, the
schema of graphstore.export.rows) with the rows of every exported run (history), and a view
``<table>_latest`` with the rows of the newest run (largest ``created_at``, then ``run_id``).

Loading a run (``load_run``), in this order:
  1. the rows file goes into a staging table ``<table>__staging`` (replaced if a failed attempt
     left one), and its row count is checked against the expected count;
  2. one transaction deletes the run's earlier rows, inserts the staged rows, drops the staging
     table and (re)creates the view; a consumer sees the old complete set or the new one.
A failure before or during step 2 leaves the table exactly as it was; rerunning the same run id
leaves the same rows (no duplicates). DuckDB allows one writing process per file at a time.
"""

from __future__ import annotations

import os
from typing import Callable

from graphstore.errors import RuntimeFailure, UsageError
from graphstore.export.names import latest_view_name, sql_name
from graphstore.export.rows import Rows
from graphstore.literal_paths import duckdb_literal

FILE_NAME = "warehouse.duckdb"
METRICS = {"dot": "list_inner_product", "cosine": "list_cosine_similarity"}


class LocalWarehouse:
    """A warehouse folder (created on first load)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.path = os.path.join(folder, FILE_NAME)

    def _connect(self, read_only: bool = False):
        import duckdb

        if read_only and not os.path.exists(self.path):
            raise UsageError(f"no local warehouse at {self.path} (run the export stage first)")
        os.makedirs(self.folder, exist_ok=True)
        return duckdb.connect(self.path, read_only=read_only)

    def load_run(self, table: str, rows: Rows, run_id: str, *, source_uri: str | None = None,
                 before_swap: Callable[[], None] | None = None) -> int:
        """Replace ``run_id``'s rows of ``table`` with ``rows`` atomically (module docs); returns
        the number of rows the table now holds for the run. ``source_uri`` is unused (the local
        file ``rows.path`` is read; the argument keeps both warehouses' calls alike).
        ``before_swap`` is a test hook that runs between staging and the swap."""
        table = sql_name(table, "table")
        staging, view = f"{table}__staging", latest_view_name(table)
        con = self._connect()
        try:
            con.execute(f"CREATE OR REPLACE TABLE {staging} AS SELECT * FROM read_parquet(?)",
                        [duckdb_literal(rows.path)])
            staged = con.execute(f"SELECT count(*) FROM {staging}").fetchone()[0]
            if staged != rows.count:
                raise RuntimeFailure(f"staging {staging}: {staged} rows, expected {rows.count}; "
                                     f"{table} is unchanged")
            if before_swap is not None:
                before_swap()
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(f"CREATE TABLE IF NOT EXISTS {table} AS SELECT * FROM {staging} LIMIT 0")
                have = self._column_type(con, table, "node_id")
                want = self._column_type(con, staging, "node_id")
                if have != want:
                    raise UsageError(f"table {table} has node_id {have}, this run's ids are {want}; "
                                     "use another exportConfig.tablePrefix")
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
                con.execute(f"INSERT INTO {table} SELECT * FROM {staging}")
                con.execute(f"DROP TABLE {staging}")
                con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {table} WHERE run_id = "
                            f"(SELECT run_id FROM {table} ORDER BY created_at DESC, run_id DESC LIMIT 1)")
                loaded = con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?",
                                     [run_id]).fetchone()[0]
                if loaded != rows.count:
                    raise RuntimeFailure(f"{table}: {loaded} rows for run {run_id} after the swap, "
                                         f"expected {rows.count}; rolled back")
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            return loaded
        finally:
            con.close()

    @staticmethod
    def _column_type(con, table: str, column: str) -> str:
        for name, kind, *_ in con.execute(f"DESCRIBE {table}").fetchall():
            if name == column:
                return kind
        raise RuntimeFailure(f"table {table} has no column {column}")

    def runs(self, table: str) -> list[tuple[str, int, str]]:
        """``(run_id, rows, created_at)`` of every run in ``table``, newest first."""
        table = sql_name(table, "table")
        con = self._connect(read_only=True)
        try:
            return [(r, n, str(c)) for r, n, c in con.execute(
                f"SELECT run_id, count(*), max(created_at) FROM {table} GROUP BY run_id "
                "ORDER BY max(created_at) DESC, run_id DESC").fetchall()]
        finally:
            con.close()

    def first_node_id(self, table: str, run_id: str | None = None) -> object:
        """The smallest ``node_id`` of a run (default: the newest), e.g. to show an example."""
        table = sql_name(table, "table")
        con = self._connect(read_only=True)
        try:
            source = latest_view_name(table) if run_id is None else table
            where = "" if run_id is None else "WHERE run_id = ?"
            row = con.execute(f"SELECT min(node_id) FROM {source} {where}",
                              [] if run_id is None else [run_id]).fetchone()
        finally:
            con.close()
        if row is None or row[0] is None:
            raise UsageError(f"table {table} has no rows" + (f" for run {run_id}" if run_id else ""))
        return row[0]

    def neighbors(self, table: str, node_id: str, k: int, *, among: str | None = None,
                  metric: str = "dot", run_id: str | None = None) -> list[tuple[object, float]]:
        """Top-``k`` rows of ``among`` (default: ``table``) by ``metric`` against ``node_id``'s
        embedding in ``table``; the newest run unless ``run_id`` is given. ``node_id`` itself is
        left out when searching its own table."""
        table = sql_name(table, "table")
        among = sql_name(among or table, "table")
        if metric not in METRICS:
            raise UsageError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
        con = self._connect(read_only=True)
        try:
            for name in (table, among):
                if not con.execute("SELECT count(*) FROM information_schema.tables WHERE "
                                   "table_name = ?", [name]).fetchone()[0]:
                    raise UsageError(f"table {name} is not in {self.path}")
            key = int(node_id) if self._column_type(con, table, "node_id") == "BIGINT" else str(node_id)

            def rows_of(name: str) -> str:
                if run_id is not None:
                    return f"(SELECT * FROM {name} WHERE run_id = $run)"
                return latest_view_name(name)

            query = con.execute(f"SELECT embedding FROM {rows_of(table)} WHERE node_id = $id",
                                {"id": key, **({"run": run_id} if run_id else {})}).fetchall()
            if not query:
                raise UsageError(f"node_id {node_id!r} is not in {table}"
                                 + (f" for run {run_id}" if run_id else " (newest run)"))
            skip = "AND c.node_id <> $id" if among == table else ""
            return con.execute(
                f"SELECT c.node_id, {METRICS[metric]}($q, c.embedding) AS score "
                f"FROM {rows_of(among)} c WHERE TRUE {skip} ORDER BY score DESC, c.node_id LIMIT $k",
                {"q": query[0][0], "k": k, **({"id": key} if skip else {}),
                 **({"run": run_id} if run_id else {})}).fetchall()
        finally:
            con.close()
