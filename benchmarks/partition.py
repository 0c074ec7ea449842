"""Partition throughput and peak memory: ours vs GLT's RandomPartitioner vs PyG's Partitioner.

All three partition the same generated heterogeneous graph (users with string ids, items with
int ids, 16 features each, user-buys->item and item-similar_to->item edges) into the same number
of parts, each in its own process so peak RSS is that method's alone (``ru_maxrss`` of the child).

* ``ours``: ``graphstore.partition.partition_graph`` from the raw Parquet files (reads, checks,
  maps raw ids to dense ids, writes shards with checksums and a manifest); ``ours_1g`` with
  ``memoryLimitMb: 1024``; ``ours_sql`` forced onto the DuckDB path (no id map in memory:
  ``PartitionTuning(lookup_share=0.0)`` passed to ``partition_graph``).
* ``glt`` / ``pyg``: the raw Parquet is first read and mapped to dense ids in memory (pyarrow),
  which they need as input; ``load_s`` is that part, ``partition_s`` their own call.
  edges/s uses load_s + partition_s, i.e. the same raw-files-to-shards work as ours.

usage: python benchmarks/partition.py [--sizes 1000000,10000000,50000000] [--partitions 2]
                                      [--methods ours,glt,pyg] [--work .data/bench-partition]
                                      [--repeat N] [--fixed-nodes]
Prints a table and writes benchmarks/results/partition.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

EDGE_TYPES = (("user", "buys", "item"), ("item", "similar_to", "item"))


def task_yaml(data: Path, memory_limit_mb: int = 2048) -> dict:
    buys = {"srcNodeType": "user", "relation": "buys", "dstNodeType": "item"}
    sim = {"srcNodeType": "item", "relation": "similar_to", "dstNodeType": "item"}
    feats = [f"f_{i}" for i in range(16)]
    storage = {"command": "python -m components.storage", "storageArgs": {"sample_edge_direction": "in"}}
    return {
        "graphMetadata": {"nodeTypes": ["user", "item"], "edgeTypes": [buys, sim]},
        "taskMetadata": {"nodeAnchorBasedLinkPredictionTaskMetadata": {"supervisionEdgeTypes": [buys]}},
        "datasetConfig": {"dataRootUri": str(data), "dataSources": {
            "nodes": [{"nodeType": "user", "uri": "users.parquet", "idColumn": "user_id", "featureColumns": feats},
                      {"nodeType": "item", "uri": "items.parquet", "idColumn": "item_id", "featureColumns": feats}],
            "edges": [{"edgeType": buys, "uri": "user_item.parquet", "srcColumn": "user_id",
                       "dstColumn": "item_id", "weightColumn": "weight"},
                      {"edgeType": sim, "uri": "item_item.parquet", "srcColumn": "src_item_id",
                       "dstColumn": "dst_item_id"}]},
            "partitionConfig": {"memoryLimitMb": memory_limit_mb}},
        "trainerConfig": {"command": "x", "graphStoreStorageConfig": storage},
        "inferencerConfig": {"command": "x", "graphStoreStorageConfig": storage},
    }


# -- workers (run in a child process each) ------------------------------------------------------
def worker_ours(data: Path, out: Path, parts: int) -> dict:
    return _ours(data, out, parts, 2048, lookup_share=None)


def worker_ours_1g(data: Path, out: Path, parts: int) -> dict:
    """Ours with memoryLimitMb 1024: shows that the limit, not the edge count, bounds memory."""
    return _ours(data, out, parts, 1024, lookup_share=None)


def worker_ours_sql(data: Path, out: Path, parts: int) -> dict:
    """Ours with no id map held in memory: every step on the DuckDB path (graphs whose id maps
    exceed a quarter of memoryLimitMb take it)."""
    return _ours(data, out, parts, 2048, lookup_share=0.0)


def _ours(data: Path, out: Path, parts: int, memory_limit_mb: int, *,
          lookup_share: float | None) -> dict:
    """Our partitioner on ``data``; ``lookup_share`` None: the default tuning."""
    import yaml

    from graphstore.config import load_config_pair
    from graphstore.partition import PartitionTuning, partition_graph

    tp, rp = out.parent / "task.yaml", out.parent / "res.yaml"
    tp.write_text(yaml.safe_dump(task_yaml(data, memory_limit_mb)))
    rp.write_text(yaml.safe_dump({k: {"local_graph_store_config": {"num_storage_processes": parts}}
                                  for k in ("trainer_resource_config", "inferencer_resource_config")}))
    task, _ = load_config_pair(str(tp), str(rp))
    tuning = None if lookup_share is None else PartitionTuning(lookup_share=lookup_share)
    t0 = time.perf_counter()
    partition_graph(task, num_partitions=parts, output_uri=str(out), tuning=tuning)
    return {"load_s": 0.0, "partition_s": time.perf_counter() - t0}


def _load_dense(data: Path):
    """Raw Parquet -> dense-id torch tensors (what GLT / PyG partitioners take)."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import torch

    users = pq.read_table(data / "users.parquet")
    items = pq.read_table(data / "items.parquet")
    uid = pc.sort_indices(users, [("user_id", "ascending")])
    iid = pc.sort_indices(items, [("item_id", "ascending")])
    users, items = users.take(uid), items.take(iid)
    feats = [f"f_{i}" for i in range(16)]

    def mat(t):
        return torch.from_numpy(np.stack([t.column(c).to_numpy() for c in feats], axis=1))

    ui = pq.read_table(data / "user_item.parquet")
    ii = pq.read_table(data / "item_item.parquet")

    def dense(col, ids):
        return torch.from_numpy(pc.index_in(col, value_set=ids).to_numpy().astype(np.int64))

    edge_index = {
        EDGE_TYPES[0]: torch.stack([dense(ui.column("user_id"), users.column("user_id")),
                                    dense(ui.column("item_id"), items.column("item_id"))]),
        EDGE_TYPES[1]: torch.stack([dense(ii.column("src_item_id"), items.column("item_id")),
                                    dense(ii.column("dst_item_id"), items.column("item_id"))]),
    }
    num_nodes = {"user": users.num_rows, "item": items.num_rows}
    return num_nodes, edge_index, {"user": mat(users), "item": mat(items)}


