"""``python -m pipeline plan``: will each storage machine hold its partition?

    python -m pipeline plan --task-config T --resource-config R [--shards URI] [--set K=V]...
    python -m pipeline plan --resource-config R --nodes N --edges E [--features D] [--labels L]

Prints, per partition, what its storage machine holds (edges, nodes, feature values, shard
bytes), the estimated peak memory from the measured model (graphstore.planning.sizing, stated in the
output) and what the machine and its boot disk need, then for each stage whether the configured
machine types and disks hold it, and the cheapest machine type we know a price of that would
(pipeline.plan). Counts come from the shard set at ``--shards`` (its manifest: exact), before
partitioning from the raw tables' row counts (an estimate), or from ``--nodes`` / ``--edges`` /
``--features`` / ``--labels`` alone (no tables needed; the task config is then optional). Exit 0:
it fits; 2: it does not (one line per key to change), or the configs are wrong; 1: the sizes
could not be read. With ``bq://`` tables that a Vertex AI run partitions in BigQuery
(``partitionConfig.engine``), it also prints the bytes the engine's statements will read and
their on-demand price (graphstore.planning.bigquery_cost; estimated from the tables' metadata).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-config", default=None, metavar="PATH",
                        help="task config YAML (required unless the graph is given by --nodes and "
                             "--edges)")
    parser.add_argument("--resource-config", required=True, metavar="PATH",
                        help="resource config YAML")
    parser.add_argument("--shards", default=None, metavar="URI",
                        help="a partitioned shard set (folder or gs:// root): exact counts from its "
                             "manifest (default: estimate from the raw tables' row counts)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value (dotted path, YAML value); repeatable")
    counts = parser.add_argument_group("a graph described by counts alone (no tables needed)")
    counts.add_argument("--nodes", type=_count, default=None, metavar="N",
                        help="nodes of every type")
    counts.add_argument("--edges", type=_count, default=None, metavar="E",
                        help="edges the storage holds, reverse types included")
    counts.add_argument("--features", type=_count, default=0, metavar="D",
                        help="float32 feature values per node (default 0)")
    counts.add_argument("--labels", type=_count, default=0, metavar="L",
                        help="supervision label rows (default 0)")
    counts.add_argument("--partitions", type=_count, default=None, metavar="P",
                        help="storage machines to split the graph over (default: the resource "
                             "config's storage pool)")


def _count(text: str) -> int:
    """An int >= 0, also as 1e9 / 100_000 / 5B / 90M / 7.5k."""
    scale = {"k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
    raw = text.strip().replace("_", "").replace(",", "")
    mult = scale.get(raw[-1:].lower(), 1)
    try:
        value = float(raw[:-1] if mult != 1 else raw) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (e.g. 100000, 1e9, 5B)") from None
    if value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"not a count >= 0: {text!r}")
    return int(value)


def run(args: argparse.Namespace) -> int:
    from graphstore.config import ConfigError, load_config_pair, load_resource_config
    from graphstore.runtime.errors import RuntimeFailure, UsageError
    from graphstore.planning.sizing import GraphCounts, loads_from_counts
    from pipeline.plan import (SizesUnknown, check, check_counts, partition_loads,
                               this_machine_memory_bytes)

    by_counts = args.nodes is not None or args.edges is not None
    if by_counts:
        if args.nodes is None or args.edges is None or args.shards:
            raise UsageError("plan: a graph given by counts needs both --nodes and --edges, and "
                             "no --shards")
        res = load_resource_config(args.resource_config, tuple(args.overrides))
        counts = GraphCounts(nodes=args.nodes, edges=args.edges, feature_dim=args.features,
                             labels=args.labels)
        if args.partitions is not None and args.partitions < 1:
            raise UsageError("plan: --partitions must be >= 1")
        parts = args.partitions or res.num_partitions
        plan = check_counts(counts, res, loads_from_counts(counts, parts),
                            res_file=args.resource_config)
    else:
        if args.task_config is None:
            raise UsageError("plan: give --task-config (or describe the graph with --nodes and "
                             "--edges)")
        if args.partitions is not None or args.features or args.labels:
            raise UsageError("plan: --partitions, --features and --labels describe a graph given "
                             "by counts: add --nodes and --edges")
        task, res = load_config_pair(args.task_config, args.resource_config, tuple(args.overrides))
        try:
            loads, source = partition_loads(task, res.num_partitions, args.shards)
        except SizesUnknown as exc:
            raise RuntimeFailure(f"plan: sizes unknown: {exc}") from None
        plan = check(task, res, loads, source, task_file=args.task_config,
                     res_file=args.resource_config, machine_memory_bytes=this_machine_memory_bytes())
    print("\n".join(plan.lines), flush=True)
    if not by_counts:
        from graphstore.planning.bigquery_cost import (cost_lines, engine_costs, source_shapes,
                                                       uses_bigquery_engine)

        if uses_bigquery_engine(task):
            from pipeline.bigquery_dry_run import plan_dry_run_lines

            print("\n".join(cost_lines(engine_costs(task, source_shapes(task)))), flush=True)
            print("\n".join(plan_dry_run_lines(task)), flush=True)
    if not plan.fits:
        print(str(ConfigError(plan.problems)), file=sys.stderr, flush=True)
        return 2
    return 0
