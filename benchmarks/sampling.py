"""Sampling throughput: graph-store mode vs plain PyG, side by side in one run; compute memory vs size.

One generated homogeneous graph (N nodes, E edges, 16 features), fanout [10, 5], batch 512, every
node a seed once:

* ``graph_store``: 2 storage processes + 1 compute machine x 1 process, through the local launcher
  (the real runtime: ``DistNeighborLoader`` over ``RemoteDistDataset.fetch_node_ids``); seeds/s is
  over the loader's epoch, excluding start-up. The compute process reports its own peak RSS.
* ``colocated``: 2 compute machines x 1 process, no storage; each machine holds one partition
  and samples its own nodes inline (``graphstore.DistDataset``); seeds/s sums both over the slower.
* ``pyg``: ``torch_geometric.loader.NeighborLoader`` in one process over the same graph (read from
  the same shards), with the torch-sparse backend.

Compute RSS is measured at graph sizes 1x and 4x (graph-store compute memory should not grow: the
graph lives on storage).

usage: python benchmarks/sampling.py [--edges 1000000] [--scales 1,4] [--epochs 2]
Prints a table and writes benchmarks/results/sampling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FANOUT, BATCH = [10, 5], 512


def _task(data: Path, command: str) -> dict:
    base = __import__("yaml").safe_load((REPO / "configs" / "task_homo.yaml").read_text())
    base["datasetConfig"]["dataRootUri"] = str(data)
    for stage in ("trainerConfig", "inferencerConfig"):
        base[stage]["command"] = command
        base[stage]["graphStoreStorageConfig"]["storageArgs"] = {"sample_edge_direction": "in"}
    return base


def _resources(colocated: bool) -> dict:
    local = ({"num_storage_processes": 0, "num_compute_machines": 2, "compute_cluster_local_world_size": 1}
             if colocated else
             {"num_storage_processes": 2, "num_compute_machines": 1, "compute_cluster_local_world_size": 1})
    return {k: {"local_graph_store_config": local}
            for k in ("trainer_resource_config", "inferencer_resource_config")}


def time_epochs(loader, epochs: int) -> list[dict]:
    """Seeds, sampled edges and seconds of each epoch over a (homogeneous) neighbour loader."""
    rows = []
    for epoch in range(epochs):
        t0, seeds, edges = time.perf_counter(), 0, 0
        for batch in loader:
            seeds += int(batch.batch_size)
            edges += int(batch.edge_index.size(1))
        rows.append({"epoch": epoch, "seconds": time.perf_counter() - t0, "seeds": seeds, "edges": edges})
    return rows


def write_result(path: str, rows: list[dict]) -> None:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(path).write_text(json.dumps({"epochs": rows, "peak_rss_mb": rss}))


# -- graph-store compute worker (run by the launcher) ---------------------------------------------
def _gs_worker(local_rank, info, out: str, epochs: int, local_dataset) -> None:
    import torch.distributed as dist

    from graphstore import (DistNeighborLoader, RemoteDistDataset, init_compute_process,
                            shutdown_compute_process)

    init_compute_process(local_rank, info)
    if local_dataset is not None:  # colocated: this machine's own nodes
        ds, ids = local_dataset, local_dataset.node_ids()
    else:
        ds = RemoteDistDataset(info, local_rank)
        ids = ds.fetch_node_ids(rank=dist.get_rank(), world_size=dist.get_world_size())
    loader = DistNeighborLoader(ds, FANOUT, ids, batch_size=BATCH, shuffle=True, num_workers=1)
    rows = time_epochs(loader, epochs)
    loader.shutdown()
    write_result(f"{out}.rank{dist.get_rank()}", rows)
    shutdown_compute_process()


def gs_main(out: str, epochs: int) -> int:
    import torch.multiprocessing as mp

    from graphstore.env import ClusterTopology
    from graphstore.graph_store_info import agree_on_cluster
    from graphstore.stage import StageContext

    ctx = StageContext.from_argv()
    info = agree_on_cluster(ctx, ClusterTopology.from_env(os.environ))
    local = None
    if info.colocated:
        from graphstore import DistDataset

        local = DistDataset.from_shards(ctx.shards_uri, info.machine_index, ctx.storage.storage_args)
    mp.spawn(_gs_worker, args=(info, out, epochs, local), nprocs=info.num_processes_per_compute)
    return 0


# -- PyG baseline -------------------------------------------------------------------------------
def pyg_main(shards: str, out: str, epochs: int) -> int:
    import numpy as np
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    from graphstore.shards.reader import ShardSet

    s = ShardSet.open(shards)
    (et,) = s.manifest.edge_types
    (nt,) = s.manifest.node_types
    parts = [s.load_partition(p) for p in range(s.manifest.num_partitions)]
    src = np.concatenate([p.edges[et].src for p in parts])
    dst = np.concatenate([p.edges[et].dst for p in parts])
    n = s.manifest.node_types[nt].count
    x = np.zeros((n, s.manifest.node_types[nt].feature_dim), np.float32)
    for p in parts:
        x[p.nodes[nt].ids] = p.nodes[nt].feats
    data = Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(np.stack([src, dst])), num_nodes=n)
    loader = NeighborLoader(data, num_neighbors=FANOUT, batch_size=BATCH, shuffle=True)
    write_result(out, time_epochs(loader, epochs))
    return 0


# -- driver ---------------------------------------------------------------------------------------
def prepare(work: Path, num_edges: int, colocated: bool) -> tuple[Path, Path, Path]:
    import yaml

    from graphstore.config import load_config_pair
    from graphstore.datagen import DatasetSpec, generate_dataset
    from graphstore.partition import partition_graph
    from graphstore.shards.reader import is_complete

    root = work / f"e{num_edges}"
    data, run = root / "data", root / "run"
    if not (data / "dataset.json").exists():
        generate_dataset(DatasetSpec.from_num_edges(num_edges, kind="homo", seed=0), str(data),
                         overwrite=True)
    mode = "colocated" if colocated else "graph_store"
    tp, rp = root / f"task_{mode}.yaml", root / f"resources_{mode}.yaml"
    out = root / f"{mode}.json"
    tp.write_text(yaml.safe_dump(_task(data, f"python {__file__} --role graph_store --out {out}")))
    rp.write_text(yaml.safe_dump(_resources(colocated)))
    if not is_complete(str(run / "shards")):
        task, _ = load_config_pair(str(tp), str(rp))
        partition_graph(task, num_partitions=2, output_uri=str(run / "shards"))
    return tp, rp, run


def _rate(files: list[Path]) -> dict:
    """The warm (last) epoch; several ranks: summed seeds and edges over the slowest rank's time."""
    runs = [json.loads(f.read_text()) for f in files]
    last = [r["epochs"][-1] for r in runs]
    seconds = max(e["seconds"] for e in last)
    seeds, edges = sum(e["seeds"] for e in last), sum(e["edges"] for e in last)
    return {"seeds_per_s": seeds / seconds, "edges_per_s": edges / seconds, "seeds": seeds,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs)}


