"""``python -m pipeline validate``: load a task + resource config pair and report.

Exit 0 with a one-line summary (or, with ``--print``, the resolved configs as YAML on stdout and the
summary on stderr); exit 2 listing every problem of both files.
"""

from __future__ import annotations

import argparse
import sys

import yaml

from graphstore.config import ResourceConfig, TaskConfig, load_config_pair


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``validate``; ``--task-config`` / ``--resource-config`` / ``--set`` are shared
    spellings that later subcommands reuse."""
    parser.add_argument("--task-config", required=True, metavar="PATH", help="task config YAML")
    parser.add_argument("--resource-config", required=True, metavar="PATH",
                        help="resource config YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value (dotted path, YAML value); repeatable; "
                             "routed to the file whose top-level key it starts with")
    parser.add_argument("--print", dest="print_configs", action="store_true",
                        help="print the resolved configs as YAML")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def summary(task: TaskConfig, res: ResourceConfig) -> str:
    """E.g. ``ok: 2 node types, 2 edge types, 1 supervision edge type, 2 partitions, trainer ...``."""
    gm = task.graph_metadata
    return ", ".join([
        f"ok: {_plural(len(gm.node_types), 'node type')}",
        _plural(len(gm.edge_types), "edge type"),
        _plural(len(task.supervision_edge_types), "supervision edge type"),
        _plural(res.num_partitions, "partition"),
        f"trainer {res.trainer.describe()}",
        f"inferencer {res.inferencer.describe()}",
    ])


def dump_yaml(task: TaskConfig, res: ResourceConfig) -> str:
    """Both resolved configs as two YAML documents (task first)."""
    return yaml.safe_dump_all([task.to_dict(), res.to_dict()], sort_keys=False,
                              default_flow_style=False)


def run(args: argparse.Namespace) -> int:
    """Validate; raises ConfigError (exit 2 via run_cli) listing every problem."""
    task, res = load_config_pair(args.task_config, args.resource_config, tuple(args.overrides))
    if args.print_configs:
        sys.stdout.write(dump_yaml(task, res))
        print(summary(task, res), file=sys.stderr)
    else:
        print(summary(task, res))
    return 0
