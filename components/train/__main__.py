"""``python -m components.train``: the default trainer's compute-machine entrypoint.

Gets the stage arguments every graph-store command gets (``--task-config``, ``--resource-config``,
``--stage``, ``--run-dir``); ``trainerConfig.trainerArgs`` are documented in
graphstore/config/default_args.py; the order of work is in graphstore/training/trainer.py.
"""

from __future__ import annotations


def _run(ctx, topology) -> int:
    from graphstore.training.trainer import run_training

    return run_training(ctx, topology)


if __name__ == "__main__":
    from graphstore.config.stage import stage_main

    stage_main("python -m components.train", "Train the default link-prediction GNN.", "train",
               _run)
