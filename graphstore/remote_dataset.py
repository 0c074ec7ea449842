"""``RemoteDistDataset``: a compute process's handle on the storage cluster (not a copy of it).

Create it after :func:`graphstore.init_compute_process`. Every fetch asks each storage rank for its
contiguous slice ``rank`` of ``world_size`` of what it holds, so the compute ranks together get every
id exactly once (no overlap, no gap); the result is keyed by storage rank, and an empty tensor for a
storage rank is normal. Those dicts are exactly what the loaders take.
"""

from __future__ import annotations

from typing import Any

import torch

from graphstore.ablp import ABLPInputNodes
from graphstore.config import EdgeType
from graphstore.errors import UsageError
from graphstore.graph_store_info import GraphStoreInfo

EdgeTypeLike = EdgeType | tuple[str, str, str] | str


def edge_type_key(et: EdgeTypeLike) -> str:
    """``EdgeType`` / tuple / ``"src__rel__dst"`` -> ``"src__rel__dst"``."""
    if isinstance(et, EdgeType):
        return str(et)
    if isinstance(et, tuple):
        return str(EdgeType(src_node_type=et[0], relation=et[1], dst_node_type=et[2]))
    return str(EdgeType.parse(et))


class RemoteDistDataset:
    """Client handle: metadata, ABLP inputs and node ids served by the storage processes."""

    def __init__(self, cluster_info: GraphStoreInfo, local_rank: int) -> None:
        from graphstore import compute

        self.cluster_info = cluster_info
        self.local_rank = local_rank
        self._proc = compute.current()
        self._meta: dict[str, Any] | None = None

    # -- RPC plumbing --------------------------------------------------------------------------
    def _all_servers(self, func, *args) -> dict[int, Any]:
        from graphlearn_torch.distributed import async_request_server

        futs = {k: async_request_server(k, func, *args) for k in range(self.num_storage)}
        return {k: f.wait() for k, f in futs.items()}

    @property
    def num_storage(self) -> int:
        return self.cluster_info.num_storage_nodes

    @property
    def metadata(self) -> dict[str, Any]:
        """Node/edge types, edge direction, feature dims, counts (from storage rank 0, cached)."""
        if self._meta is None:
            from graphlearn_torch.distributed import request_server

            from graphstore.storage.server import gs_metadata

            self._meta = request_server(0, gs_metadata)
        return self._meta

    @property
    def edge_dir(self) -> str:
        return self.metadata["edge_dir"]

    @property
    def is_homogeneous(self) -> bool:
        return self.metadata["homogeneous"]

    def sampling_port(self) -> int:
        """A free port on storage rank 0's host, for one loader's sampling workers."""
        from graphlearn_torch.distributed import request_server

        from graphstore.storage.server import gs_free_port

        return int(request_server(0, gs_free_port))

    def _rank_world(self, rank: int | None, world_size: int | None) -> tuple[int, int]:
        if (rank is None) != (world_size is None):
            raise UsageError("give both rank and world_size, or neither")
        if rank is None:
            return self._proc.rank, self._proc.world_size
        return rank, world_size

    # -- fetches -------------------------------------------------------------------------------
    def fetch_node_ids(self, rank: int | None = None, world_size: int | None = None,
                       split: str | None = None, node_type: str | None = None) -> dict[int, torch.Tensor]:
        """Node ids of ``node_type`` (all, or the anchors of ``split``), sliced for ``rank``."""
        from graphstore.storage.server import gs_node_ids

        node_type = self._node_type(node_type)
        rank, world_size = self._rank_world(rank, world_size)
        return self._all_servers(gs_node_ids, rank, world_size, node_type, split)

    def fetch_ablp_input(self, split: str | None = None, rank: int | None = None,
                         world_size: int | None = None, anchor_node_type: str | None = None,
                         supervision_edge_type: EdgeTypeLike | None = None) -> dict[int, ABLPInputNodes]:
        """Anchors of ``split`` with their positive labels, sliced for ``rank``."""
        from graphstore.storage.server import gs_ablp_input

        sup = self._supervision_type(supervision_edge_type)
        if anchor_node_type is not None and anchor_node_type != EdgeType.parse(sup).src_node_type:
            raise UsageError(f"anchor_node_type {anchor_node_type!r} is not the source of {sup}")
        rank, world_size = self._rank_world(rank, world_size)
        return self._all_servers(gs_ablp_input, split, rank, world_size, sup)

    def fetch_positive_pairs(self, label_ids: torch.Tensor,
                             supervision_edge_type: EdgeTypeLike | None = None) -> torch.Tensor:
        """``[2, K]`` (anchor, label) pairs of every split whose label is in ``label_ids``, from
        every storage rank (what a filtered evaluation skips among its candidates)."""
        from graphstore.storage.server import gs_positive_pairs

        sup = self._supervision_type(supervision_edge_type)
        parts = self._all_servers(gs_positive_pairs, sup, label_ids)
        return torch.cat([parts[k] for k in sorted(parts)], dim=1)

    def _node_type(self, node_type: str | None) -> str:
        types = self.metadata["node_types"]
        if node_type is None:
            if len(types) != 1:
                raise UsageError(f"node_type is required in a heterogeneous graph (one of {list(types)})")
            return types[0]
        if node_type not in types:
            raise UsageError(f"unknown node_type {node_type!r} (one of {list(types)})")
        return node_type

    def _supervision_type(self, et: EdgeTypeLike | None) -> str:
        types = self.metadata["supervision_edge_types"]
        if et is None:
            if len(types) != 1:
                raise UsageError(f"supervision_edge_type is required (one of {list(types)})")
            return types[0]
        key = edge_type_key(et)
        if key not in types:
            raise UsageError(f"{key} is not a supervision edge type (one of {list(types)})")
        return key
