"""What a graph-store stage process knows from its command line: configs, stage, run folder.

The launcher (``python -m pipeline launch``) and the Vertex job both append the same arguments to
every storage and compute command (docs/runtime.md):

    --task-config PATH --resource-config PATH --stage train|infer --run-dir URI

:meth:`StageContext.from_argv` parses them (unknown extra flags are left for user code) and loads
the frozen configs. Run folder layout (one writer per prefix):

    <run-dir>/shards/                    partition stage output (read by storage)
    <run-dir>/checkpoint/                trainer output
    <run-dir>/embeddings/<node_type>/    inferencer output
    <run-dir>/_graphstore/<stage>/<job>/ readiness markers of one graph-store job
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from graphstore import uris
from graphstore.config import (
    GraphStoreStorageConfig, ResourceConfig, StageResources, TaskConfig, load_config_pair,
)

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.env import ClusterTopology

Stage = Literal["train", "infer"]


def add_stage_arguments(parser: argparse.ArgumentParser) -> None:
    """The four arguments every graph-store command receives."""
    parser.add_argument("--task-config", required=True, help="frozen task config YAML")
    parser.add_argument("--resource-config", required=True, help="frozen resource config YAML")
    parser.add_argument("--stage", required=True, choices=("train", "infer"))
    parser.add_argument("--run-dir", required=True, help="run folder (local path or gs:// prefix)")


@dataclass(frozen=True, kw_only=True)
class StageContext:
    task: TaskConfig
    resources: ResourceConfig
    stage: Stage
    run_dir: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "StageContext":
        """Configs may be local files or gs:// objects (Vertex passes the run's frozen ones)."""
        with tempfile.TemporaryDirectory(prefix="config-") as tmp:
            task, resources = load_config_pair(uris.localize(args.task_config, tmp),
                                               uris.localize(args.resource_config, tmp))
        return cls(task=task, resources=resources, stage=args.stage, run_dir=args.run_dir)

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None = None) -> "StageContext":
        """Parse the stage arguments out of ``argv`` (default: ``sys.argv[1:]``), ignoring others."""
        parser = argparse.ArgumentParser(add_help=False)
        add_stage_arguments(parser)
        args, _ = parser.parse_known_args(argv)
        return cls.from_args(args)

    @property
    def stage_resources(self) -> StageResources:
        return self.resources.trainer if self.stage == "train" else self.resources.inferencer

    @property
    def storage(self) -> GraphStoreStorageConfig:
        return self.task.trainer.storage if self.stage == "train" else self.task.inferencer.storage

    @property
    def shards_uri(self) -> str:
        return uris.join(self.run_dir, "shards")

    def path(self, *parts: str) -> str:
        return uris.join(self.run_dir, *parts)


def stage_main(prog: str, description: str, role: str,
               run: Callable[[StageContext, "ClusterTopology"], int]) -> None:
    """The whole ``__main__`` of a graph-store command (storage, train, infer): parse the stage
    arguments, read the cluster environment once, tag log lines with ``role`` + machine index,
    call ``run`` and exit with the error contract's code (graphstore.cli.run_cli)."""
    from graphstore.cli import run_cli, setup_logging
    from graphstore.env import ClusterTopology

    def main() -> int:
        parser = argparse.ArgumentParser(prog=prog, description=description)
        add_stage_arguments(parser)
        args = parser.parse_args()
        topology = ClusterTopology.from_env(os.environ)
        setup_logging(f"{role}{topology.machine_index}")
        return run(StageContext.from_args(args), topology)

    run_cli(main, prog)
