"""The measured processes of benchmarks/sampling.py: one entry point per mode (not a library).

``python benchmarks/_sampling_modes.py ROLE --out FILE ...`` runs one mode's consumer: it builds
that mode's loader over the prepared graph, runs ``--warmup`` epochs and then ``--epochs`` timed
epochs (every node a seed once per epoch, shuffled), and writes FILE (JSON: its pid, torch's
thread count, the loader settings and one row per epoch). The driver (benchmarks/sampling.py)
starts it, pins it to the cores every mode gets and measures the memory of its process tree.

Roles:

* ``graph_store``: the command the local launcher runs on the compute machine (2 storage
  processes + 1 compute machine x 1 process, or colocated: 2 compute machines and no storage);
  ``DistNeighborLoader`` over ``RemoteDistDataset`` (or the machine's own ``DistDataset``).
* ``replicated``: an embedded Ray (``ray.init(num_cpus=--cores)``) and ``--ray-workers`` Ray
  actors, each (as a Ray Train worker of the trainer) mapping the run's graph file and iterating
  ``DistNeighborLoader`` over ``ReplicatedDataset`` on its share of the seeds
  (graphstore.modes.replicated.loading: ``--workers`` 0 samples inline in the actor; k > 0 through one
  Ray Data dataset per epoch with k read tasks, ``ROWS_PER_BLOCK`` batches per block); every
  actor writes its own result file, like each colocated compute process.
* ``pyg``: ``torch_geometric.loader.NeighborLoader`` over the same graph read from the shards,
  ``--workers`` DataLoader workers (0: sampling in the consuming process; >0: persistent).
* ``dgl``: DGL 2.1.0's CPU sampler over the same graph read from the shards (the same reader as
  ``pyg``), in one process: per batch ``dgl.sampling.sample_neighbors`` per hop + ``dgl.to_block``
  + the input nodes' feature gather (benchmarks/_sampling_dgl.py, which also holds the graphbolt
  workaround). Run with the side environment's python (.venv-dgl), not the project's; ``dgl
  --probe`` only prints (JSON) the versions it runs on and exits.

Sampled edges of a batch: ``edge_index.size(1)`` of a PyG / GLT batch (the sampled subgraph's
edges), the edges of the blocks of a DGL batch.

Profiling (``--profile-dir D``): before the timed epoch the consumer writes ``D/start`` and waits
for ``D/go`` (the driver has attached py-spy by then); after it, it writes ``D/end``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FANOUT, BATCH = [10, 5], 512
GO_TIMEOUT_S = 120.0


def _sampled_edges(batch: Any) -> int:
    """The sampled edges of one batch (module docs)."""
    n = getattr(batch, "sampled_edges", None)  # a DGL batch (_sampling_dgl.DGLBatch)
    return int(n) if n is not None else int(batch.edge_index.size(1))


def time_epochs(loader: Iterable[Any], warmup: int, epochs: int,
                around: Callable[[str], None] | None = None) -> list[dict]:
    """Seeds, sampled edges, batches and seconds of ``warmup`` + ``epochs`` epochs over a
    homogeneous neighbour loader (each epoch timed from ``iter()`` to its last batch).
    ``around("start"/"end")`` is called just before / after the first timed epoch."""
    rows = []
    for epoch in range(warmup + epochs):
        if around is not None and epoch == warmup:
            around("start")
        t0, seeds, edges, batches = time.perf_counter(), 0, 0, 0
        for batch in loader:
            seeds += int(batch.batch_size)
            edges += _sampled_edges(batch)
            batches += 1
        rows.append({"epoch": epoch, "warmup": epoch < warmup, "batches": batches,
                     "seconds": time.perf_counter() - t0, "seeds": seeds, "edges": edges})
        if around is not None and epoch == warmup:
            around("end")
    return rows


def profile_hook(folder: str | None) -> Callable[[str], None] | None:
    """The ``around`` of :func:`time_epochs` for ``--profile-dir`` (module docs)."""
    if not folder:
        return None
    d = Path(folder)

    def around(what: str) -> None:
        (d / what).write_text(str(os.getpid()))
        if what == "start":
            deadline = time.monotonic() + GO_TIMEOUT_S
            while not (d / "go").exists():
                if time.monotonic() > deadline:
                    raise SystemExit(f"no {d / 'go'} after {GO_TIMEOUT_S:.0f} s: the driver "
                                     "did not start the profiler")
                time.sleep(0.05)
    return around


def write_result(path: str, rows: list[dict], settings: dict) -> None:
    """The consumer's result file (module docs); written whole under a temporary name first."""
    import torch

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "threads": torch.get_num_threads(),
                               "settings": settings, "epochs": rows, "peak_rss_mb": peak}))
    tmp.replace(path)


