"""The partition stage as the config asks for it: the engine ``partitionConfig.engine`` picks
for the output (graphstore.config: ``partition_engine``), and for the BigQuery engine the place
its jobs run (``partitionConfig.bigquery``, defaults resolved from the first ``bq://`` source).
Both the partition component and ``pipeline run`` call :func:`partition_task`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from graphstore.formats.shards.format import Manifest

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import TaskConfig
    from graphstore.partition.bigquery_engine import ScratchPlace

log = logging.getLogger(__name__)


def partition_task(task: "TaskConfig", *, num_partitions: int, output_uri: str,
                   bigquery_client: Any = None) -> Manifest:
    """Partition the task's raw tables into ``output_uri`` with the configured engine; returns
    the manifest of the version now current."""
    from graphstore.config import partition_engine

    engine = partition_engine(task.dataset, output_uri)
    log.info("partition engine: %s (datasetConfig.partitionConfig.engine: %s)", engine,
             task.dataset.partition.engine)
    if engine == "local":
        from graphstore.partition.engine import partition_graph

        return partition_graph(task, num_partitions=num_partitions, output_uri=output_uri)
    from graphstore.partition.bigquery_engine import partition_graph_bigquery

    place = scratch_place(task, bigquery_client)
    return partition_graph_bigquery(task, num_partitions=num_partitions, output_uri=output_uri,
                                    scratch=place, client=bigquery_client)


def scratch_project(task: "TaskConfig") -> str:
    """The project the BigQuery engine's jobs and scratch dataset live in:
    ``partitionConfig.bigquery.project``, else the first ``bq://`` source's project."""
    from graphstore.io.bigquery_source import parse

    first = next(s.uri for s in (*task.dataset.node_sources, *task.dataset.edge_sources))
    return task.dataset.partition.bigquery.project or parse(first)[0]


def scratch_place(task: "TaskConfig", client: Any = None) -> "ScratchPlace":
    """``partitionConfig.bigquery`` with its defaults resolved (its config docs): the project
    of the first ``bq://`` source, that source's dataset's location."""
    from graphstore.io.bigquery_source import parse
    from graphstore.partition.bigquery_engine import ScratchPlace

    cfg = task.dataset.partition.bigquery
    first = next(s.uri for s in (*task.dataset.node_sources, *task.dataset.edge_sources))
    source_project, source_dataset, _ = parse(first)
    project = scratch_project(task)
    location = cfg.location
    if location is None:
        if client is None:
            from graphstore.io.gcp import bigquery_client

            client = bigquery_client(project)
        location = client.get_dataset(f"{source_project}.{source_dataset}").location
    return ScratchPlace(project=project, dataset=cfg.dataset, location=location)