def _launch(tp: Path, rp: Path, run: Path) -> None:
    launch = subprocess.run(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp), "--resource-config",
         str(rp), "--stage", "train", "--run-dir", str(run), "--timeout-s", "1200"],
        cwd=REPO, capture_output=True, text=True)
    if launch.returncode != 0:
        raise SystemExit(f"launch failed:\n{launch.stdout[-3000:]}\n{launch.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edges", type=int, default=1_000_000)
    ap.add_argument("--scales", default="1,4")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--work", default=str(REPO / ".data" / "bench-sampling"))
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "sampling.json"))
    ap.add_argument("--role", choices=("graph_store", "pyg"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--shards", help=argparse.SUPPRESS)
    a, _ = ap.parse_known_args()
    if a.role == "graph_store":
        return gs_main(a.out, a.epochs)
    if a.role == "pyg":
        return pyg_main(a.shards, a.out, a.epochs)
    work = Path(a.work)
    results = []
    print(f"{'edges':>10} {'mode':>12} {'seeds/s':>10} {'edges/s':>12} {'vs pyg':>7} {'compute_rss_mb':>15}")
    for scale in (int(s) for s in a.scales.split(",")):
        num_edges = a.edges * scale
        rates = {}
        for mode in ("graph_store", "colocated"):
            tp, rp, run = prepare(work, num_edges, colocated=mode == "colocated")
            for f in tp.parent.glob(f"{mode}.json.rank*"):
                f.unlink()
            _launch(tp, rp, run)
            rates[mode] = _rate(sorted(tp.parent.glob(f"{mode}.json.rank*")))
        pyg_out = tp.parent / "pyg.json"
        subprocess.run([sys.executable, __file__, "--role", "pyg", "--shards", str(run / "shards"),
                        "--out", str(pyg_out), "--epochs", str(a.epochs)], check=True, cwd=REPO)
        rates["pyg"] = _rate([pyg_out])
        pyg = rates["pyg"]
        for mode, r in rates.items():
            ratio = r["seeds_per_s"] / pyg["seeds_per_s"]
            print(f"{num_edges:>10,} {mode:>12} {r['seeds_per_s']:10,.0f} {r['edges_per_s']:12,.0f} "
                  f"{ratio:6.2f}x {r['peak_rss_mb']:15,.0f}", flush=True)
            results.append({"edges": num_edges, "mode": mode, **r})
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"fanout": FANOUT, "batch": BATCH, "results": results}, indent=1))
    print(f"# wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
