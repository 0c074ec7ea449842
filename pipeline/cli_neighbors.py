"""``python -m pipeline neighbors``: top-k neighbours of one node, read from the warehouse.

    python -m pipeline neighbors --task-config T --node-type user --node-id u42 [--k 10]
        [--among item] [--metric dot|cosine] [--run-id ID] [--run-dir D]

Reads the newest run (the ``<table>_latest`` view) unless ``--run-id`` is given; ``--among``
searches another node type's table (e.g. items for a user). The warehouse is the one
``exportConfig`` names: BigQuery (``bigqueryProject``/``bigqueryDataset``; give
``--resource-config`` when the project is only there), or the local one in
``exportConfig.localWarehouseUri``, else ``warehouse/`` beside ``--run-dir`` (default ``runs/x``,
i.e. ``runs/warehouse``).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-config", required=True, help="task config YAML (exportConfig)")
    parser.add_argument("--resource-config",
                        help="resource config YAML (its project, for BigQuery without bigqueryProject)")
    parser.add_argument("--node-type", required=True)
    parser.add_argument("--node-id", required=True, help="the raw id of the node")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--among", help="node type to search (default: --node-type)")
    parser.add_argument("--metric", default="dot", choices=("dot", "cosine"))
    parser.add_argument("--run-id", help="read this run instead of the newest")
    parser.add_argument("--run-dir", default="runs/x",
                        help="a run folder under the runs root (locates the default warehouse)")


def run(args: argparse.Namespace) -> int:
    from graphstore.runtime.errors import UsageError
    from graphstore.export import load_task_and_project, open_warehouse
    from graphstore.export.names import table_name

    task, project = load_task_and_project(args.task_config, args.resource_config)
    if args.k < 1:
        raise UsageError(f"--k must be >= 1, got {args.k}")
    warehouse = open_warehouse(task, args.run_dir, project)
    prefix = task.export.table_prefix
    among = table_name(prefix, args.among) if args.among else None
    rows = warehouse.neighbors(table_name(prefix, args.node_type), args.node_id, args.k,
                               among=among, metric=args.metric, run_id=args.run_id)
    for node_id, score in rows:
        print(f"{node_id}\t{score:.6f}")
    return 0
