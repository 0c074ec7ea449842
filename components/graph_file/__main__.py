"""``python -m components.graph_file``: a shard set -> the graph file (and features file) of
replicated mode (graphstore.modes.replicated.format).

Its own small step reading the shards, rather than a flag of the partition stage: the graph file
then has the shards' numbering by construction (every shard file checked against its checksum as
it is streamed), it can be rewritten from published shards without partitioning again, and the
training split it applies (``trainerConfig.graphStoreStorageConfig.storageArgs``: splitter and
``sample_edge_direction``) belongs to training, not to partitioning. Prints a JSON summary.
Exit codes: 0 ok, 2 bad config / shards / output path, 1 runtime failure.
"""

from __future__ import annotations

import argparse
import json
import os

from graphstore.runtime.cli import run_cli, setup_logging


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m components.graph_file",
                                description="Write the memory-mappable graph file of a shard set.")
    p.add_argument("--task-config", required=True,
                   help="task config YAML (its trainer storageArgs give the split and direction)")
    p.add_argument("--shards", required=True, help="the shard set (partition stage --output)")
    p.add_argument("--output", required=True, help="local path of the graph file to write")
    p.add_argument("--features-output", default=None,
                   help="local path of the node features file (default: none written)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a task config value by dotted key (repeatable)")
    return p


def main() -> int:
    args = build_parser().parse_args()
    setup_logging("graph_file")
    from graphstore.config import load_task_config
    from graphstore.modes.replicated import write_features_file, write_graph_file
    from graphstore.formats.shards.reader import ShardSet

    task = load_task_config(args.task_config, overrides=tuple(args.overrides))
    with ShardSet.open(args.shards) as shards:
        header = write_graph_file(shards, args.output, storage_args=task.trainer.storage.storage_args)
        summary = {"output": args.output, "bytes": os.path.getsize(args.output),
                   "views": ["full", "train"] if header.splitter else ["full"],
                   "edges": {k: v.count for k, v in header.edge_types.items()}}
        if args.features_output:
            write_features_file(shards, args.features_output)
            summary["features_output"] = args.features_output
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    run_cli(main, "components.graph_file")
