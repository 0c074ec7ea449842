"""Colocated mode: each compute machine holds one partition itself (no storage processes).

Same shards, same splitter, same loaders as graph-store mode; only where the graph lives differs
(seed 000: "the same loops also run colocated"). Order, per compute machine:

    dataset = DistDataset.from_shards(shards_uri, partition=machine_index, storage_args=...)
    mp.spawn(worker, args=(cluster_info, dataset, ...))   # the partition is shared, not copied
    # in each worker:
    init_compute_process(local_rank, cluster_info)        # GLT worker group + RPC, then the group
    loader = DistABLPLoader(dataset, ..., input_nodes=dataset.ablp_input("train", ...))

Colocated inputs are ``ABLPInputNodes`` of this machine's anchors (``ablp_input``: the labels of
one split, which is what a per-edge split needs), or plain tensors (or ``(node_type, tensor)``)
of ids this machine owns (an ABLP loader then takes every label of those anchors); the ``rank`` /
``world_size`` arguments slice them among the machine's local processes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from graphstore.ablp import ABLPInputNodes
from graphstore.config import StorageArgs
from graphstore.errors import UsageError
from graphstore.remote_dataset import EdgeTypeLike, edge_type_key
from graphstore.storage import queries
from graphstore.storage.dataset import StorageState, build_storage_dataset


class DistDataset:
    """One machine's partition: the GLT dataset plus splits and labels (see module docs)."""

    def __init__(self, glt_dataset: Any, state: StorageState) -> None:
        self.glt = glt_dataset
        self.state = state

    @classmethod
    def from_shards(cls, shards_uri: str, partition: int, storage_args: StorageArgs) -> "DistDataset":
        from graphstore.shards.reader import ShardSet

        shards = ShardSet.open(shards_uri)
        glt_dataset, state = build_storage_dataset(shards, partition, storage_args,
                                                   storage_args.sample_edge_direction)
        return cls(glt_dataset, state)

    @property
    def metadata(self) -> dict[str, Any]:
        return queries.metadata(self.state)

    @property
    def edge_dir(self) -> str:
        return self.state.edge_dir

    @property
    def is_homogeneous(self) -> bool:
        return self.state.homogeneous

    def _node_type(self, node_type: str | None) -> str:
        if node_type is None:
            if len(self.state.node_types) != 1:
                raise UsageError(f"node_type is required (one of {list(self.state.node_types)})")
            return self.state.node_types[0]
        return node_type

    def supervision_key(self, supervision_edge_type: EdgeTypeLike | None) -> str:
        if supervision_edge_type is None:
            if len(self.state.supervision) != 1:
                raise UsageError(f"supervision_edge_type is required (one of {list(self.state.supervision)})")
            return next(iter(self.state.supervision))
        return edge_type_key(supervision_edge_type)

    def node_ids(self, node_type: str | None = None, split: str | None = None, rank: int = 0,
                 world_size: int = 1) -> torch.Tensor:
        """Ids this machine owns (or its anchors of ``split``), slice ``rank`` of ``world_size``."""
        return queries.node_ids(self.state, rank, world_size, self._node_type(node_type), split)

    def anchor_ids(self, split: str | None, supervision_edge_type: EdgeTypeLike | None = None,
                   rank: int = 0, world_size: int = 1) -> torch.Tensor:
        """Anchors of ``split`` this machine owns, slice ``rank`` of ``world_size``."""
        return self.ablp_input(split, supervision_edge_type, rank, world_size).anchor_nodes

    def ablp_input(self, split: str | None, supervision_edge_type: EdgeTypeLike | None = None,
                   rank: int = 0, world_size: int = 1) -> ABLPInputNodes:
        """Anchors of ``split`` this machine owns (slice ``rank`` of ``world_size``) with their
        positive labels: of that split, for a per-edge split (graphstore.splitter)."""
        key = self.supervision_key(supervision_edge_type)
        return queries.ablp_input(self.state, split, rank, world_size, key)

    def positive_pairs(self, label_ids: torch.Tensor,
                       supervision_edge_type: EdgeTypeLike | None = None) -> torch.Tensor:
        """``[2, K]`` (anchor, label) pairs of owned anchors, every split, labels in ``label_ids``."""
        key = self.supervision_key(supervision_edge_type)
        return queries.positive_pairs_to(self.state, key, label_ids.numpy())

    def labels_for(self, anchors: torch.Tensor, supervision_edge_type: EdgeTypeLike | None) -> torch.Tensor:
        """``[2, P]`` (anchor, positive label) pairs of owned anchors."""
        sup = queries.supervision(self.state, self.supervision_key(supervision_edge_type))
        owned = np.sort(anchors.numpy())
        if len(owned) and not np.isin(owned, sup.anchors_by_split["all"]).all():
            raise UsageError("DistABLPLoader: some anchors are not anchors this machine owns")
        return torch.from_numpy(queries.labels_of(sup, owned))
