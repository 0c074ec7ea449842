"""Embedding run folders for the export tests (local and BigQuery): a tiny partitioned graph and
run folders holding embeddings in the inferencer's documented format (graphstore.inference.inferencer), with
values chosen by the test, so every expectation comes from the inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet
from tests.shard_sets import tiny_hetero_task

REPO = Path(__file__).resolve().parents[1]
DIM = 4


def build_graph(root: Path) -> dict:
    """Raw data + shards of the tiny hetero dataset under ``root``: ``{"root", "task", "raw"}``
    (raw ids per node type, in dense-id order). Tests share it read-only."""
    cfg = tiny_hetero_task(root, seed=3)
    partition_graph(cfg, num_partitions=2, output_uri=str(root / "shards"))
    shards = ShardSet.open(str(root / "shards"))
    raw = {nt: shards.id_map(nt).column("raw_id").to_pylist() for nt in ("user", "item")}
    return {"root": root, "task": cfg, "raw": raw}


def make_run(graph, tmp: Path, name: str, *, scale: float = 1.0, finished: str = "2026-11-01T10:00:00+00:00",
             drop: int = 0) -> Path:
    """A run folder: a link to the shards plus embeddings of every node type, 2 'ranks' each.
    Node ``i``'s embedding is ``scale * [i, i+1, i+2, i+3]`` (``drop`` rows are left out)."""
    run = tmp / name
    run.mkdir(parents=True)
    (run / "shards").symlink_to(graph["root"] / "shards")
    for nt, raw in graph["raw"].items():
        n = len(raw)
        folder = run / "embeddings" / nt
        folder.mkdir(parents=True)
        ids = np.random.default_rng(0).permutation(n)[:n - drop]
        files = []
        for rank, part in enumerate(np.array_split(ids, 2)):
            emb = [list(scale * (np.arange(DIM) + i).astype(np.float32)) for i in part]
            name_ = f"part-{rank:05d}-of-00002.parquet"
            pq.write_table(pa.table({"int_id": pa.array(part, pa.int64()),
                                     "embedding": pa.array(emb, pa.list_(pa.float32()))}),
                           folder / name_)
            files.append(name_)
        (folder / "_SUCCESS").write_text(json.dumps(
            {"schema_version": 1, "node_type": nt, "count": n, "dim": DIM, "files": files,
             "finished_at": finished}))
    return run
