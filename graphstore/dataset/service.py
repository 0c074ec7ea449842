"""``StorageService``: one partition's answers to the storage protocol's requests.

A storage session process registers one (graphstore.modes.graph_store.server), so that requests arriving
over RPC reach it; a colocated ``DistDataset`` asks one in-process. Either way the same request
gets the same reply from the same partition (graphstore.dataset.queries does the work).
"""

from __future__ import annotations

import torch

from graphstore.runtime.errors import UsageError
from graphstore.runtime.ports import PortHold
from graphstore.dataset import protocol as P
from graphstore.dataset import queries
from graphstore.dataset.partition_graph import StorageState


class StorageService:
    """Answers :mod:`graphstore.dataset.protocol` requests from one partition.

    ``bind_host``: where ports must be free (``127.0.0.1`` in local mode); ``port_hold``: keeps
    the ports this service hands out reserved until their user (a loader's sampling workers)
    binds them (graphstore.runtime.ports); owned by whoever outlives the requests.
    """

    def __init__(self, state: StorageState, bind_host: str, port_hold: PortHold) -> None:
        self.state = state
        self.bind_host = bind_host
        self.port_hold = port_hold

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
        if isinstance(request, P.StoredAblpPairsRequest):
            src = request.source
            return P.StoredPairsReply(*queries.stored_ablp_pairs(
                s, src.split, src.rank, src.world_size, src.supervision_edge_type))
        raise UsageError(f"StorageService: no answer for {type(request).__name__}")
