"""The BigQuery warehouse: the same tables and guarantees as the local one, through load jobs.

Dataset ``exportConfig.bigqueryDataset`` in ``exportConfig.bigqueryProject`` (created if missing)
holds one table per node type (``{tablePrefix}{node_type}``, the schema of
graphstore.export.rows; day-partitioned on ``created_at``, clustered by ``run_id``) with the rows
of every exported run, and a view ``<table>_latest`` with the newest run's rows.

Loading a run, in this order:
  1. the staging table ``<table>__staging_<run id>_<hash>`` (:func:`staging_name`, one per exact
     run id) gets the run's rows in the table's schema, one of two ways:
     - ``load_run_joined`` (a run folder on gs://, the production path): **load jobs** put the
       embeddings' Parquet files and the shard set's id map files, both read by BigQuery from
       gs://, into two more staging tables (``..._e``, ``..._m``), and one query joins them into
       the staging table: no machine of ours reads an id map or an embedding;
     - ``load_run`` (a local run folder): the rows Parquet file graphstore.export.rows built
       (the join done locally in DuckDB), by a load job from the local file (or from gs:// when
       it was put there);
     never row streaming; WRITE_TRUNCATE, explicit schema; the row counts are checked against
     the embeddings' marker;
  2. one ``MERGE`` statement, keyed on ``(run_id, node_id)``, makes the run's rows equal to the
     staged ones: matched rows are updated, new ones inserted, the run's rows missing from staging
     deleted; other runs' rows are not touched. A single DML statement is atomic in BigQuery, so a
     reader sees the old complete set or the new one. (An ``ON FALSE`` merge, delete-all then
     insert-all, gives the same rows, but the emulator's DuckDB runs it as a nested-loop join: a
     rerun of 100 000 rows did not finish in 15 minutes; keyed, it takes 2 s.)
  3. the view is (re)created, the run's row count checked, the staging table dropped.
A failure before step 2 leaves the table exactly as it was (a staging table left behind is
replaced by the next attempt); rerunning the same run id leaves the same rows (no duplicates).
Every name is checked by graphstore.export.names before it reaches SQL; values travel as query
parameters.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import re
from typing import Callable, Sequence

from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.export.names import latest_view_name, node_id_value, sql_name
from graphstore.export.rows import TABLE_COLUMNS, JoinedRun, Rows

log = logging.getLogger(__name__)
LOAD_TIMEOUT_S = 3600.0


def schema(node_id_type: str) -> list:
    """The table schema (graphstore.export.rows) for raw ids of ``node_id_type`` (``STRING`` or ``INT64``)."""
    from google.cloud import bigquery

    F = bigquery.SchemaField
    return [F("node_id", node_id_type, "REQUIRED"), F("node_type", "STRING", "REQUIRED"),
            F("embedding", "FLOAT64", "REPEATED"), F("model_version", "STRING", "REQUIRED"),
            F("run_id", "STRING", "REQUIRED"), F("created_at", "TIMESTAMP", "REQUIRED")]


def staging_name(table: str, run_id: str) -> str:
    """One staging table per (table, exact run id): exports of different runs never share one.
    The run id's letters, digits and ``_`` (others become ``_``) for readers, then 12 hex digits
    of its sha256, so run ids that differ only where a table name cannot follow (``a-b``,
    ``a_b``, ``a.b``) still get different tables."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:12]
    readable = re.sub(r"[^A-Za-z0-9_]", "_", run_id)
    return sql_name(f"{table}__staging_{readable}_{digest}", "staging table")



def _sql_type(value: str | int | float | datetime.datetime) -> str:
    """The BigQuery type of a query parameter: a ``str`` (a RunId too), an ``int``, a
    ``float`` or a ``datetime`` (a bool is refused: it would pass as an int)."""
    if isinstance(value, datetime.datetime):
        return "TIMESTAMP"
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, int) and not isinstance(value, bool):
        return "INT64"
    if isinstance(value, float):
        return "FLOAT64"
    raise TypeError(f"no BigQuery parameter type for {type(value).__name__} {value!r}")