def loader_defaults() -> dict:
    """``DistNeighborLoader``'s own defaults of its sampling knobs (what a row without settings
    gets)."""
    import inspect

    from graphstore import DistNeighborLoader

    params = inspect.signature(DistNeighborLoader.__init__).parameters
    return {k: params[k].default for k in ("num_workers", "worker_concurrency", "prefetch_size")}


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


# -- graph store and colocated (run by the local launcher) ---------------------------------------
def _loader_knobs(a: argparse.Namespace) -> dict:
    """The graph-store loader settings given on the command line (none: the loader's defaults)."""
    knobs = {"num_workers": a.gs_workers, "worker_concurrency": a.gs_concurrency,
             "prefetch_size": a.gs_prefetch}
    return {k: v for k, v in knobs.items() if v is not None}


def _gs_worker(local_rank: int, info: Any, a: argparse.Namespace, local_dataset: Any) -> None:
    import torch.distributed as dist

    from graphstore import (DistNeighborLoader, RemoteDistDataset, init_compute_process,
                            shutdown_compute_process)

    _set_threads(a.threads)
    init_compute_process(local_rank, info)
    rank = dist.get_rank()
    if local_dataset is not None:  # colocated: this machine's own nodes
        ds, ids = local_dataset, local_dataset.node_ids()
    else:
        ds = RemoteDistDataset(info, local_rank)
        ids = ds.fetch_node_ids(rank=rank, world_size=dist.get_world_size())
    knobs = _loader_knobs(a)
    loader = DistNeighborLoader(ds, FANOUT, ids, batch_size=BATCH, shuffle=True, random_seed=rank,
                                **knobs)
    rows = time_epochs(loader, a.warmup, a.epochs, profile_hook(a.profile_dir) if rank == 0 else None)
    loader.shutdown()
    write_result(f"{a.out}.rank{rank}", rows, loader_defaults() | knobs)
    shutdown_compute_process()


def graph_store_main(a: argparse.Namespace) -> int:
    import torch.multiprocessing as mp

    from graphstore.runtime.env import ClusterTopology
    from graphstore.modes.graph_store.info import agree_on_cluster
    from graphstore.config.stage import StageContext

    ctx = StageContext.from_argv()
    info = agree_on_cluster(ctx, ClusterTopology.from_env(os.environ))
    local = None
    if info.colocated:
        from graphstore import DistDataset

        local = DistDataset.from_shards(ctx.shards_uri, info.machine_index, ctx.storage.storage_args)
    mp.spawn(_gs_worker, args=(info, a, local), nprocs=info.num_processes_per_compute)
    return 0


# -- replicated (an embedded Ray) ----------------------------------------------------------------
class _ReplicatedWorker:
    """One Ray worker of replicated mode (a Ray actor, as a Ray Train worker is): maps the graph
    file itself, takes its share (rank of world) of the seeds and iterates a
    ``DistNeighborLoader`` over ``ReplicatedDataset``, as the trainer's workers do."""

    def run(self, a: argparse.Namespace, rank: int, world: int, start_at: float) -> None:
        from graphstore import DistNeighborLoader
        from graphstore.modes.replicated.dataset import ReplicatedDataset
        from graphstore.modes.replicated.loading import quiet_ray_data

        _set_threads(a.threads)
        quiet_ray_data()
        ds = ReplicatedDataset(a.graph, a.features, view="full")
        ids = ds.fetch_node_ids(rank=rank, world_size=world)
        loader = DistNeighborLoader(ds, FANOUT, ids, batch_size=BATCH, shuffle=True,
                                    random_seed=rank, num_workers=a.workers)
        time.sleep(max(0.0, start_at - time.time()))  # every worker starts its epochs together
        rows = time_epochs(loader, a.warmup, a.epochs)
        loader.shutdown()
        write_result(f"{a.out}.rank{rank}", rows,
                     {"ray_workers": world, "sampling_processes_per_worker": a.workers,
                      "ray_num_cpus": a.cores,
                      "prefetch_size": loader_defaults()["prefetch_size"]})


