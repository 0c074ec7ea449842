"""``StorageService``: one partition's answers to the storage protocol's requests.

A storage session process registers one (graphstore.modes.graph_store.server), so that requests arriving
over RPC reach it; a colocated ``DistDataset`` asks one in-process. Either way the same request
gets the same reply from the same partition (graphstore.dataset.queries does the work).
"""

from __future__ import annotations

import numpy as np
import torch

from graphstore.runtime.errors import UsageError
from graphstore.runtime.ports import PortHold
from graphstore.dataset import kernels
from graphstore.dataset import protocol as P
from graphstore.dataset import queries
from graphstore.dataset.partition_graph import PartitionGraph, StorageState


class StorageService:
    """Answers :mod:`graphstore.dataset.protocol` requests from one partition.

    ``bind_host``: where ports must be free (``127.0.0.1`` in local mode); ``port_hold``: keeps
    the ports this service hands out reserved until their user (a loader's sampling workers)
    binds them (graphstore.runtime.ports); owned by whoever outlives the requests. ``graph``:
    the partition's rows and features, for the partitioned sampler's requests (None: a service
    that answers only the others).
    """

    def __init__(self, state: StorageState, bind_host: str, port_hold: PortHold,
                 graph: PartitionGraph | None = None) -> None:
        self.state = state
        self.bind_host = bind_host
        self.port_hold = port_hold
        self.graph = graph

    def answer(self, request: P.Request) -> P.Reply:
        """The reply to ``request`` (UsageError for a question this partition cannot answer)."""
        s = self.state
        if isinstance(request, P.MetadataRequest):
            return P.MetadataReply(s.metadata)
        if isinstance(request, P.FreePortsRequest):
            return P.FreePortsReply(tuple(self.port_hold.ports(request.num_ports, self.bind_host)))
        if isinstance(request, P.NodeIdsRequest):
            return P.NodeIdsReply(queries.node_ids(s, request.rank, request.world_size,
                                                   request.node_type, request.split))
        if isinstance(request, P.AblpInputRequest):
            return P.AblpInputReply(queries.ablp_input(s, request.split, request.rank,
                                                       request.world_size,
                                                       request.supervision_edge_type))
        if isinstance(request, P.PositivePairsRequest):
            return P.PairsReply(queries.positive_pairs_to(s, request.supervision_edge_type,
                                                          request.label_ids.numpy()))
        if isinstance(request, P.LabelsRequest):
            pairs = queries.labels_for(s, request.supervision_edge_type, request.anchors.numpy())
            return P.PairsReply(torch.from_numpy(pairs))
        if isinstance(request, P.NeighboursRequest):
            return self._neighbours(request)
        if isinstance(request, P.FeatureRowsRequest):
            return self._feature_rows(request)
        raise UsageError(f"StorageService: no answer for {type(request).__name__}")

    def _partition_graph(self, who: str) -> PartitionGraph:
        if self.graph is None:
            raise UsageError(f"{who}: this storage service holds no partition rows")
        return self.graph

    def _owned(self, node_type: str, ids: np.ndarray, who: str) -> int:
        """The start of ``node_type``'s owned range, once every id is checked to lie in it."""
        lo, hi = self.state.owned_ranges[node_type]
        if ids.shape[0] and (int(ids.min()) < lo or int(ids.max()) >= hi):
            raise UsageError(f"{who}: ids of {node_type!r} outside partition "
                             f"{self.state.partition}'s range [{lo}, {hi})")
        return lo

    def _neighbours(self, r: P.NeighboursRequest) -> P.NeighboursReply:
        graph = self._partition_graph("NeighboursRequest")
        adjacency = graph.adjacency.get(r.edge_type)
        if adjacency is None:
            raise UsageError(f"NeighboursRequest: no edge type {r.edge_type} in partition "
                             f"{self.state.partition}")
        nodes = r.nodes.numpy()  # wire ids: the kernel reads int32 or int64
        et = r.edge_type
        anchor, neighbour = ((et.dst_node_type, et.src_node_type) if graph.edge_dir == "in"
                             else (et.src_node_type, et.dst_node_type))
        self._owned(anchor, nodes, "NeighboursRequest")
        counts_bound = r.fanout + 1 if r.fanout >= 0 else int(adjacency.indices.numel()) + 1
        pos, neighbours, counts = kernels.pick_neighbour_ids(
            adjacency.indptr.numpy(), adjacency.indices.numpy(), nodes, r.fanout,
            bool(r.replace), int(r.seed),
            np.empty(0, P.wire_dtype(self.state.metadata.node_counts[neighbour])),
            np.empty(0, P.wire_dtype(counts_bound)))
        eids = (torch.from_numpy(np.take(adjacency.eids.numpy(), pos)) if r.with_edge_ids
                else None)
        return P.NeighboursReply(torch.from_numpy(neighbours), torch.from_numpy(counts), eids)

    def _feature_rows(self, r: P.FeatureRowsRequest) -> P.FeatureRowsReply:
        feats = self._partition_graph("FeatureRowsRequest").features.get(r.node_type)
        if feats is None:
            raise UsageError(f"FeatureRowsRequest: node type {r.node_type!r} has no features")
        ids = r.ids.numpy()  # wire ids, int32 or int64
        lo = self._owned(r.node_type, ids, "FeatureRowsRequest")
        return P.FeatureRowsReply(torch.from_numpy(kernels.gather_rows(feats.numpy(), ids, lo)))
