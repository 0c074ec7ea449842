"""``python -m components.infer``: the default inferencer's compute-machine entrypoint.

Gets the stage arguments every graph-store command gets (``--task-config``, ``--resource-config``,
``--stage infer``, ``--run-dir``). Embeds every node of each ``inferencerConfig.nodeTypes`` entry,
one storage session per node type, into ``<run-dir>/embeddings/<node_type>/`` (Parquet shards,
then a ``_SUCCESS`` marker). ``inferencerConfig.inferencerArgs`` and the order of work are
documented in graphstore/inference/inferencer.py.
"""

from __future__ import annotations


def _run(ctx, topology) -> int:
    from graphstore.inference.inferencer import run_inference

    return run_inference(ctx, topology)


if __name__ == "__main__":
    from graphstore.config.stage import stage_main

    stage_main("python -m components.infer", "Embed every node of the configured node types.",
               "infer", _run)
