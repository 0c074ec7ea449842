"""``ReplicatedDataset``: the dataset contract (graphstore.dataset.graph_dataset) over a graph file.

The third implementation of :class:`~graphstore.dataset.graph_dataset.GraphDataset`, beside graph store
(``RemoteDistDataset``) and colocated (``DistDataset``): every compute process maps the whole
graph file (and the features file) of replicated mode itself, so the trainer, evaluator,
inferencer and loaders run unchanged on it. What differs is only the transport:

- every ``fetch_*`` request of the storage protocol is answered in-process by
  :class:`GraphFileService` from the mapped file, the graph being one partition (``0``): results
  are keyed ``{0: ...}``, the partition book is all zeros, and ``rank`` / ``world_size`` default
  to this process's rank among all compute processes (every process of the job together gets
  each id once, as in graph-store mode);
- a loader (``DistNeighborLoader`` / ``DistABLPLoader``) samples inline or through Ray Data
  (graphstore.modes.replicated.loading): its seeds, fan-out, batch size, shuffling and seed come from
  the same GLT sampler inputs and sampling options (``SamplingOptions``) the other modes hand GLT.

Answers follow graph-store storage's rules (graphstore.dataset.queries): ids sorted, slice
``rank`` of ``world_size`` contiguous; anchors of a split are those with a label of that split;
labels of an anchor in the shards' label order. The view: the trainer samples the ``train``
view (held-out supervision edges absent, as storage with the trainer's splitter holds it), the
inferencer the ``full`` one.

A ``ReplicatedDataset`` is also the mode's :class:`~graphstore.modes.cluster_info.DatasetSource`: it
pickles as its paths and options (never the mapped arrays) and every worker opens the files
again.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from graphstore.dataset.ablp import ABLPInputNodes
from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError
from graphstore.dataset.graph_dataset import DatasetBase, LoaderOptions, SamplingOptions
from graphstore.runtime.ports import free_ports
from graphstore.modes.replicated.format import View
from graphstore.modes.replicated.graph_file import FeatureFile, GraphFile
from graphstore.dataset import protocol as P
from graphstore.dataset.queries import contiguous_slice

PARTITION = 0
"""The one partition of a replicated graph: every process holds all of it."""


class GraphFileService:
    """Answers :mod:`graphstore.dataset.protocol` requests from a mapped graph file (the graph as
    partition 0; see the module docs for the rules). ``bind_host``: where free ports must be
    free (``127.0.0.1`` in local mode)."""

    def __init__(self, graph: GraphFile, bind_host: str = "127.0.0.1") -> None:
        self.graph, self.bind_host = graph, bind_host

    def answer(self, request: P.Request) -> P.Reply:
        """The reply to ``request`` (UsageError for a question the file cannot answer)."""
        g, meta = self.graph, self.graph.metadata
        if isinstance(request, P.MetadataRequest):
            return P.MetadataReply(meta)
        if isinstance(request, P.FreePortsRequest):
            return P.FreePortsReply(tuple(free_ports(request.num_ports, self.bind_host)))
        if isinstance(request, P.NodeIdsRequest):
            return P.NodeIdsReply(self._node_ids(request))
        if isinstance(request, P.AblpInputRequest):
            sup = meta.supervision_edge_type(request.supervision_edge_type)
            anchors = contiguous_slice(g.anchors(sup, request.split), request.rank,
                                       request.world_size)
            anchors = np.array(anchors, dtype=np.int64)  # a copy: inputs may be written to
            pairs = g.positives(sup, anchors, request.split)
            return P.AblpInputReply(ABLPInputNodes(
                anchor_node_type=sup.src_node_type, anchor_nodes=torch.from_numpy(anchors),
                positive_labels={sup.as_tuple(): torch.from_numpy(pairs)}))
        if isinstance(request, P.PositivePairsRequest):
            return P.PairsReply(self._pairs_to(request.supervision_edge_type,
                                               request.label_ids.numpy()))
        if isinstance(request, P.LabelsRequest):
            sup = meta.supervision_edge_type(request.supervision_edge_type)
            anchors = np.sort(request.anchors.numpy())
            known = g.anchors(sup, None)
            if len(anchors) and not np.isin(anchors, known).all():
                raise UsageError(f"{g.path}: some of the given anchors have no {sup} label")
            return P.PairsReply(torch.from_numpy(g.positives(sup, anchors)))
        raise UsageError(f"GraphFileService: no answer for {type(request).__name__}")

    def _node_ids(self, r: P.NodeIdsRequest) -> torch.Tensor:
        g, meta = self.graph, self.graph.metadata
        nt = meta.node_type(r.node_type)
        if r.split is None:
            ids = np.arange(meta.node_counts[nt], dtype=np.int64)
            return torch.from_numpy(contiguous_slice(ids, r.rank, r.world_size).copy())
        sups = [et for et in meta.supervision_edge_types if et.src_node_type == nt]
        if not sups:
            raise UsageError(f"node_ids(split={r.split!r}): {nt!r} anchors no supervision edge type")
        ids = np.unique(np.concatenate([g.anchors(et, r.split) for et in sups]))
        return torch.from_numpy(np.ascontiguousarray(contiguous_slice(ids, r.rank, r.world_size)))

    def _pairs_to(self, sup_type: EdgeType, label_ids: np.ndarray) -> torch.Tensor:
        """``[2, K]`` (anchor, label) pairs, every split, whose label is in ``label_ids``."""
        g = self.graph
        entry = g.labels(g.metadata.supervision_edge_type(sup_type))
        indptr, labels = g.array(entry.indptr), g.array(entry.labels)
        rows = np.flatnonzero(np.isin(labels, label_ids))
        anchors = np.searchsorted(indptr, rows, side="right") - 1
        return torch.from_numpy(np.stack([anchors, labels[rows]]).astype(np.int64))


class ReplicatedDataset(DatasetBase):
    """The whole graph from its graph file (module docs).

    ``graph_path`` / ``features_path``: local files (the same path on every Ray node);
    ``view``: ``"train"`` (training: held-out supervision edges absent; needs a file written
    with a splitter) or ``"full"``; ``ray_remote_args``: Ray options of the read tasks that
    sample (default: no CPU reserved, on the node of the process that reads them).
    """

    def __init__(self, graph_path: str, features_path: str | None = None, *,
                 view: View = "full", bind_host: str = "127.0.0.1",
                 ray_remote_args: dict[str, Any] | None = None) -> None:
        self.graph_path, self.features_path = graph_path, features_path
        self.view, self.bind_host, self.ray_remote_args = view, bind_host, ray_remote_args
        self._graph: GraphFile | None = None
        self._metadata = self.graph.metadata  # opens and checks the files now, in the parent
        self.graph.check_view(view)
        if features_path is not None:
            FeatureFile.open(features_path).check_matches(self.graph)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_graph"] = None  # a memory map pickles as a copy of its data: reopen instead
        return state

    @property
    def graph(self) -> GraphFile:
        """The mapped graph file (opened on first use in each process)."""
        if self._graph is None:
            self._graph = GraphFile.open(self.graph_path)
        return self._graph

    def open(self, info: Any, local_rank: int) -> ReplicatedDataset:
        """The :class:`~graphstore.modes.cluster_info.DatasetSource` call: every worker uses the
        files this dataset names (each process maps them itself)."""
        return self

    @property
    def input_partitions(self) -> tuple[int, ...]:
        """The one partition, ``(0,)``: every process holds the whole graph."""
        return (PARTITION,)

    def _ask(self, partition: int, request: P.Request) -> P.Reply:
        if partition != PARTITION:
            raise UsageError(f"replicated: the graph is one partition ({PARTITION}), not {partition}")
        return P.check_reply(request, GraphFileService(self.graph, self.bind_host).answer(request))

    def _default_share(self) -> tuple[int, int]:
        from graphstore.modes.graph_store import compute

        proc = compute.current()
        return proc.rank, proc.world_size

    def sampling_seed(self) -> int:
        from graphstore.modes.graph_store import compute

        proc = compute.current()
        return proc.info.runtime.random_seed + proc.rank

    def start_loader(self, loader: Any, inputs: Sequence[Any], sampling: SamplingOptions,
                     options: LoaderOptions) -> None:
        """Drive ``loader`` inline or with Ray Data (graphstore.modes.replicated.loading): ``inputs``
        is the one GLT sampler input of partition 0 (node ids, or (anchor, label) rows and
        columns)."""
        from graphstore.modes.replicated.loading import ReplicatedIteration

        (only,) = inputs
        loader.drive_with(ReplicatedIteration.from_loader(self, loader, only, sampling, options))


__all__ = ["GraphFileService", "ReplicatedDataset", "PARTITION"]
