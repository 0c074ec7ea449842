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
leaves the same rows (no duplicates).

One process at a time: DuckDB locks the file while a process has it open (a writer excludes
everyone, readers exclude writers). Opening it while another process holds it (a second export,
``pipeline neighbors`` reading) is a **bounded wait**: retried every :data:`LOCK_POLL_S` for up to
:data:`LOCK_WAIT_S`, then a RuntimeFailure (exit 1) naming the file, the holder's PID and the wait.
The lock, not a retry, is what keeps the file whole: no process writes while another has it open.
A path that cannot hold a warehouse (the folder is a file, the file is not a DuckDB database) is a
UsageError (exit 2) naming it; nothing there is changed.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Callable

from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.export.names import latest_view_name, node_id_value, sql_name
from graphstore.export.rows import Rows
from graphstore.io.literal_paths import duckdb_literal

log = logging.getLogger(__name__)
FILE_NAME = "warehouse.duckdb"
METRICS = {"dot": "list_inner_product", "cosine": "list_cosine_similarity"}
LOCK_WAIT_S = 60.0
"""How long opening the warehouse waits for another process to let go of it."""
LOCK_POLL_S = 0.2
_WHERE = "exportConfig.localWarehouseUri, default warehouse/ beside the run folder"


class LocalWarehouse:
    """A warehouse folder (created on first load)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.path = os.path.join(folder, FILE_NAME)

    def _connect(self, read_only: bool = False):
        """A connection to the warehouse file (module docs: bounded wait for the lock; a folder
        or file that cannot be a warehouse is a UsageError)."""
        import duckdb

        if os.path.exists(self.folder) and not os.path.isdir(self.folder):
            raise UsageError(f"{self.folder} is a file, not a folder: the local warehouse needs a "
                             f"folder there ({_WHERE}); move the file or set another folder")
        if read_only and not os.path.exists(self.path):
            raise UsageError(f"no local warehouse at {self.path} (run the export stage first)")
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create the local warehouse folder {self.folder} ({_WHERE}): "
                             f"{exc.strerror or exc}") from None
        waited_from, waiting = time.monotonic(), False
        while True:
            try:
                return duckdb.connect(self.path, read_only=read_only)
            except duckdb.IOException as exc:
                message = str(exc)
                if "Could not set lock" not in message:
                    raise UsageError(f"{self.path} cannot be opened as the local warehouse "
                                     f"({_duckdb_reason(message)}); move it away or set "
                                     "exportConfig.localWarehouseUri") from None
                match = re.search(r"\(PID (\d+)\)", message)
                holder = f" (PID {match.group(1)})" if match else ""
                if not waiting:
                    waiting = True
                    log.info("%s is in use by another process%s; waiting up to %g s for it",
                             self.path, holder, LOCK_WAIT_S)
                if time.monotonic() - waited_from >= LOCK_WAIT_S:
                    raise RuntimeFailure(
                        f"{self.path} is in use by another process{holder}, e.g. another export "
                        f"or `pipeline neighbors`; waited {LOCK_WAIT_S:g} s for it; rerun when it "
                        "is done") from None
                time.sleep(LOCK_POLL_S)

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
            key = node_id_value(str(node_id), self._column_type(con, table, "node_id") == "BIGINT",
                                table)

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


def _duckdb_reason(message: str) -> str:
    """DuckDB's reason for not opening a file, without its prefix and the path it repeats."""
    if "not a valid DuckDB database" in message:
        return "it is not a DuckDB database file"
    return re.sub(r' ?"[^"]*"', "", re.sub(r"^IO Error: ", "", message.splitlines()[0]))