def replicated_main(a: argparse.Namespace) -> int:
    import secrets

    from graphstore.runtime.env import use_ray_token

    use_ray_token(secrets.token_hex(32))  # before ray is imported (else ~/.ray/auth_token)
    import ray

    ray.init(address="local", num_cpus=a.cores, include_dashboard=False,
             logging_config=ray.LoggingConfig(encoding="TEXT", log_level="ERROR"))
    try:
        worker = ray.remote(num_cpus=0)(_ReplicatedWorker)
        workers = [worker.remote() for _ in range(a.ray_workers)]
        ray.get([w.__ray_ready__.remote() for w in workers])
        start_at = time.time() + 2.0  # each maps the file and builds its loader first
        ray.get([w.run.remote(a, rank, len(workers), start_at) for rank, w in enumerate(workers)])
    finally:
        ray.shutdown()
    return 0


# -- PyG and DGL (the graph read whole from the shards) ------------------------------------------
def load_shard_graph(shards: str) -> tuple[Any, Any, Any, int]:
    """Every edge (src, dst: int64 numpy) and the feature matrix (float32 [N, F]) of the
    benchmark's homogeneous shard set, and N: what the pyg and dgl roles sample."""
    import numpy as np

    from graphstore.formats.shards.reader import ShardSet

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
    del parts
    return src, dst, x, n


def pyg_main(a: argparse.Namespace) -> int:
    import numpy as np
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    _set_threads(a.threads)
    src, dst, x, n = load_shard_graph(a.shards)
    data = Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(np.stack([src, dst])), num_nodes=n)
    workers = {"num_workers": a.workers, "persistent_workers": a.workers > 0}
    # sampling edges into each seed (flow source_to_target), as storage samples with direction "in"
    loader = NeighborLoader(data, num_neighbors=FANOUT, batch_size=BATCH, shuffle=True, **workers)
    write_result(a.out, time_epochs(loader, a.warmup, a.epochs), workers)
    return 0


def dgl_main(a: argparse.Namespace) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _sampling_dgl

    if a.probe:
        print(json.dumps(_sampling_dgl.probe()))
        return 0
    _set_threads(a.threads)
    dgl = _sampling_dgl.import_dgl()
    dgl.utils.set_num_threads(a.threads)  # DGL's own OpenMP pool (OMP_NUM_THREADS too)
    src, dst, x, n = load_shard_graph(a.shards)
    loader = _sampling_dgl.DGLBlockLoader(src, dst, x, n, FANOUT, BATCH)
    del src, dst, x  # the graph and the feature tensor hold them
    info = _sampling_dgl.probe()
    settings = {"sampler": "dgl.sampling.sample_neighbors per hop + dgl.to_block + x[input_nodes]",
                "edge_dir": "in", "replace": False, "fanout_by_hop": FANOUT,
                "dgl_omp_threads": info["dgl_omp_threads"], "dgl": info["dgl"],
                "torch": info["torch"], "tensor_adapter_loaded": info["tensor_adapter_loaded"],
                "graphbolt_load_error_tolerated": info["graphbolt_load_error_tolerated"]}
    write_result(a.out, time_epochs(loader, a.warmup, a.epochs), settings)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("role", choices=("graph_store", "replicated", "pyg", "dgl"))
    ap.add_argument("--probe", action="store_true",
                    help="dgl: print the versions it runs on (JSON) and exit")
    ap.add_argument("--out", help="result file (JSON) to write (every role but dgl --probe)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed epochs first")
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    ap.add_argument("--cores", type=int, default=1, help="replicated: Ray's num_cpus")
    ap.add_argument("--workers", type=int, default=0,
                    help="replicated: the loader's num_workers per Ray worker (0: sampling inline; "
                         "k: k Ray Data read tasks); pyg: DataLoader workers")
    ap.add_argument("--ray-workers", type=int, default=1,
                    help="replicated: Ray workers, each iterating its share of the seeds")
    ap.add_argument("--graph", help="replicated: the graph file")
    ap.add_argument("--features", help="replicated: the features file")
    ap.add_argument("--shards", help="pyg, dgl: the shard set")
    ap.add_argument("--gs-workers", type=int, help="graph_store: loader num_workers")
    ap.add_argument("--gs-concurrency", type=int, help="graph_store: loader worker_concurrency")
    ap.add_argument("--gs-prefetch", type=int, help="graph_store: loader prefetch_size")
    ap.add_argument("--profile-dir", help="graph_store: start/go/end markers (module docs)")
    a, _ = ap.parse_known_args()  # the launcher appends the stage arguments
    if a.out is None and not (a.role == "dgl" and a.probe):
        ap.error("--out is required")
    return {"graph_store": graph_store_main, "replicated": replicated_main, "pyg": pyg_main,
            "dgl": dgl_main}[a.role](a)


if __name__ == "__main__":
    sys.exit(main())
