"""``pipeline plan``'s dry run of the BigQuery engine's statements that read only the source tables.

Most of the engine's statements read scratch tables that exist only while the partition task
runs, so no dry run can price them before it (graphstore.planning.bigquery_cost estimates them
from the tables' metadata instead). The first statement on each source table reads that table
alone, and is dry-run here exactly as the engine will send it:

- per node table: its id check (graphstore.partition.bigquery_numbering.id_check_sql);
- per edge table: its endpoint check (graphstore.partition.bigquery_edges.endpoint_check_sql).

A dry run (``QueryJobConfig(dry_run=True)``) is free and reads no data; BigQuery answers with the
bytes the statement would bill. The tests' emulator answers 0 for every statement: when every
answer is 0 the lines say so, and the metadata estimate is the figure to use. A dry run that fails
(a missing column, no permission to create jobs: the caller's own) prints the service's message on
its line; ``pipeline plan`` goes on (``pipeline submit`` refuses what it checks,
pipeline/bigquery_checks.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import TaskConfig


@dataclass(frozen=True)
class SourceStatement:
    """One engine statement on one source table: what it is for and its SQL."""

    purpose: str
    sql: str


@dataclass(frozen=True)
class DryRun:
    """A statement's dry-run answer: the bytes BigQuery would bill, or the error it gave."""

    statement: SourceStatement
    bytes: int | None
    error: str | None = None


def source_statements(task: "TaskConfig") -> list[SourceStatement]:
    """The engine's first statement on each source table, node tables first, in config order."""
    from graphstore.io.bigquery_source import parse
    from graphstore.partition.bigquery_edges import endpoint_check_sql
    from graphstore.partition.bigquery_numbering import id_check_sql

    def ref(uri: str) -> str:
        return ".".join(parse(uri))

    out = [SourceStatement(f"checking the ids of node type {ns.node_type!r} ({ns.uri})",
                           id_check_sql(ref(ns.uri), ns.id_column))
           for ns in task.dataset.node_sources]
    out += [SourceStatement(f"checking the endpoints of {es.edge_type} ({es.uri})",
                            endpoint_check_sql(ref(es.uri), es.src_column, es.dst_column))
            for es in task.dataset.edge_sources]
    return out


def dry_run(statements: list[SourceStatement], client: Any, location: str | None
            ) -> list[DryRun]:
    """Each statement dry-run in ``location`` (None: the client's default); nothing is billed."""
    from google.api_core import exceptions as gexc
    from google.cloud import bigquery

    out = []
    for st in statements:
        config = bigquery.QueryJobConfig(dry_run=True, use_query_cache=False)
        try:
            job = client.query(st.sql, job_config=config, location=location)
            out.append(DryRun(st, int(job.total_bytes_processed or 0)))
        except gexc.GoogleAPIError as exc:
            out.append(DryRun(st, None, getattr(exc, "message", None) or str(exc)))
    return out


def dry_run_lines(runs: list[DryRun]) -> list[str]:
    """The report's lines: each statement's billed bytes (or error), and what a 0 means."""
    lines = ["BigQuery engine: dry run of its statements that read only the source tables "
             "(QueryJobConfig(dry_run=True); pipeline/bigquery_dry_run.py):"]
    for run in runs:
        figure = f"{run.bytes:,} B" if run.error is None else "failed"
        lines.append(f"  {figure:>16}  {run.statement.purpose}"
                     + (f": {run.error}" if run.error else ""))
    answered = [r for r in runs if r.error is None]
    if answered and not any(r.bytes for r in answered):
        lines.append("  the service reported 0 bytes for every statement (BigQuery's emulator "
                     "does): use the estimate above")
    return lines


def plan_dry_run_lines(task: "TaskConfig", client: Any = None) -> list[str]:
    """:func:`dry_run_lines` for ``task``'s sources, in the jobs' project and location
    (``partitionConfig.bigquery``, defaults from the first source table)."""
    from graphstore.io.bigquery_source import parse

    statements = source_statements(task)
    cfg = task.dataset.partition.bigquery
    if client is None:
        from graphstore.io.gcp import bigquery_client

        first = (*task.dataset.node_sources, *task.dataset.edge_sources)[0].uri
        client = bigquery_client(cfg.project or parse(first)[0])
    return dry_run_lines(dry_run(statements, client, cfg.location))
