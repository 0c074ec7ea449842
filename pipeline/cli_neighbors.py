"""``python -m pipeline neighbors``: top-k neighbours of one node, read from the warehouse.

    python -m pipeline neighbors --task-config T --node-type user --node-id u42 [--k 10]
        [--among item] [--metric dot|cosine] [--run-id ID] [--run-dir D]

Reads the newest run (the ``<table>_latest`` view) unless ``--run-id`` is given; ``--among``
searches another node type's table (e.g. items for a user). The local warehouse is
``exportConfig.localWarehouseUri``, else ``warehouse/`` beside ``--run-dir`` (default ``runs/x``,
i.e. ``runs/warehouse``).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-config", required=True, help="task config YAML (exportConfig)")
    parser.add_argument("--node-type", required=True)
    parser.add_argument("--node-id", required=True, help="the raw id of the node")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--among", help="node type to search (default: --node-type)")
    parser.add_argument("--metric", default="dot", choices=("dot", "cosine"))
    parser.add_argument("--run-id", help="read this run instead of the newest")
    parser.add_argument("--run-dir", default="runs/x",
                        help="a run folder under the runs root (locates the default warehouse)")


def run(args: argparse.Namespace) -> int:
    from graphstore.config import load_task_config
    from graphstore.errors import UsageError
    from graphstore.export import local_warehouse_folder
    from graphstore.export.local_warehouse import LocalWarehouse
    from graphstore.export.names import table_name

    task = load_task_config(args.task_config)
    if task.export.warehouse != "local":
        raise UsageError("neighbors reads the local warehouse; for BigQuery use the SQL in the "
                         "README (exportConfig.warehouse is 'bigquery')")
    if args.k < 1:
        raise UsageError(f"--k must be >= 1, got {args.k}")
    warehouse = LocalWarehouse(local_warehouse_folder(task, args.run_dir))
    prefix = task.export.table_prefix
    among = table_name(prefix, args.among) if args.among else None
    rows = warehouse.neighbors(table_name(prefix, args.node_type), args.node_id, args.k,
                               among=among, metric=args.metric, run_id=args.run_id)
    for node_id, score in rows:
        print(f"{node_id}\t{score:.6f}")
    return 0
