"""``python -m components.partition``: raw node/edge tables -> shards for the storage servers.

Reads the data sources named in the task config, writes the shard set (graphstore.formats.shards.format)
to ``--output`` with the manifest last, with the engine ``datasetConfig.partitionConfig.engine``
picks (the local one, or BigQuery's for ``bq://`` tables and a gs:// output). The partition count is, in order of precedence:
``--num-partitions``, ``datasetConfig.partitionConfig.numPartitions``, the resource config's
storage process count. ``--num-partitions N`` is applied as the override
``datasetConfig.partitionConfig.numPartitions=N``, so it passes the config's checks (>= 1, equal to
the storage count: one partition per storage process) and a problem names the flag. Exit codes:
0 ok, 2 bad config or bad input data, 1 runtime failure.
"""

from __future__ import annotations

import argparse
import json
import logging

from graphstore.runtime.cli import run_cli, setup_logging

log = logging.getLogger("components.partition")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.partition",
        description="Partition raw edge and node tables into shards for graph-store servers.",
    )
    p.add_argument("--task-config", required=True, help="task config YAML (data sources, graph)")
    p.add_argument("--resource-config", required=True,
                   help="resource config YAML (its storage count is the default partition count)")
    p.add_argument("--output", required=True, help="output folder or gs:// prefix for the shards")
    p.add_argument("--num-partitions", type=int, default=None,
                   help="the partition count (must equal the resource config's storage count; "
                        "same as --set datasetConfig.partitionConfig.numPartitions=N)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value by dotted key (repeatable)")
    return p


def main() -> int:
    args = build_parser().parse_args()
    setup_logging("partition")
    from graphstore.config import load_config_pair
    from graphstore.partition import partition_task

    overrides, origins = list(args.overrides), {}
    if args.num_partitions is not None:
        flag = f"datasetConfig.partitionConfig.numPartitions={args.num_partitions}"
        overrides.append(flag)
        origins[flag] = f"--num-partitions {args.num_partitions}"
    task, resources = load_config_pair(args.task_config, args.resource_config,
                                       overrides=tuple(overrides), origins=origins)
    num_partitions = task.dataset.partition.num_partitions or resources.num_partitions
    manifest = partition_task(task, num_partitions=num_partitions, output_uri=args.output)
    summary = {
        "output": args.output,
        "partitions": manifest.num_partitions,
        "nodes": {k: v.count for k, v in manifest.node_types.items()},
        "edges": {k: v.count for k, v in manifest.edge_types.items()},
        "dropped_dangling_edges": {k: v.dropped_dangling for k, v in manifest.edge_types.items()
                                   if v.dropped_dangling},
        "seconds": manifest.stats.get("seconds"),
        "edges_per_s": manifest.stats.get("edges_per_s"),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    run_cli(main, "components.partition")
