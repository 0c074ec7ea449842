"""The export stage: each node type's embeddings into its warehouse table, atomically.

For each node type (default: ``inferencerConfig.nodeTypes``), in that order:
  1. check the ``_SUCCESS`` marker and join int ids back to raw ids:
     - BigQuery warehouse and a gs:// run folder: in BigQuery (``rows.joined_run`` names the
       embeddings and id map files; ``BigQueryWarehouse.load_run_joined`` loads both with load
       jobs and joins them), so no machine of ours reads a whole id map;
     - otherwise ``rows.build_rows`` joins in DuckDB (streamed, spilling) into the table-schema
       Parquet file ``<run-dir>/export/<node_type>/rows.parquet`` (local run folders; a
       temporary folder for gs:// ones);
  2. the warehouse makes them the rows of ``run_id``, replacing that run's earlier rows in one
     step (local: graphstore.export.local_warehouse; BigQuery: graphstore.export.bigquery_warehouse);
  3. the loaded count is checked against the marker's and reported.
The run id stored with the rows is the one given, else the run folder's
(graphstore.formats.run_paths.read_run_id: ``config/run.json``, or the name of a folder without one);
paths follow graphstore.formats.run_paths.RunPaths.
A node type that fails stops the stage; node types already loaded stay loaded (each is complete).
This package imports neither torch nor GLT (the pipeline process runs it).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Sequence

from graphstore.io import uris
from graphstore.config import TaskConfig
from graphstore.runtime.errors import UsageError
from graphstore.export.bigquery_warehouse import BigQueryWarehouse
from graphstore.export.local_warehouse import LocalWarehouse
from graphstore.export.names import table_name
from graphstore.formats.run_ids import RunId
from graphstore.export.rows import build_rows, joined_run
from graphstore.formats.run_paths import EXPORT_ROWS, RunPaths, read_run_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Exported:
    node_type: str
    table: str
    rows: int
    where: str  # the warehouse file or dataset


def local_warehouse_folder(task: TaskConfig, run_dir: str) -> str:
    """``exportConfig.localWarehouseUri``, else ``warehouse/`` beside the run folder (shared by
    every run kept under the same parent, so the tables hold their history)."""
    if task.export.local_warehouse_uri:
        return task.export.local_warehouse_uri
    if uris.is_gcs(run_dir):
        raise UsageError("exportConfig.localWarehouseUri must be set when the run folder is on gs://")
    return os.path.join(os.path.dirname(os.path.abspath(run_dir.rstrip("/"))), "warehouse")


def load_task_and_project(task_path: str, resource_path: str | None = None,
                          overrides: Sequence[str] = ()) -> tuple[TaskConfig, str | None]:
    """The task config, and BigQuery's fallback project for :func:`open_warehouse`: the resource
    config's ``common_compute_config.project`` when a resource config is given, else ``None``.
    ``overrides`` (``key=value``) are routed to either file by their first key."""
    from graphstore.config import load_config_pair, load_task_config

    if resource_path:
        task, res = load_config_pair(task_path, resource_path, overrides)
        return task, res.shared.project
    return load_task_config(task_path, overrides), None


def open_warehouse(task: TaskConfig, run_dir: str,
                   project: str | None = None) -> LocalWarehouse | BigQueryWarehouse:
    """The warehouse ``exportConfig`` names. BigQuery's project: ``exportConfig.bigqueryProject``,
    else ``project`` (the resource config's ``common_compute_config.project``)."""
    cfg = task.export
    if cfg.warehouse == "local":
        return LocalWarehouse(local_warehouse_folder(task, run_dir))
    project = cfg.bigquery_project or project
    if not project or not cfg.bigquery_dataset:
        raise UsageError("exportConfig: warehouse 'bigquery' needs bigqueryDataset and a project "
                         "(bigqueryProject or the resource config's common_compute_config.project)")
    return BigQueryWarehouse(project, cfg.bigquery_dataset)


def export_run(task: TaskConfig, run_dir: str, *, run_id: RunId | str | None = None,
               node_types: Sequence[str] | None = None, project: str | None = None,
               before_swap=None) -> list[Exported]:
    """Export every node type (see module docs); returns one entry per node type, in order.
    ``run_id``: the rows' run id (a ``str`` is parsed by the run-id rule), else the run
    folder's (its run record). ``before_swap(node_type)`` is a test hook run between staging
    and the swap."""
    run_id = RunId.parse(run_id, "run_id") if run_id else read_run_id(run_dir)
    if task.inferencer is None and not node_types:
        raise UsageError("no node types to export: give --node-type or an inferencerConfig")
    types = list(node_types or task.inferencer.node_types)
    unknown = [nt for nt in types if nt not in task.graph_metadata.node_types]
    if unknown:
        raise UsageError(f"node type {unknown[0]!r} is not in graphMetadata.nodeTypes "
                         f"({', '.join(task.graph_metadata.node_types)})")
    cfg = task.export
    paths = RunPaths(run_dir)
    warehouse = open_warehouse(task, run_dir, project)
    done = []
    with tempfile.TemporaryDirectory(prefix="export-") as tmp:
        for node_type in types:
            t0 = time.perf_counter()
            table = table_name(cfg.table_prefix, node_type)
            hook = None if before_swap is None else (lambda nt=node_type: before_swap(nt))
            if isinstance(warehouse, BigQueryWarehouse) and uris.is_gcs(run_dir):
                # the production path: BigQuery reads the files from gs:// and joins them
                joined = joined_run(run_dir, node_type, model_version=cfg.model_version,
                                    workdir=tmp)
                loaded = warehouse.load_run_joined(table, joined, run_id, before_swap=hook)
                how = "joined in BigQuery"
            else:
                out_path = (os.path.join(tmp, node_type, EXPORT_ROWS) if uris.is_gcs(run_dir)
                            else paths.export_rows(node_type))
                rows = build_rows(run_dir, node_type, run_id=run_id,
                                  model_version=cfg.model_version, out_path=out_path)
                loaded = warehouse.load_run(table, rows, run_id, before_swap=hook)
                how = "joined here"
            log.info("export %s: %d rows -> %s table %s, run %s (%s), in %.1f s", node_type,
                     loaded, warehouse.path, table, run_id, how, time.perf_counter() - t0)
            done.append(Exported(node_type=node_type, table=table, rows=loaded,
                                 where=warehouse.path))
    return done
