"""A compute command for the runtime tests, written the way seed 000 shows a user module.

Run by ``python -m pipeline launch`` as ``trainerConfig.command`` / ``inferencerConfig.command``.
Each worker records what it fetched and sampled (dense ids) into ``<run-dir>/probe/``: the
training ABLP loader, and neighbour loaders over every node of the anchor type (held-out anchors
included) and of the label type; the tests compare that against the raw input tables.
``--sessions N`` runs N sessions one after another, each with freshly spawned workers (as inference
does per node type). ``--slow-s S`` sleeps S seconds per batch (the kill-a-storage test stops a
storage process meanwhile).
"""

from __future__ import annotations

import argparse
from collections import Counter
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from graphstore import (
    DistABLPLoader, DistDataset, DistNeighborLoader, GraphStoreInfo, RemoteDistDataset, get_graph_store_info,
    init_compute_process, shutdown_compute_process,
)
from graphstore.runtime.cli import setup_logging
from graphstore.runtime.env import ClusterTopology
from graphstore.config.stage import StageContext


def _edges(batch, hetero: bool) -> dict:
    """Sampled edges of a batch as global (src, dst) id pairs per edge type."""
    if not hetero:
        return {"__homo__": batch.node[batch.edge_index].T.tolist()}
    out = {}
    for et in batch.edge_types:
        if "edge_index" not in batch[et]:
            continue
        ei = batch[et].edge_index
        src, dst = batch[et[0]].node[ei[0]], batch[et[-1]].node[ei[1]]
        out["__".join(et)] = torch.stack([src, dst], 1).tolist()
    return out


def _features(batch, hetero: bool) -> dict:
    if not hetero:
        return {"__homo__": (batch.node, batch.x)}
    return {nt: (batch[nt].node, batch[nt].x) for nt in batch.node_types if "x" in batch[nt]}