def worker_glt(data: Path, out: Path, parts: int) -> dict:
    import graphlearn_torch as glt

    t0 = time.perf_counter()
    num_nodes, edge_index, x = _load_dense(data)
    t1 = time.perf_counter()
    glt.partition.RandomPartitioner(
        output_dir=str(out), num_parts=parts, num_nodes=num_nodes, edge_index=edge_index,
        node_feat=x, edge_assign_strategy="by_dst", chunk_size=1_000_000).partition()
    return {"load_s": t1 - t0, "partition_s": time.perf_counter() - t1}


def worker_pyg(data: Path, out: Path, parts: int) -> dict:
    from torch_geometric.data import HeteroData
    from torch_geometric.distributed import Partitioner

    t0 = time.perf_counter()
    num_nodes, edge_index, x = _load_dense(data)
    hd = HeteroData()
    for nt, n in num_nodes.items():
        hd[nt].num_nodes = n
        hd[nt].x = x[nt]
    for et, ei in edge_index.items():
        hd[et].edge_index = ei
    t1 = time.perf_counter()
    Partitioner(hd, parts, str(out)).generate_partition()
    return {"load_s": t1 - t0, "partition_s": time.perf_counter() - t1}


WORKERS = {"ours": worker_ours, "ours_1g": worker_ours_1g, "ours_sql": worker_ours_sql,
           "glt": worker_glt, "pyg": worker_pyg}


