"""``python -m pipeline plan``: will each storage machine hold its partition?

    python -m pipeline plan --task-config T --resource-config R [--shards URI] [--set K=V]...

Prints, per partition, what its storage machine holds (edges, nodes, feature values, shard
bytes), the estimated peak memory from the measured model (graphstore.sizing, stated in the
output) and what the machine and its boot disk need, then for each stage whether the configured
machine types and disks hold it (pipeline.plan). Counts come from the shard set at ``--shards``
(its manifest: exact) or, before partitioning, from the raw tables' row counts (an estimate).
Exit 0: it fits; 2: it does not (one line per key to change), or the configs are wrong; 1: the
sizes could not be read.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-config", required=True, metavar="PATH", help="task config YAML")
    parser.add_argument("--resource-config", required=True, metavar="PATH",
                        help="resource config YAML")
    parser.add_argument("--shards", default=None, metavar="URI",
                        help="a partitioned shard set (folder or gs:// root): exact counts from its "
                             "manifest (default: estimate from the raw tables' row counts)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value (dotted path, YAML value); repeatable")


def run(args: argparse.Namespace) -> int:
    from graphstore.config import ConfigError, load_config_pair
    from graphstore.errors import RuntimeFailure
    from pipeline.plan import SizesUnknown, check, partition_loads, this_machine_memory_bytes

    task, res = load_config_pair(args.task_config, args.resource_config, tuple(args.overrides))
    try:
        loads, source = partition_loads(task, res.num_partitions, args.shards)
    except SizesUnknown as exc:
        raise RuntimeFailure(f"plan: sizes unknown: {exc}") from None
    plan = check(task, res, loads, source, task_file=args.task_config,
                 res_file=args.resource_config, machine_memory_bytes=this_machine_memory_bytes())
    print("\n".join(plan.lines), flush=True)
    if not plan.fits:
        print(str(ConfigError(plan.problems)), file=sys.stderr, flush=True)
        return 2
    return 0
