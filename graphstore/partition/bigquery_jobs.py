"""SQL jobs of the BigQuery partition engine: where they run, what their scratch tables are
called, and how their failures are reported.

Every statement runs as one query job in the scratch dataset's location (:class:`ScratchDataset`),
with its purpose said in words (``"numbering node type 'user'"``): a job that fails for a reason
of ours (quota, permissions, a bad statement) is a :class:`RuntimeFailure` naming the job id and
that purpose (exit 1); a problem with the user's tables is found by the caller's checks before the
job that would trip on it, and is an :class:`InputDataError` naming the table and column (exit 2).

Scratch tables are named ``gsp_<run tag>_<what>`` (:meth:`ScratchDataset.table`), so two runs'
tables never clash, and are created with an expiration (:data:`SCRATCH_HOURS`): a run killed
before it drops them leaves nothing that lasts. Statements are BigQuery's dialect (``DIV``,
``MOD``; the emulator also accepts ``//`` and ``%``, BigQuery does not), with each argument of
``DIV`` and ``MOD`` in parentheses: bqemulator 1.4.0 computes ``DIV(x - 0, 10)`` as ``x``
(``DIV((x - 0), 10)`` is right). No value of the user's tables enters a statement (ids
are read back as results); names are checked or backquoted before they reach SQL.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Sequence

from graphstore.io.bigquery_source import parse as parse_table_uri
from graphstore.runtime.errors import InputDataError, RuntimeFailure, UsageError

log = logging.getLogger(__name__)
SCRATCH_HOURS = 24
"""Hours a scratch table lives if the run that made it never drops it."""
MAX_TABLE_PARTITIONS = 10_000
"""BigQuery's limit of partitions per table; beyond it scratch tables are not partitioned."""
JOB_TIMEOUT_S = 6 * 3600.0
"""How long one statement may run before the partition task gives up on it."""
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,1023}$")
_TAG = re.compile(r"^[a-z0-9_]{1,64}$")


def quoted(name: str) -> str:
    """A column or ``project.dataset.table`` name as a BigQuery identifier (backquoted)."""
    return f"`{name.replace('`', '')}`"