# -- driver ---------------------------------------------------------------------------------------
def ensure_data(work: Path, num_edges: int, fixed_nodes_edges: int | None = None) -> Path:
    """The generated graph for ``num_edges`` (node counts follow the edge count, or are those of
    a ``fixed_nodes_edges``-edge graph, to separate edge growth from id-map growth)."""
    from graphstore.tools.datagen import DatasetSpec, generate_dataset

    data = work / (f"data_{num_edges}" if not fixed_nodes_edges
                   else f"data_{num_edges}_nodes_of_{fixed_nodes_edges}")
    if not (data / "dataset.json").exists():
        t0 = time.perf_counter()
        spec = DatasetSpec.from_num_edges(num_edges, kind="hetero", seed=0)
        if fixed_nodes_edges:
            small = DatasetSpec.from_num_edges(fixed_nodes_edges, kind="hetero", seed=0)
            spec = DatasetSpec.from_num_edges(num_edges, kind="hetero", seed=0,
                                              num_users=small.num_users, num_items=small.num_items)
        generate_dataset(spec, str(data), overwrite=True)
        print(f"# generated {num_edges:,} edges in {time.perf_counter() - t0:.1f}s -> {data}", flush=True)
    return data


def run_child(method: str, data: Path, out: Path, parts: int, timeout_s: float) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--worker", method, "--data", str(data), "--out", str(out),
           "--partitions", str(parts)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"timeout after {timeout_s}s"}
    wall = time.perf_counter() - t0
    # ru_maxrss of the child: read via /proc is gone after exit, so the child reports its own
    line = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not line:
        return {"error": (stderr.strip().splitlines() or ["?"])[-1][:300]}
    res = json.loads(line[-1])
    res["wall_s"] = round(wall, 2)
    shutil.rmtree(out, ignore_errors=True)
    return res


def _median_run(results: list[dict]) -> dict:
    """The run with the median total time (peak RSS: the highest of all runs); an error wins."""
    errors = [r for r in results if "error" in r]
    if errors:
        return dict(errors[0])
    ordered = sorted(results, key=lambda r: r["load_s"] + r["partition_s"])
    return {**ordered[len(ordered) // 2], "peak_rss_mb": max(r["peak_rss_mb"] for r in results)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,10000000,50000000")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--methods", default="ours,ours_1g,glt,pyg")
    ap.add_argument("--work", default=str(REPO / ".data" / "bench-partition"))
    ap.add_argument("--timeout-s", type=float, default=1800)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per method and size; the median run is reported (sub-second runs "
                         "vary by ~20%% on a 2-core machine)")
    ap.add_argument("--fixed-nodes", action="store_true",
                    help="keep the node counts of the first size for every size (edge growth only)")
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "partition.json"))
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        import resource

        res = WORKERS[a.worker](Path(a.data), Path(a.out), a.partitions)
        res["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(json.dumps(res))
        return 0
    work = Path(a.work)
    rows = []
    print(f"{'edges':>12} {'method':>7} {'load_s':>8} {'part_s':>8} {'edges/s':>12} "
          f"{'vs glt':>7} {'peak_rss_mb':>12}", flush=True)
    sizes = [int(s) for s in a.sizes.split(",")]
    for num_edges in sizes:
        data = ensure_data(work, num_edges, sizes[0] if a.fixed_nodes else None)
        runs: dict[str, list[dict]] = {m: [] for m in a.methods.split(",")}
        for _ in range(a.repeat):  # methods interleaved, so drift on the machine hits all alike
            for method in runs:
                runs[method].append(run_child(method, data, work / f"out_{method}", a.partitions,
                                              a.timeout_s))
        by_method = {}
        for method, results in runs.items():
            r = _median_run(results)
            r.update(method=method, edges=num_edges, repeats=len(results))
            if "error" not in r:
                r["edges_per_s"] = round(num_edges / (r["load_s"] + r["partition_s"]), 1)
            by_method[method] = r
            rows.append(r)
        for method, r in by_method.items():
            if "error" in r:
                print(f"{num_edges:>12,} {method:>7}  error: {r['error']}", flush=True)
                continue
            glt = by_method.get("glt", {}).get("edges_per_s")
            ratio = f"{r['edges_per_s'] / glt:6.2f}x" if glt else "      -"
            print(f"{num_edges:>12,} {method:>7} {r['load_s']:8.2f} {r['partition_s']:8.2f} "
                  f"{r['edges_per_s']:12,.0f} {ratio:>7} {r['peak_rss_mb']:12,.0f}", flush=True)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"partitions": a.partitions, "results": rows}, indent=1))
    print(f"# wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