def worker(local_rank: int, info: GraphStoreInfo, out_dir: str, slow_s: float,
           local_dataset: DistDataset | None = None) -> None:
    """Graph-store mode (``local_dataset`` None) or colocated mode (this machine's partition)."""
    setup_logging(f"compute-w{local_rank}")
    init_compute_process(local_rank, info)
    colocated = local_dataset is not None
    dataset = local_dataset if colocated else RemoteDistDataset(info, local_rank)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_world = info.num_processes_per_compute
    meta = dataset.metadata
    hetero = not meta.is_homogeneous
    record: dict = {"rank": rank, "world": world, "meta": meta, "session": info.session_index}
    sup = meta.supervision_edge_types[0]
    anchor_type = sup.src_node_type
    for split in ("train", "val", "test"):
        if colocated:
            anchors = dataset.anchor_ids(split, sup, rank=local_rank, world_size=local_world)
            record[f"anchors_{split}"] = {info.machine_index: anchors}
            continue
        ablp = dataset.fetch_ablp_input(split=split, rank=rank, world_size=world,
                                        anchor_node_type=anchor_type, supervision_edge_type=sup)
        record[f"anchors_{split}"] = {k: v.anchor_nodes for k, v in ablp.items()}
    if colocated:
        ablp = (anchor_type, dataset.anchor_ids("train", sup, rank=local_rank, world_size=local_world))
    else:
        ablp = dataset.fetch_ablp_input(split="train", rank=rank, world_size=world,
                                        supervision_edge_type=sup)
    loader = DistABLPLoader(dataset, [4, 3], ablp, batch_size=16, shuffle=True,
                            supervision_edge_type=sup)
    pairs, edges, feats, repeated, per_node = [], {}, [], 0, ({}, {})
    for batch in loader:
        at, lt = batch.anchor_node_type, batch.label_node_type
        anchors = (batch[at].node if hetero else batch.node)[batch.y_positive[0]]
        labels = (batch[lt].node if hetero else batch.node)[batch.y_positive[1]]
        pairs += torch.stack([anchors, labels], 1).tolist()
        for k, v in _edges(batch, hetero).items():
            edges.setdefault(k, []).extend(v)
            repeated += len(v) - len({tuple(p) for p in v})  # an edge twice in one batch
            for side in (0, 1):  # the most edges of this type at one node of the batch
                most = max(Counter(p[side] for p in v).values(), default=0)
                per_node[side][k] = max(per_node[side].get(k, 0), most)
        feats.append(_features(batch, hetero))
        if slow_s:
            open(os.path.join(out_dir, f"sampling_rank{rank}"), "w").close()
            time.sleep(slow_s)
    loader.shutdown()
    record.update(ablp_pairs=pairs, ablp_edges=edges, ablp_feats=feats,
                  ablp_repeated_edges=repeated, ablp_most_per_src=per_node[0],
                  ablp_most_per_dst=per_node[1])
    # every node of the anchor type as seeds, the held-out (val + test) anchors among them: what
    # evaluation and inference sample around them (GLT 0.2.4 cannot collate a heterogeneous batch
    # without any edge, so the held-out anchors, which have no in-edges, are not seeded alone)
    if colocated:
        anchor_in = dataset.node_ids(anchor_type, rank=local_rank, world_size=local_world)
    else:
        anchor_in = dataset.fetch_node_ids(rank=rank, world_size=world, node_type=anchor_type)
    aloader = DistNeighborLoader(dataset, [4, 3], (anchor_type, anchor_in) if hetero else anchor_in,
                                 batch_size=32)
    aseeds, aedges = [], {}
    for batch in aloader:
        aseeds += (batch[anchor_type].batch if hetero else batch.batch).tolist()  # seed ids
        for k, v in _edges(batch, hetero).items():
            aedges.setdefault(k, []).extend(v)
    aloader.shutdown()
    record.update(anchor_seeds=aseeds, anchor_edges=aedges)
    node_type = meta.node_types[0] if not hetero else sup.dst_node_type
    if colocated:
        ids = dataset.node_ids(node_type, rank=local_rank, world_size=local_world)
        seeds_in = ids
    else:
        ids = dataset.fetch_node_ids(rank=rank, world_size=world, node_type=node_type)
        seeds_in = torch.cat([t for t in ids.values()]) if ids else torch.empty(0)
    nloader = DistNeighborLoader(dataset, [4, 3], (node_type, ids) if hetero else ids, batch_size=32)
    seeds, nedges = [], {}
    for batch in nloader:
        seeds += (batch[node_type].batch if hetero else batch.batch).tolist()
        for k, v in _edges(batch, hetero).items():
            nedges.setdefault(k, []).extend(v)
    nloader.shutdown()
    record.update(node_type=node_type, seeds_in=seeds_in.tolist(), seeds=seeds, nbr_edges=nedges)
    torch.save(record, os.path.join(out_dir, f"session{info.session_index}_rank{rank}.pt"))
    shutdown_compute_process()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--slow-s", type=float, default=0.0)
    args, _ = parser.parse_known_args()
    ctx = StageContext.from_argv()
    topology = ClusterTopology.from_env(os.environ)
    setup_logging(f"compute{topology.machine_index}")
    dist.init_process_group("gloo", init_method=f"tcp://{topology.master_addr}:{topology.master_port}",
                            rank=topology.rank, world_size=topology.world_size,
                            timeout=datetime.timedelta(seconds=120))
    info = get_graph_store_info(ctx, topology)
    dist.destroy_process_group()
    out_dir = os.path.join(ctx.run_dir, "probe")  # a file of this probe, not of the layout
    os.makedirs(out_dir, exist_ok=True)
    local = None
    if info.colocated:  # seed 000: the partition is built once per machine, before spawning
        local = DistDataset.from_shards(ctx.shards_uri, info.machine_index, ctx.storage.storage_args)
    for session in range(args.sessions):
        mp.spawn(worker, args=(info.for_session(session), out_dir, args.slow_s, local),
                 nprocs=info.num_processes_per_compute, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
