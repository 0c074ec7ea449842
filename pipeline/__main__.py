"""``python -m pipeline <subcommand> ...``: the pipeline's command line.

Subcommands live in a table (:data:`SUBCOMMANDS`): each entry names a module that provides
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only when the parser is
built, and must not import torch at import time (do heavy imports inside ``run``): importing the
pipeline, or asking for ``--help``, stays cheap. Errors map to exit codes via
:func:`graphstore.runtime.cli.run_cli` (2: fix your input, 1: runtime failure).
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Sequence

PROG = "pipeline"


@dataclass(frozen=True, kw_only=True, slots=True)
class Subcommand:
    """One ``python -m pipeline <name>`` entry; ``module`` provides add_arguments() and run()."""

    name: str
    module: str
    help: str


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(name="validate", module="pipeline.cli_validate",
               help="check a task config and a resource config; print a summary or every problem"),
    Subcommand(name="launch", module="pipeline.cli_launch",
               help="run one stage (train or infer) as storage and compute processes on this "
                    "machine"),
    Subcommand(name="run", module="pipeline.cli_run",
               help="run the whole pipeline DAG on this machine (kfp.local): partition, train, "
                    "infer, export"),
    Subcommand(name="compile", module="pipeline.cli_compile",
               help="write the pipeline as KFP YAML for Vertex AI Pipelines"),
    Subcommand(name="plan", module="pipeline.cli_plan",
               help="estimate each storage machine's memory and disk for its partition and check "
                    "the resource config's machine types and boot disks"),
    Subcommand(name="submit", module="pipeline.cli_submit",
               help="submit the pipeline to Vertex AI Pipelines (--dry-run prints the request)"),
    Subcommand(name="schedule", module="pipeline.cli_schedule",
               help="create / list / pause / resume / delete Vertex AI pipeline schedules"),
    Subcommand(name="neighbors", module="pipeline.cli_neighbors",
               help="print the top-k neighbours of a node from the local warehouse"),
    Subcommand(name="schema", module="pipeline.cli_schema",
               help="print the JSON Schema of a task or resource config (for editors), or "
                    "regenerate docs/configs.md and docs/schema/"),
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per :data:`SUBCOMMANDS` entry."""
    parser = argparse.ArgumentParser(prog=PROG, description="graph-store GNN pipeline")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for sub in SUBCOMMANDS:
        module = importlib.import_module(sub.module)
        sub_parser = subparsers.add_parser(sub.name, help=sub.help, description=sub.help)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns its exit code."""
    args = build_parser().parse_args(argv)
    return args._run(args)


def console() -> None:
    """The ``graphstore-pipeline`` console script (and ``python -m pipeline``): logging set up,
    then :func:`main` under the exit-code contract (never returns)."""
    from graphstore.runtime.cli import run_cli, setup_logging

    setup_logging(PROG)
    run_cli(main, PROG)


if __name__ == "__main__":
    console()