def _checked(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise UsageError(f"{what} {name!r} is not a BigQuery name (letters, digits and _, not "
                         "starting with a digit)")
    return name


@dataclass(frozen=True)
class ScratchDataset:
    """The dataset a run's intermediate tables live in: ``project.dataset``, the jobs'
    ``location`` (None: the client's default) and the run's ``tag`` (lower-case letters, digits,
    ``_``; unique per run: graphstore.formats.run_ids makes one from the run id)."""

    project: str
    dataset: str
    location: str | None
    tag: str

    def __post_init__(self) -> None:
        _checked(self.dataset, "scratch dataset")
        if not _TAG.match(self.tag):
            raise UsageError(f"scratch table tag {self.tag!r}: use 1-64 of a-z, 0-9 and _")

    def table(self, what: str) -> str:
        """``project.dataset.gsp_<tag>_<what>`` (``what``: letters, digits, ``_``)."""
        return f"{self.project}.{self.dataset}.{_checked(f'gsp_{self.tag}_{what}', 'table')}"


@dataclass(frozen=True)
class SourceColumn:
    """One column of a user's BigQuery table: ``uri`` as the config wrote it
    (``bq://project.dataset.table``), ``ref`` its ``project.dataset.table``, the column's name
    and BigQuery type (``INT64`` or ``STRING``; the kinds of id the shard format has)."""

    uri: str
    ref: str
    column: str
    sql_type: str


class BigQueryJobs:
    """Runs the engine's statements in ``scratch``'s project and location (module docs).
    ``client`` defaults to graphstore.io.gcp.bigquery_client(scratch.project)."""

    def __init__(self, scratch: ScratchDataset, client: Any = None) -> None:
        if client is None:
            from graphstore.io.gcp import bigquery_client

            client = bigquery_client(scratch.project)
        self.scratch, self.client = scratch, client
        self.created: list[str] = []  # scratch tables made by this object, in order

    def ensure_dataset(self) -> None:
        """Create the scratch dataset when it is missing (in the configured location)."""
        from google.cloud import bigquery

        ds = bigquery.Dataset(f"{self.scratch.project}.{self.scratch.dataset}")
        if self.scratch.location:
            ds.location = self.scratch.location
        self.client.create_dataset(ds, exists_ok=True)

    def run(self, purpose: str, sql: str) -> list[Any]:
        """The rows of one statement (none for DDL); RuntimeFailure naming the job and
        ``purpose`` when the job fails."""
        from google.api_core import exceptions as gexc

        t0, job = time.perf_counter(), None
        try:
            job = self.client.query(sql, location=self.scratch.location)
            rows = list(job.result(timeout=JOB_TIMEOUT_S))
        except (gexc.GoogleAPIError, TimeoutError) as exc:
            job_id = getattr(job, "job_id", None) or "(not created)"
            raise RuntimeFailure(f"BigQuery job {job_id} ({purpose}) failed: "
                                 f"{getattr(exc, 'message', None) or exc}") from exc
        log.info("bigquery %s: job %s, %.1f s", purpose, job.job_id, time.perf_counter() - t0)
        return rows

    def create_scratch(self, purpose: str, what: str, select: str,
                       partitions: int | None = None) -> str:
        """The scratch table ``what`` (:meth:`ScratchDataset.table`) made from the query
        ``select``, with the expiration of the module docs; its ``project.dataset.table``. A
        table of that name is this run's own leftover (the tag is the run's): dropped first.
        ``partitions``: the query has an INT64 column ``part`` in ``0..partitions-1``; the table
        is range-partitioned on it (up to :data:`MAX_TABLE_PARTITIONS`), so that a later
        ``WHERE part = p`` reads (and bills) only that partition's rows."""
        table = self.scratch.table(what)
        self.drop([table])
        self.created.append(table)
        by = ""
        if partitions is not None and partitions <= MAX_TABLE_PARTITIONS:
            by = f"PARTITION BY RANGE_BUCKET(part, GENERATE_ARRAY(0, {partitions}, 1)) "
        self.run(purpose, f"CREATE TABLE `{table}` {by}OPTIONS (expiration_timestamp = "
                          f"TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL {SCRATCH_HOURS} HOUR)) "
                          f"AS {select}")
        return table

    def drop_created(self) -> None:
        """Drop every scratch table :meth:`create_scratch` made (the end of a run, failed or
        not); a table that cannot be dropped is left to expire, with a warning."""
        from google.api_core import exceptions as gexc

        for table in self.created:
            try:
                self.client.delete_table(table, not_found_ok=True)
            except gexc.GoogleAPIError as exc:
                log.warning("scratch table %s not dropped (%s); it expires in %d hours", table,
                            exc, SCRATCH_HOURS)
        self.created.clear()

    def drop(self, tables: Sequence[str]) -> None:
        """Drop scratch tables (missing ones are fine)."""
        for ref in tables:
            self.client.delete_table(ref, not_found_ok=True)

    def table_schema(self, uri: str, config_key: str) -> "TableSchema":
        """The columns of the user's table ``uri`` (``bq://project.dataset.table``);
        InputDataError naming it and ``config_key`` when it does not exist."""
        from google.api_core import exceptions as gexc

        project, dataset, table = parse_table_uri(uri)
        ref = f"{project}.{dataset}.{table}"
        try:
            meta = self.client.get_table(ref)
        except gexc.NotFound:
            raise InputDataError(f"BigQuery table {uri} not found ({config_key})") from None
        return TableSchema(uri=uri, ref=ref, columns={
            f.name: ColumnKind(_STANDARD_TYPE.get(f.field_type, f.field_type),
                               f.mode == "REPEATED") for f in meta.schema})

    def source_column(self, uri: str, column: str, config_key: str) -> SourceColumn:
        """Check that ``uri``'s table exists and has ``column`` of an id type; InputDataError
        naming the table, column and ``config_key`` otherwise."""
        schema = self.table_schema(uri, config_key)
        kind = schema.column(column, "column", config_key)
        if kind.repeated or kind.sql_type not in ("INT64", "STRING"):
            raise InputDataError(f"BigQuery table {uri}: column {column!r} is "
                                 f"{'ARRAY<' * kind.repeated}{kind.sql_type}{'>' * kind.repeated}"
                                 f"; node ids must be INT64 or STRING ({config_key})")
        return SourceColumn(uri=uri, ref=schema.ref, column=column, sql_type=kind.sql_type)


_STANDARD_TYPE = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL", "RECORD": "STRUCT"}
"""The API's legacy type names -> GoogleSQL's."""


@dataclass(frozen=True)
class ColumnKind:
    """A column's GoogleSQL type (``INT64``, ``FLOAT64``, ``STRING``, ...) and whether it is an
    array (mode ``REPEATED``; ``sql_type`` is then its element type)."""

    sql_type: str
    repeated: bool


@dataclass(frozen=True)
class TableSchema:
    """A user's table: ``uri`` as the config wrote it, ``ref`` its ``project.dataset.table``,
    its columns by name."""

    uri: str
    ref: str
    columns: dict[str, ColumnKind]

    def column(self, name: str, role: str, config_key: str) -> ColumnKind:
        """The kind of column ``name``; InputDataError naming the table, the column (``role``:
        how the message calls it) and ``config_key`` when the table has no such column."""
        if name not in self.columns:
            raise InputDataError(f"BigQuery table {self.uri} has no {role} {name!r} "
                                 f"({config_key}); it has {list(self.columns)}")
        return self.columns[name]