class BigQueryWarehouse:
    """One BigQuery dataset. ``client`` defaults to graphstore.io.gcp.bigquery_client(project)."""

    def __init__(self, project: str, dataset: str, *, location: str | None = None,
                 client=None) -> None:
        self.project = project
        self.dataset = sql_name(dataset, "exportConfig.bigqueryDataset")
        self.location = location
        self.path = f"bigquery:{project}.{self.dataset}"  # shown in messages
        if client is None:
            from graphstore.io.gcp import bigquery_client

            client = bigquery_client(project)
        self.client = client

    def ref(self, table: str) -> str:
        """``project.dataset.table`` of a checked table name."""
        return f"{self.project}.{self.dataset}.{sql_name(table, 'table')}"

    def _sql_ref(self, table: str) -> str:
        return f"`{self.ref(table)}`"

    def _query(self, sql: str, params: dict | None = None) -> list:
        from google.cloud import bigquery

        qp = [bigquery.ScalarQueryParameter(k, _sql_type(v), v) for k, v in (params or {}).items()]
        job = self.client.query(sql, job_config=bigquery.QueryJobConfig(query_parameters=qp),
                                location=self.location)
        return list(job.result(timeout=LOAD_TIMEOUT_S))

    def _ensure_table(self, table: str, node_id_type: str) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import bigquery

        self.client.create_dataset(bigquery.Dataset(f"{self.project}.{self.dataset}"),
                                   exists_ok=True)
        try:
            have = self.client.get_table(self.ref(table))
        except gexc.NotFound:
            new = bigquery.Table(self.ref(table), schema=schema(node_id_type))
            new.time_partitioning = bigquery.TimePartitioning(
                field="created_at", type_=bigquery.TimePartitioningType.DAY)
            new.clustering_fields = ["run_id"]
            have = self.client.create_table(new, exists_ok=True)
        kinds = {f.name: f.field_type for f in have.schema}
        if [f.name for f in have.schema] != list(TABLE_COLUMNS):
            raise UsageError(f"table {self.ref(table)} has columns {list(kinds)}, expected "
                             f"{list(TABLE_COLUMNS)}; use another exportConfig.tablePrefix")
        want = "INTEGER" if node_id_type == "INT64" else "STRING"
        if kinds["node_id"] not in (want, node_id_type):
            raise UsageError(f"table {self.ref(table)} has node_id {kinds['node_id']}, this run's "
                             f"ids are {node_id_type}; use another exportConfig.tablePrefix")

    def _load_staging(self, staging: str, fields: list, source: str | Sequence[str]) -> int:
        """Load Parquet into ``staging`` with the schema ``fields``: a local file (``source``
        a path) or gs:// objects (``source`` a list of uris); its row count."""
        from google.cloud import bigquery

        config = bigquery.LoadJobConfig(
            source_format=bigquery.SourceFormat.PARQUET, schema=fields,
            write_disposition=bigquery.WriteDisposition.WRITE_TRUNCATE,
            create_disposition=bigquery.CreateDisposition.CREATE_IF_NEEDED)
        options = bigquery.ParquetOptions()
        options.enable_list_inference = True  # LIST<DOUBLE> -> REPEATED FLOAT64
        config.parquet_options = options
        if not isinstance(source, str):
            job = self.client.load_table_from_uri(list(source), self.ref(staging),
                                                  job_config=config, location=self.location)
        else:
            with open(source, "rb") as fh:
                job = self.client.load_table_from_file(fh, self.ref(staging), job_config=config,
                                                       location=self.location)
        try:
            job.result(timeout=LOAD_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - reported with the table and the job's errors
            raise RuntimeFailure(f"load job into {self.ref(staging)} failed: {exc}; the table is "
                                 "unchanged, rerun the export") from exc
        staged = int(self.client.get_table(self.ref(staging)).num_rows)
        if job.output_rows is not None and int(job.output_rows) != staged:
            raise RuntimeFailure(f"load job into {self.ref(staging)} reported {job.output_rows} "
                                 f"rows, the table holds {staged}; rerun the export")
        return staged

    def load_run(self, table: str, rows: Rows, run_id: str, *, source_uri: str | None = None,
                 before_swap: Callable[[], None] | None = None) -> int:
        """Replace ``run_id``'s rows of ``table`` with ``rows`` atomically (module docs); returns
        the number of rows the table now holds for the run. ``source_uri``: the rows file on
        ``gs://`` when it is there. ``before_swap`` is a test hook that runs between staging and
        the swap."""
        table = sql_name(table, "table")
        staging = staging_name(table, run_id)
        self._ensure_table(table, rows.node_id_type)
        source = [source_uri] if source_uri and source_uri.startswith("gs://") else rows.path
        staged = self._load_staging(staging, schema(rows.node_id_type), source)
        if staged != rows.count:
            raise RuntimeFailure(f"staging {self.ref(staging)}: {staged} rows, expected "
                                 f"{rows.count}; {self.ref(table)} is unchanged")
        return self._swap(table, staging, run_id, rows.count, before_swap)

    def load_run_joined(self, table: str, run: JoinedRun, run_id: str, *,
                        before_swap: Callable[[], None] | None = None) -> int:
        """Replace ``run_id``'s rows of ``table`` with ``run``'s embeddings joined to its id map
        in BigQuery (module docs, step 1); returns the rows the table now holds for the run."""
        from google.cloud import bigquery

        table = sql_name(table, "table")
        staging = staging_name(table, run_id)
        embeddings, id_map = sql_name(f"{staging}_e", "table"), sql_name(f"{staging}_m", "table")
        self._ensure_table(table, run.node_id_type)
        F = bigquery.SchemaField
        try:
            loaded = self._load_staging(embeddings, [F("int_id", "INT64", "REQUIRED"),
                                                     F("embedding", "FLOAT64", "REPEATED")],
                                        run.embeddings_uris)
            if loaded != run.count:
                raise RuntimeFailure(f"{self.ref(embeddings)}: {loaded} embeddings loaded, the "
                                     f"marker says {run.count}; rerun the infer stage")
            self._load_staging(id_map, [F("int_id", "INT64", "REQUIRED"),
                                        F("raw_id", run.node_id_type, "REQUIRED")],
                               run.id_map_uris)
            self._query(
                f"CREATE OR REPLACE TABLE {self._sql_ref(staging)} AS "
                "SELECT m.raw_id AS node_id, @node_type AS node_type, e.embedding AS embedding, "
                "@model_version AS model_version, @run_id AS run_id, @created_at AS created_at "
                f"FROM {self._sql_ref(embeddings)} AS e JOIN {self._sql_ref(id_map)} AS m "
                "ON m.int_id = e.int_id",
                {"node_type": run.node_type, "model_version": run.model_version,
                 "run_id": run_id, "created_at": run.created_at})
        finally:
            for name in (embeddings, id_map):
                self.client.delete_table(self.ref(name), not_found_ok=True)
        staged = int(self.client.get_table(self.ref(staging)).num_rows)
        if staged != run.count:
            raise RuntimeFailure(f"embeddings of {run.node_type!r}: {staged} rows join the id map, "
                                 f"the marker says {run.count}; the embeddings and shards are "
                                 f"from different runs? (rerun infer); {self.ref(table)} is "
                                 "unchanged")
        return self._swap(table, staging, run_id, run.count, before_swap)

    def _swap(self, table: str, staging: str, run_id: str, count: int,
              before_swap: Callable[[], None] | None) -> int:
        """Steps 2 and 3 of the module docs: ``staging`` becomes ``run_id``'s rows of
        ``table`` in one MERGE, the view is replaced, the count checked, staging dropped."""
        if before_swap is not None:
            before_swap()
        view = latest_view_name(table)
        cols = ", ".join(TABLE_COLUMNS)
        updates = ", ".join(f"{c} = s.{c}" for c in TABLE_COLUMNS if c not in ("node_id", "run_id"))
        self._query(
            f"MERGE {self._sql_ref(table)} t USING {self._sql_ref(staging)} s "
            "ON t.run_id = s.run_id AND t.node_id = s.node_id "
            f"WHEN MATCHED THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED BY TARGET THEN INSERT ({cols}) "
            f"VALUES ({', '.join('s.' + c for c in TABLE_COLUMNS)}) "
            "WHEN NOT MATCHED BY SOURCE AND t.run_id = @run_id THEN DELETE",
            {"run_id": run_id})
        self._query(
            f"CREATE OR REPLACE VIEW {self._sql_ref(view)} AS SELECT * FROM {self._sql_ref(table)} "
            f"WHERE run_id = (SELECT run_id FROM {self._sql_ref(table)} "
            "ORDER BY created_at DESC, run_id DESC LIMIT 1)")
        (loaded,) = self._query(f"SELECT count(*) AS n FROM {self._sql_ref(table)} "
                                "WHERE run_id = @run_id", {"run_id": run_id})
        self.client.delete_table(self.ref(staging), not_found_ok=True)
        if int(loaded[0]) != count:
            raise RuntimeFailure(f"{self.ref(table)}: {loaded[0]} rows for run {run_id} after the "
                                 f"swap, expected {count}; rerun the export")
        return int(loaded[0])

    def runs(self, table: str) -> list[tuple[str, int, str]]:
        """``(run_id, rows, created_at)`` of every run in ``table``, newest first."""
        return [(r[0], int(r[1]), str(r[2])) for r in self._query(
            f"SELECT run_id, count(*) AS n, max(created_at) AS c FROM {self._sql_ref(table)} "
            "GROUP BY run_id ORDER BY c DESC, run_id DESC")]

    def _source(self, table: str, run_id: str | None, alias: str = "") -> tuple[str, str]:
        """The rows to read (the newest run's view, or the table) and the matching filter."""
        if run_id is None:
            return self._sql_ref(latest_view_name(table)), ""
        return self._sql_ref(table), f"AND {alias + '.' if alias else ''}run_id = @run_id"

    def first_node_id(self, table: str, run_id: str | None = None) -> object:
        """The smallest ``node_id`` of a run (default: the newest)."""
        source, where = self._source(table, run_id)
        (row,) = self._query(f"SELECT min(node_id) AS m FROM {source} WHERE TRUE {where}",
                             {"run_id": run_id} if run_id else None)
        if row[0] is None:
            raise UsageError(f"table {self.ref(table)} has no rows"
                             + (f" for run {run_id}" if run_id else ""))
        return row[0]

    def neighbors(self, table: str, node_id: str, k: int, *, among: str | None = None,
                  metric: str = "dot", run_id: str | None = None) -> list[tuple[object, float]]:
        """Top-``k`` rows of ``among`` (default: ``table``) by ``metric`` against ``node_id``'s
        embedding in ``table``; the newest run unless ``run_id`` is given; ``node_id`` itself is
        left out when searching its own table. ``cosine`` uses ``COSINE_DISTANCE``; ``dot`` sums
        the element-wise products (BigQuery has no dot-product scalar function)."""
        from google.api_core import exceptions as gexc

        if metric not in ("dot", "cosine"):
            raise UsageError(f"metric must be one of ['cosine', 'dot'], got {metric!r}")
        among = among or table
        q_source, q_where = self._source(table, run_id, "q")
        c_source, c_where = self._source(among, run_id, "c")
        score = ("1 - COSINE_DISTANCE(q.embedding, c.embedding)" if metric == "cosine" else
                 "(SELECT SUM(x * y) FROM UNNEST(q.embedding) x WITH OFFSET i "
                 "JOIN UNNEST(c.embedding) y WITH OFFSET j ON i = j)")
        try:
            kind = {f.name: f.field_type for f in self.client.get_table(self.ref(table)).schema}
            self.client.get_table(self.ref(among))
        except gexc.NotFound as exc:
            raise UsageError(f"{exc.message} (run the export stage first)") from None
        key = node_id_value(str(node_id), kind["node_id"] in ("INTEGER", "INT64"), self.ref(table))
        skip = "AND c.node_id != @node_id" if among == table else ""
        params = {"node_id": key, "k": k, **({"run_id": run_id} if run_id else {})}
        found = self._query(f"SELECT count(*) FROM {q_source} q WHERE q.node_id = @node_id {q_where}",
                            {"node_id": key, **({"run_id": run_id} if run_id else {})})
        if not int(found[0][0]):
            raise UsageError(f"node_id {node_id!r} is not in {self.ref(table)}"
                             + (f" for run {run_id}" if run_id else " (newest run)"))
        rows = self._query(
            f"SELECT c.node_id, {score} AS score FROM {q_source} q CROSS JOIN {c_source} c "
            f"WHERE q.node_id = @node_id {q_where} {c_where} {skip} "
            "ORDER BY score DESC, c.node_id LIMIT @k", params)
        return [(r[0], float(r[1])) for r in rows]
