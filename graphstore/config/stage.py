"""What a graph-store stage process knows from its command line: configs, stage, run folder.

The launcher (``python -m pipeline launch``) and the Vertex job both append the same arguments to
every storage and compute command (docs/runtime.md):

    --task-config PATH --resource-config PATH --stage train|infer --run-dir URI

:meth:`StageContext.from_argv` parses them (unknown extra flags are left for user code) and loads
the frozen configs; :attr:`StageContext.paths` is the run folder's layout
(graphstore.formats.run_paths.RunPaths: one writer per prefix).

A stage's sections of the configs: :func:`stage_resources` (the resource config's ``trainer`` or
``inferencer`` resources) and :func:`stage_section` (the task config's ``trainerConfig`` or
``inferencerConfig``) make that choice for every caller (pipeline/ included; this module imports
no torch).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from graphstore.io import uris
from graphstore.config import (
    GraphStoreStorageConfig, InferencerConfig, ResourceConfig, StageResources, TaskConfig,
    TrainerConfig, load_config_pair,
)
from graphstore.formats.run_paths import RunPaths

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.runtime.env import ClusterTopology

Stage = Literal["train", "infer"]
STAGES: tuple[Stage, ...] = ("train", "infer")
"""The graph-store stages, in pipeline order (``--stage`` values)."""


def _check_stage(stage: str) -> Stage:
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {stage!r}")
    return stage  # type: ignore[return-value]


def stage_resources(resources: ResourceConfig, stage: str) -> StageResources:
    """The resources of ``stage``: ``resources.trainer`` for train, ``resources.inferencer`` for
    infer (ValueError for any other stage)."""
    return resources.trainer if _check_stage(stage) == "train" else resources.inferencer


def stage_section(task: TaskConfig, stage: str) -> TrainerConfig | InferencerConfig:
    """The task config's section of ``stage``: ``task.trainer`` (``trainerConfig``) for train,
    ``task.inferencer`` (``inferencerConfig``) for infer (ValueError for any other stage). Its
    ``command`` runs on compute machines, its ``storage.command`` on storage machines."""
    return task.trainer if _check_stage(stage) == "train" else task.inferencer


def add_stage_arguments(parser: argparse.ArgumentParser) -> None:
    """The four arguments every graph-store command receives."""
    parser.add_argument("--task-config", required=True, help="frozen task config YAML")
    parser.add_argument("--resource-config", required=True, help="frozen resource config YAML")
    parser.add_argument("--stage", required=True, choices=STAGES)
    parser.add_argument("--run-dir", required=True, help="run folder (local path or gs:// prefix)")


@dataclass(frozen=True, kw_only=True)
class StageContext:
    """What one graph-store process knows: the frozen configs, its stage (train or infer) and
    its run folder (local path or gs:// prefix; its layout is :attr:`paths`)."""

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
        """This stage's resources (:func:`stage_resources`)."""
        return stage_resources(self.resources, self.stage)

    @property
    def storage(self) -> GraphStoreStorageConfig:
        """This stage's storage side (:func:`stage_section`'s ``storage``)."""
        return stage_section(self.task, self.stage).storage

    @property
    def paths(self) -> RunPaths:
        """The run folder's layout (graphstore.formats.run_paths)."""
        return RunPaths(self.run_dir)

    @property
    def shards_uri(self) -> str:
        """``paths.shards``: the shard set storage (or a colocated machine) loads."""
        return self.paths.shards


def stage_main(prog: str, description: str, role: str,
               run: Callable[[StageContext, "ClusterTopology"], int]) -> None:
    """The whole ``__main__`` of a graph-store command (storage, train, infer): parse the stage
    arguments, read the cluster environment once, tag log lines with ``role`` + machine index,
    call ``run`` and exit with the error contract's code (graphstore.runtime.cli.run_cli)."""
    from graphstore.runtime.cli import run_cli, setup_logging
    from graphstore.runtime.env import ClusterTopology

    def main() -> int:
        parser = argparse.ArgumentParser(prog=prog, description=description)
        add_stage_arguments(parser)
        args = parser.parse_args()
        topology = ClusterTopology.from_env(os.environ)
        setup_logging(f"{role}{topology.machine_index}")
        return run(StageContext.from_args(args), topology)

    run_cli(main, prog)
