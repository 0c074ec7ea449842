"""A user's own graph-store training script, written the way seed 000 shows.

Run it as the trainer of a graph-store job: set ``trainerConfig.command`` to
``python -m examples.graph_store_training`` and launch::

    python -m pipeline launch --task-config T --resource-config R --stage train --run-dir D

The launcher (or Vertex AI) appends ``--task-config --resource-config --stage --run-dir`` and sets
the cluster environment; storage processes serve the shards under ``<run-dir>/shards``. This script
reads ``trainerConfig.trainerArgs.max_steps`` (default 20), trains a one-layer heterogeneous
GraphSAGE link predictor on the first supervision edge type with in-batch + random negatives, and
rank 0 writes ``<run-dir>/example_result.json`` with the losses. It uses only the public API:
names imported from the ``graphstore`` package root (tests/unit/test_architecture.py checks).
"""

import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch_geometric.nn import HeteroConv, SAGEConv

from graphstore import (
    DistABLPLoader, DistNeighborLoader, GraphStoreInfo, RemoteDistDataset, StageContext,
    finish_epoch, get_graph_store_info, init_compute_process, shutdown_compute_process,
)


class Model(torch.nn.Module):
    def __init__(self, feature_dims: dict, edge_types: list, dim: int = 32) -> None:
        super().__init__()
        self.inputs = torch.nn.ModuleDict({t: torch.nn.Linear(d, dim)
                                           for t, d in feature_dims.items() if d > 0})
        self.conv = HeteroConv({et: SAGEConv((dim, dim), dim) for et in edge_types}, aggr="sum")

    def forward(self, batch) -> dict:
        h = {t: self.inputs[t](batch[t].x) for t in batch.node_types if t in self.inputs}
        edges = {et: batch[et].edge_index for et in batch.edge_types
                 if et in self.conv.convs and et[0] in h and et[2] in h}
        out = self.conv(h, edges)
        return {t: out.get(t, 0) + h[t] for t in h}


def run_worker(local_rank: int, cluster_info: GraphStoreInfo, max_steps: int, out_path: str) -> None:
    init_compute_process(local_rank, cluster_info)
    dataset = RemoteDistDataset(cluster_info, local_rank)
    rank, world_size = dist.get_rank(), dist.get_world_size()

    supervision_edge_type = dataset.metadata.supervision_edge_types[0].as_tuple()
    anchor_node_type, _, label_node_type = supervision_edge_type
    ablp_input = dataset.fetch_ablp_input(split="train", rank=rank, world_size=world_size,
                                          anchor_node_type=anchor_node_type,
                                          supervision_edge_type=supervision_edge_type)
    main_loader = DistABLPLoader(dataset=dataset, num_neighbors=[5, 3], input_nodes=ablp_input,
                                 batch_size=64, shuffle=True, drop_last=True)
    node_ids = dataset.fetch_node_ids(rank=rank, world_size=world_size, node_type=label_node_type)
    negative_loader = DistNeighborLoader(dataset=dataset, num_neighbors=[5, 3],
                                         input_nodes=(label_node_type, node_ids), batch_size=64,
                                         shuffle=True)

    # DDP needs every rank to take the same number of steps: the fewest full batches any rank has
    full = sum(x.positive_labels[supervision_edge_type].size(1) // 64 for x in ablp_input.values())
    steps = torch.tensor([min(max_steps, full)])
    dist.all_reduce(steps, op=dist.ReduceOp.MIN)
    max_steps = int(steps)

    edge_types = dataset.fetch_edge_types()  # GiGL's calls: (src, relation, dst) tuples
    feature_dims = {t: info.dim for t, info in dataset.fetch_node_feature_info().items()}
    model = torch.nn.parallel.DistributedDataParallel(
        Model(feature_dims, edge_types), find_unused_parameters=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    losses = []
    negatives = iter(negative_loader)
    for step, batch in enumerate(main_loader):
        if step == max_steps:
            break
        try:
            negative_batch = next(negatives)
        except StopIteration:
            negatives = iter(negative_loader)
            negative_batch = next(negatives)
        h, hn = model(batch), model(negative_batch)
        anchors = h[anchor_node_type][batch.y_positive[0]]
        positives = h[label_node_type][batch.y_positive[1]]
        random_negatives = hn[label_node_type][:negative_batch[label_node_type].batch_size]
        scores = anchors @ torch.cat([positives, random_negatives]).T
        loss = F.cross_entropy(scores, torch.arange(len(anchors)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    # every rank stops after the same number of steps; the rest of the epoch is read, not restarted
    finish_epoch(main_loader)
    main_loader.shutdown()
    negative_loader.shutdown()
    if rank == 0:
        with open(out_path, "w") as fh:
            json.dump({"steps": len(losses), "losses": losses, "world_size": world_size}, fh)
        print(f"example: {len(losses)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)
    shutdown_compute_process()


def main() -> None:
    ctx = StageContext.from_argv()
    max_steps = int(ctx.task.trainer.trainer_args.get("max_steps", 20))
    dist.init_process_group(backend="gloo")  # the temporary group of all compute + storage machines
    cluster_info = get_graph_store_info()
    dist.destroy_process_group()
    mp.spawn(fn=run_worker, args=(cluster_info, max_steps, os.path.join(ctx.run_dir, "example_result.json")),
             nprocs=cluster_info.num_processes_per_compute)


if __name__ == "__main__":
    main()
