"""``python -m components.export``: load each node type's embeddings into its warehouse table.

    python -m components.export --task-config T --run-dir D [--run-id ID] [--node-type NT ...]

Needs the infer stage's ``<run-dir>/embeddings/<node_type>/_SUCCESS``; the run id defaults to the
run folder's (``<run-dir>/config/run.json``, else the folder's name: graphstore.formats.run_paths); the
warehouse comes from ``exportConfig``. A local ``--run-dir`` that does not
exist and a ``--node-type`` outside ``graphMetadata.nodeTypes`` exit 2; missing embeddings in an
existing run folder exit 1. Order of work and guarantees:
graphstore/export/__init__.py. Prints one line per node type (rows loaded, table).
"""

from __future__ import annotations

import argparse
import os

from graphstore.runtime.cli import run_cli, setup_logging


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m components.export",
                                     description="Load embeddings into the warehouse.")
    parser.add_argument("--task-config", required=True, help="task config YAML")
    parser.add_argument("--resource-config",
                        help="resource config YAML (its common_compute_config.project is BigQuery's "
                             "project when exportConfig.bigqueryProject is not set)")
    parser.add_argument("--run-dir", required=True, help="run folder (local path or gs:// prefix)")
    parser.add_argument("--run-id", help="run id stored with the rows (default: the run_id of "
                        "<run-dir>/config/run.json, else the run folder's name)")
    parser.add_argument("--node-type", action="append", dest="node_types",
                        help="export only this node type (repeatable; default: inferencerConfig.nodeTypes)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a task config value (dotted path)")
    args = parser.parse_args()
    setup_logging("export")
    from graphstore.io import uris
    from graphstore.runtime.errors import UsageError
    from graphstore.export import export_run, load_task_and_project

    if not uris.is_gcs(args.run_dir) and not os.path.isdir(args.run_dir):
        raise UsageError(f"--run-dir {args.run_dir}: no such folder (give the run folder the infer "
                         "stage wrote, e.g. runs/<run id>)")

    task, project = load_task_and_project(args.task_config, args.resource_config, args.set)
    for done in export_run(task, args.run_dir, run_id=args.run_id, node_types=args.node_types,
                           project=project):
        print(f"export: {done.node_type}: {done.rows} rows -> {done.table} in {done.where}")
    return 0


if __name__ == "__main__":
    run_cli(main, "components.export")
