"""``pipeline submit``'s checks of a config that partitions in BigQuery, before anything is sent.

When a Vertex AI run would partition in BigQuery (``datasetConfig.partitionConfig.engine``:
every source a ``bq://`` table), :func:`bigquery_engine_problems` reads the tables' and datasets'
metadata (no query runs, nothing is billed) and returns one Problem per thing that would fail
the partition task after the pipeline started:

- a source table that does not exist (or that the caller cannot see);
- source tables in more than one location (one SQL job reads them all, in one location);
- ``partitionConfig.bigquery.location`` set to another location than the tables';
- a scratch dataset (``partitionConfig.bigquery.dataset``) that exists in another location.

Permissions to run jobs and to write the scratch dataset and the run bucket are the service
account's, not the caller's: pipeline.service_account_checks asks for them as that account.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphstore.config import Problem

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import TaskConfig


def source_keys(task: "TaskConfig") -> list[tuple[str, str]]:
    """``(config key, uri)`` of every source table, node tables first, in config order."""
    return [(f"datasetConfig.dataSources.{kind}[{i}].uri", src.uri)
            for kind, group in (("nodes", task.dataset.node_sources),
                                ("edges", task.dataset.edge_sources))
            for i, src in enumerate(group)]


def bigquery_engine_problems(task: "TaskConfig", task_file: str, client: Any = None
                             ) -> list[Problem]:
    """The problems of the module docs (none when the run does not partition in BigQuery)."""
    from google.api_core import exceptions as gexc

    from graphstore.io.bigquery_source import parse
    from graphstore.partition.configured import scratch_project
    from graphstore.planning.bigquery_cost import uses_bigquery_engine

    if not uses_bigquery_engine(task):
        return []
    cfg = task.dataset.partition.bigquery
    sources = source_keys(task)
    project = scratch_project(task)
    if client is None:
        from graphstore.io.gcp import bigquery_client

        client = bigquery_client(project)
    problems, locations = [], {}
    for path, uri in sources:
        table_project, dataset, table = parse(uri)
        try:
            client.get_table(f"{table_project}.{dataset}.{table}")
            locations[uri] = client.get_dataset(f"{table_project}.{dataset}").location
        except gexc.NotFound:
            problems.append(Problem(file=task_file, path=path, value=repr(uri), message=(
                f"{uri}: BigQuery table not found (the BigQuery engine reads it: "
                "datasetConfig.partitionConfig.engine)")))
    found = sorted({loc for loc in locations.values() if loc})
    if len(found) > 1:
        problems.append(Problem(file=task_file, path="datasetConfig.dataSources", value=None,
                                message=f"the source tables are in {', '.join(found)}: the "
                                        "BigQuery engine's jobs read them together, in one "
                                        "location; copy them into one"))
    if cfg.location and found and cfg.location.lower() not in {f.lower() for f in found}:
        problems.append(Problem(file=task_file, path="datasetConfig.partitionConfig.bigquery."
                                "location", value=repr(cfg.location), message=(
                                    f"{cfg.location!r}, but the source tables are in "
                                    f"{', '.join(found)}; the jobs run where the tables are")))
    want = cfg.location or (found[0] if len(found) == 1 else None)
    scratch = f"{project}.{cfg.dataset}"
    try:
        have = client.get_dataset(scratch).location
    except gexc.NotFound:
        have = None  # the engine creates it, in ``want``
    if want and have and have.lower() != want.lower():
        problems.append(Problem(file=task_file, path="datasetConfig.partitionConfig.bigquery."
                                "dataset", value=repr(cfg.dataset), message=(
                                    f"{scratch} is in {have}, the jobs run in {want}; name a "
                                    "dataset in that location (or a new one: it is created)")))
    return problems
