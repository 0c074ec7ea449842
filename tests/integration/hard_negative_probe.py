"""A compute command for the hard-negative test: what the ABLP loader draws, in dense ids.

Run by ``python -m pipeline launch`` as ``trainerConfig.command`` (graph-store mode). Each worker
fetches its training input of the first supervision type (with its negative labels), reads one
epoch of a ``DistABLPLoader(hard_negatives_per_anchor=2)`` and saves, per batch, the global
(anchor, positive) pairs and (anchor, hard negative) pairs, plus the fetched inputs, to
``<run-dir>/probe/rank<r>.pt``; tests/integration/test_hard_negatives.py checks them against the
raw tables.
"""

from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from graphstore import (
    DistABLPLoader, GraphStoreInfo, RemoteDistDataset, get_graph_store_info, init_compute_process,
    shutdown_compute_process,
)
from graphstore.runtime.cli import setup_logging
from graphstore.runtime.env import ClusterTopology
from graphstore.config.stage import StageContext

PER_ANCHOR = 2


def worker(local_rank: int, info: GraphStoreInfo, out_dir: str) -> None:
    setup_logging(f"probe-w{local_rank}")
    init_compute_process(local_rank, info)
    dataset = RemoteDistDataset(info, local_rank)
    rank, world = dist.get_rank(), dist.get_world_size()
    sup = dataset.metadata.supervision_edge_types[0]
    inputs = {split: dataset.fetch_ablp_input(split=split, rank=rank, world_size=world,
                                              supervision_edge_type=sup)
              for split in ("train", "val")}
    loader = DistABLPLoader(dataset, [3, 2], inputs["train"], batch_size=16, shuffle=True,
                            supervision_edge_type=sup, hard_negatives_per_anchor=PER_ANCHOR)
    batches = []
    for batch in loader:  # one epoch
        a, lab = batch[sup.src_node_type].node, batch[sup.dst_node_type].node
        pos, neg = batch.y_positive, batch.y_hard_negative
        batches.append((torch.stack([a[pos[0]], lab[pos[1]]]), torch.stack([a[neg[0]], lab[neg[1]]])))
    loader.shutdown()
    et = sup.as_tuple()
    fetched = {split: {k: (v.anchor_nodes, v.positive_labels[et], v.negative_labels[et])
                       for k, v in got.items()} for split, got in inputs.items()}
    torch.save({"batches": batches, "inputs": fetched, "per_anchor": PER_ANCHOR},
               os.path.join(out_dir, f"rank{rank}.pt"))
    shutdown_compute_process()


def main() -> int:
    ctx = StageContext.from_argv()
    topology = ClusterTopology.from_env(os.environ)
    setup_logging(f"probe{topology.machine_index}")
    dist.init_process_group("gloo", init_method=f"tcp://{topology.master_addr}:{topology.master_port}",
                            rank=topology.rank, world_size=topology.world_size,
                            timeout=datetime.timedelta(seconds=120))
    info = get_graph_store_info(ctx, topology)
    dist.destroy_process_group()
    out_dir = os.path.join(ctx.run_dir, "probe")
    os.makedirs(out_dir, exist_ok=True)
    mp.spawn(worker, args=(info, out_dir), nprocs=info.num_processes_per_compute, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
