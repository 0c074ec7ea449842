"""``python -m components.storage``: one storage machine of a graph-store job.

Receives the stage arguments every graph-store command gets (``--task-config``,
``--resource-config``, ``--stage``, ``--run-dir``), reads the cluster environment once, loads its
shard partition (``<run-dir>/shards``, partition = its storage index), runs the splitter named in
``storageArgs``, then serves ``num_server_sessions`` sessions one after another and exits 0.
See graphstore.storage.server for the order of work and docs/runtime.md for the contract.
"""

from __future__ import annotations

import argparse
import os

from graphstore.cli import run_cli, setup_logging


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m components.storage",
                                     description="Serve one graph-store storage partition.")
    from graphstore.stage import StageContext, add_stage_arguments

    add_stage_arguments(parser)
    args = parser.parse_args()
    from graphstore.env import ClusterTopology

    topology = ClusterTopology.from_env(os.environ)
    setup_logging(f"storage{topology.machine_index}")
    from graphstore.storage.server import run_storage

    return run_storage(StageContext.from_args(args), topology)


if __name__ == "__main__":
    run_cli(main, "components.storage")
