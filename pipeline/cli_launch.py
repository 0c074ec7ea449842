"""``python -m pipeline launch``: run one graph-store stage as local processes (docs/runtime.md).

A thin wrapper over :func:`pipeline.launch.launch_stage`: load the config pair, launch, print a
one-line summary. Exit codes: 0 every process exited 0; 1 a process failed (its name, rank and
log tail are printed) or the run timed out; 2 a config problem or a non-local resource config;
130 SIGINT/SIGTERM. In every case no process of the run is left running.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from graphstore.config import load_config_pair
from graphstore.formats.run_paths import RunPaths
from graphstore.config.stage import STAGES
from pipeline.launch import LaunchFailed, LaunchInterrupted, LaunchResult, launch_stage


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``launch``; ``--task-config`` / ``--resource-config`` / ``--set`` as in
    ``validate``."""
    parser.add_argument("--task-config", required=True, metavar="PATH", help="task config YAML")
    parser.add_argument("--resource-config", required=True, metavar="PATH",
                        help="resource config YAML (the stage must use local_graph_store_config)")
    parser.add_argument("--stage", required=True, choices=STAGES,
                        help="train: trainerConfig commands; infer: inferencerConfig commands")
    parser.add_argument("--run-dir", metavar="DIR", default=None,
                        help="run folder; logs go to DIR/logs/<stage>/ "
                             "(default: runs/launch-<UTC timestamp>-<pid>)")
    parser.add_argument("--timeout-s", type=float, default=3600.0, metavar="S",
                        help="end every process and fail after S seconds (default 3600)")
    parser.add_argument("--failure-grace-s", type=float, default=30.0, metavar="S",
                        help="after the first failure, S seconds for the others to exit by "
                             "themselves before they are killed (default 30)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value (dotted path, YAML value); repeatable; "
                             "the commands then get the resolved configs, frozen under "
                             "DIR/launch/<stage>/")


def default_run_dir() -> Path:
    """``runs/launch-<UTC timestamp>-<pid>`` under the working directory."""
    return Path("runs") / f"launch-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"


def summary(result: LaunchResult) -> str:
    """One line: ``stage train ok: 4 processes (2 storage, 2 compute) in 3.1 s; logs in DIR``."""
    storage = sum(p.spec.role == "storage" for p in result.processes)
    logs = RunPaths(str(result.run_dir)).logs(result.stage)
    return (f"stage {result.stage} ok: {len(result.processes)} processes ({storage} storage, "
            f"{len(result.processes) - storage} compute) in {result.seconds:.1f} s; logs in {logs}")


def run(args: argparse.Namespace) -> int:
    """Launch; config problems raise ConfigError/UsageError (exit 2 via run_cli)."""
    task, res = load_config_pair(args.task_config, args.resource_config, tuple(args.overrides))
    try:
        result = launch_stage(task, res, stage=args.stage,
                              run_dir=args.run_dir or default_run_dir(),
                              task_config_path=args.task_config,
                              resource_config_path=args.resource_config,
                              timeout_s=args.timeout_s, failure_grace_s=args.failure_grace_s,
                              overrides=tuple(args.overrides))
    except (LaunchFailed, LaunchInterrupted) as exc:
        print(f"launch: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    print(f"launch: {summary(result)}", flush=True)
    return 0
