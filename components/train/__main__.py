"""``python -m components.train``: the default trainer's compute-machine entrypoint.

Gets the stage arguments every graph-store command gets (``--task-config``, ``--resource-config``,
``--stage``, ``--run-dir``); ``trainerConfig.trainerArgs`` are documented in
graphstore/training/args.py; the order of work is in graphstore/training/trainer.py.
"""

from __future__ import annotations

import argparse
import os

from graphstore.cli import run_cli, setup_logging


def main() -> int:
    from graphstore.stage import StageContext, add_stage_arguments

    parser = argparse.ArgumentParser(prog="python -m components.train",
                                     description="Train the default link-prediction GNN.")
    add_stage_arguments(parser)
    args = parser.parse_args()
    from graphstore.env import ClusterTopology

    topology = ClusterTopology.from_env(os.environ)
    setup_logging(f"train{topology.machine_index}")
    from graphstore.training.trainer import run_training

    return run_training(StageContext.from_args(args), topology)


if __name__ == "__main__":
    run_cli(main, "components.train")
