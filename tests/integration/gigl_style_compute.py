"""A graph-store compute script as a GiGL user writes it, from GiGL's public documentation only.

The structure follows GiGL's "Converting Colocated Loops To Graph Store" guide (seed 000): the
parent agrees on the cluster and spawns workers; each worker calls ``init_compute_process``, builds
a ``RemoteDistDataset`` and asks it GiGL's metadata and input questions under GiGL's names
(``fetch_node_types``, ``fetch_edge_types``, ``fetch_edge_dir``, ``fetch_node_feature_info``,
``fetch_edge_feature_info``, ``fetch_node_partition_book``, ``fetch_edge_partition_book``,
``fetch_free_ports_on_storage_cluster``, ``fetch_node_ids`` with ``split``, ``fetch_ablp_input``).
Nothing here is specific to this library but the import line. Each worker saves what it got to
``<run-dir>/gigl/rank<k>.pt`` for tests/integration/test_graph_store.py to check.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.multiprocessing as mp

from graphstore import (
    RemoteDistDataset, get_graph_store_info, init_compute_process, shutdown_compute_process,
)

ANCHOR_NODE_TYPE = "user"  # the user's own graph: users buy items
SUPERVISION_EDGE_TYPE = ("user", "buys", "item")
SPLITS = (None, "train", "val", "test")


def run_worker(local_rank: int, cluster_info, out_dir: str) -> None:
    init_compute_process(local_rank, cluster_info)
    dataset = RemoteDistDataset(cluster_info, local_rank)
    rank = torch.distributed.get_rank()
    world_size = torch.distributed.get_world_size()

    node_types = dataset.fetch_node_types()
    edge_types = dataset.fetch_edge_types()
    record = {"rank": rank, "world_size": world_size, "node_types": node_types,
              "edge_types": edge_types, "edge_dir": dataset.fetch_edge_dir(),
              "node_feature_info": dataset.fetch_node_feature_info(),
              "edge_feature_info": dataset.fetch_edge_feature_info(),
              "free_ports": dataset.fetch_free_ports_on_storage_cluster(num_ports=3)}
    if node_types is None:  # homogeneous: no node_type / edge_type arguments
        record["node_partition_book"] = dataset.fetch_node_partition_book()
        record["edge_partition_book"] = dataset.fetch_edge_partition_book()
        record["node_ids"] = {split: dataset.fetch_node_ids(rank=rank, world_size=world_size,
                                                            split=split) for split in SPLITS}
        ablp_input = dataset.fetch_ablp_input(split="train", rank=rank, world_size=world_size)
    else:
        record["node_partition_book"] = {nt: dataset.fetch_node_partition_book(nt)
                                         for nt in node_types}
        record["edge_partition_book"] = {et: dataset.fetch_edge_partition_book(et)
                                         for et in edge_types}
        record["node_ids"] = {split: dataset.fetch_node_ids(rank=rank, world_size=world_size,
                                                            split=split, node_type=ANCHOR_NODE_TYPE)
                              for split in SPLITS}
        ablp_input = dataset.fetch_ablp_input(split="train", rank=rank, world_size=world_size,
                                              anchor_node_type=ANCHOR_NODE_TYPE,
                                              supervision_edge_type=SUPERVISION_EDGE_TYPE)
    record["ablp_anchors"] = {k: v.anchor_nodes for k, v in ablp_input.items()}
    record["ablp_positive_labels"] = {k: v.positive_labels for k, v in ablp_input.items()}
    torch.save(record, os.path.join(out_dir, f"rank{rank}.pt"))
    shutdown_compute_process()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True)
    args, _ = parser.parse_known_args()
    out_dir = os.path.join(args.run_dir, "gigl")
    os.makedirs(out_dir, exist_ok=True)
    torch.distributed.init_process_group(backend="gloo")
    cluster_info = get_graph_store_info()
    torch.distributed.destroy_process_group()
    mp.spawn(fn=run_worker, args=(cluster_info, out_dir),
             nprocs=cluster_info.num_processes_per_compute)


if __name__ == "__main__":
    main()
