"""``python -m components.storage``: one storage machine of a graph-store job.

Receives the stage arguments every graph-store command gets (``--task-config``,
``--resource-config``, ``--stage``, ``--run-dir``), reads the cluster environment once, loads its
shard partition (``<run-dir>/shards``, partition = its storage index), runs the splitter named in
``storageArgs``, then serves ``num_server_sessions`` sessions one after another and exits 0.
See graphstore.modes.graph_store.server for the order of work and docs/runtime.md for the contract.
"""

from __future__ import annotations


def _run(ctx, topology) -> int:
    from graphstore.modes.graph_store.server import run_storage

    return run_storage(ctx, topology)


if __name__ == "__main__":
    from graphstore.config.stage import stage_main

    stage_main("python -m components.storage", "Serve one graph-store storage partition.",
               "storage", _run)
