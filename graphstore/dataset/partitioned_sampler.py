"""Neighbour sampling over a graph cut into partitions: each partition picks its own nodes'
neighbours and serves their features; the sampling process relabels and builds the batch.

Graph-store mode samples with it over RPC to the storage sessions (each answers with its
partition's rows: graphstore.dataset.service), colocated mode the same way with this machine's
partition answered in-process. The requests are the storage protocol's
(:class:`~graphstore.dataset.protocol.NeighboursRequest`,
:class:`~graphstore.dataset.protocol.FeatureRowsRequest`); ``ask(partition, request)`` sends one
and returns something whose ``wait()`` gives the checked reply, so every partition's requests of
a step are in flight at once.

Rounds: :meth:`PartitionedSampler.sample` takes several batches' seeds and samples them in
lockstep, so each hop costs one request per partition and edge type for all of them (and the
features one per partition and node type), not one per batch: the per-request cost (RPC,
pickling, a Python call on storage) is shared by ``len(batches)`` batches. Per hop and edge type:
the frontier (every batch's nodes first reached in the previous hop, batch after batch) is
split by owning partition (a counting sort: graphstore.dataset.kernels.group_by_key), each part
sent with its own kernel seed (one draw from ``generator`` per request, in partition order), the
replies put back in frontier order (edges grouped by the node that sampled them) and cut per
batch; each batch then relabels its new nodes (graphstore.dataset.kernels.relabel). Ids travel
as int32 for node types of fewer than 2^31 nodes (graphstore.dataset.protocol.wire_ids). The batches
come out exactly as replicated mode's sampler makes them (graphstore.dataset.subgraph: order,
direction, names). Reproducible: the same rounds of seeds, fanouts, generator state and
partitioning give the same batches (a round's draws are shared by its batches, so a batch's
depend on the round it is in).

Edge direction (the shards'): a partition holds, per stored edge type, the rows of the nodes it
owns (``in``: edges into them, their sources as neighbours; ``out``: edges out of them), and
batches carry message types as replicated mode's (``in``: the stored type; ``out``: its reverse).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
import torch

from graphstore.config import EdgeType
from graphstore.dataset import kernels
from graphstore.dataset import protocol as P
from graphstore.dataset.metadata import DatasetMetadata
from graphstore.dataset.subgraph import (EdgeTypeTuple, SampledSubgraph, fanouts_per_edge_type,
                                         joined)
from graphstore.runtime.errors import RuntimeFailure, UsageError


class PendingReply(Protocol):
    """A request in flight: ``wait()`` gives its checked reply (or raises its failure)."""

    def wait(self) -> P.Reply: ...


Ask = Callable[[int, P.Request], PendingReply]
"""``ask(partition, request)``: send ``request`` to ``partition`` without waiting."""


class InProcessReply:
    """A partition this process holds: ``service`` answers ``request`` when the reply is first
    waited for (so a hop's requests to the other partitions are all sent before this one's
    kernel runs), once."""

    def __init__(self, service: P.Service, request: P.Request) -> None:
        self._service, self._request = service, request
        self._reply: P.Reply | None = None

    def wait(self) -> P.Reply:
        if self._reply is None:
            self._reply = P.check_reply(self._request, self._service.answer(self._request))
        return self._reply


class RpcReply:
    """A request sent over RPC to the process holding a partition (``future``: torch RPC's):
    ``wait()`` gives its checked reply, or raises RuntimeFailure naming ``who`` asked (e.g.
    ``graph-store loader``), the request and ``peer`` (e.g. ``storage rank 1``): the peer's
    error, or the RPC's after ``rpcTimeoutS``."""

    def __init__(self, request: P.Request, who: str, peer: str, future: Any) -> None:
        self.request, self.who, self.peer, self.future = request, who, peer, future

    def wait(self) -> P.Reply:
        try:
            reply = self.future.wait()
        except Exception as exc:
            raise RuntimeFailure(f"{self.who}: {type(self.request).__name__} to {self.peer} "
                                 f"failed: {type(exc).__name__}: {exc}") from exc
        return P.check_reply(self.request, reply)


@dataclass(frozen=True)
class _Hop:
    """One edge type's requests of one hop: per partition asked, the frontier positions it got
    and its pending reply."""

    message: EdgeTypeTuple
    neighbour_type: str
    frontier_size: int
    parts: list[tuple[np.ndarray, PendingReply]]
    batch_offsets: np.ndarray  # [B + 1] where each batch's frontier starts


class PartitionedSampler:
    """Samples ``num_neighbors`` (one fanout per hop, or ``{edge type: fanouts}``) around seeds,
    asking the partitions of ``metadata``'s graph through ``ask`` (module docs); random draws
    from ``generator`` (None: torch's global one). ``with_edge_ids``: subgraphs carry the
    sampled edges' ids (``edge_id``; else it is empty, and the replies carry 8 bytes less per
    edge)."""

    def __init__(self, metadata: DatasetMetadata, ask: Ask, num_neighbors: Any, *,
                 replace: bool = False, with_edge_ids: bool = False,
                 generator: torch.Generator | None = None) -> None:
        self.meta, self.ask, self.replace, self.generator = metadata, ask, bool(replace), generator
        self.with_edge_ids = bool(with_edge_ids)
        self.node_types = list(metadata.node_types)
        fanouts = fanouts_per_edge_type(num_neighbors, metadata.edge_types)
        self.num_hops = len(next(iter(fanouts.values())))
        self._stored = {(et if metadata.edge_dir == "in" else et.reverse()).as_tuple(): et
                        for et in metadata.edge_types}  # message type -> stored type
        self._fanout = {msg: fanouts[et] for msg, et in self._stored.items()}
        self._bounds = {nt: np.asarray(metadata.node_bounds(nt), dtype=np.int64)
                        for nt in self.node_types}
        self._counts = {nt: int(metadata.node_counts[nt]) for nt in self.node_types}

    @property
    def message_types(self) -> list[EdgeTypeTuple]:
        """The edge types batches carry (graphstore.dataset.subgraph)."""
        return list(self._stored)

    # -- routing ----------------------------------------------------------------------------------
    def _by_partition(self, node_type: str, ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """``(partition, positions in ids)`` of every partition owning some of ``ids``; the
        positions ascending."""
        bounds = self._bounds[node_type]
        parts = len(bounds) - 1
        if parts == 1:
            return [(0, np.arange(ids.shape[0], dtype=np.int64))] if ids.shape[0] else []
        owner = np.searchsorted(bounds, ids, side="right") - 1
        order, starts = kernels.group_by_key(owner, parts)
        return [(p, order[starts[p]:starts[p + 1]]) for p in range(parts)
                if starts[p + 1] > starts[p]]

    def _send_hop(self, message: EdgeTypeTuple, fronts: list[np.ndarray], fanout: int) -> _Hop:
        frontier = fronts[0] if len(fronts) == 1 else np.concatenate(fronts)
        stored: EdgeType = self._stored[message]
        parts = []
        for partition, at in self._by_partition(message[2], frontier):
            nodes = P.wire_ids(frontier[at], self._counts[message[2]])
            request = P.NeighboursRequest(stored, nodes, int(fanout),
                                          self.replace, kernels.draw_seed(self.generator),
                                          self.with_edge_ids)
            parts.append((at, self.ask(partition, request)))
        offsets = np.zeros(len(fronts) + 1, dtype=np.int64)
        np.cumsum([f.shape[0] for f in fronts], out=offsets[1:])
        return _Hop(message, message[0], frontier.shape[0], parts, offsets)

    def _receive_hop(self, hop: _Hop) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(owner, neighbours, edge ids or None)`` of every edge the hop sampled, grouped by
        the frontier position that sampled it, ascending (graphstore.dataset.kernels.merge_replies:
        one pass, no sort)."""
        replies = [(at, pending.wait()) for at, pending in hop.parts]
        if not replies:
            empty = np.empty(0, np.int64)
            return empty, empty, empty if self.with_edge_ids else None
        owner, nbr, order = kernels.merge_replies(
            hop.frontier_size, joined([at for at, _ in replies]),
            joined([r.counts.numpy() for _, r in replies]),
            joined([r.neighbours.numpy() for _, r in replies]))
        eid = (np.take(joined([r.edge_ids.numpy() for _, r in replies]), order)
               if self.with_edge_ids else None)
        return owner, nbr, eid

    # -- sampling ---------------------------------------------------------------------------------
    def _checked(self, seeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out = {}
        for nt, s in seeds.items():
            ids = np.ascontiguousarray(s.numpy() if isinstance(s, torch.Tensor) else s,
                                       dtype=np.int64)
            if not ids.shape[0]:
                continue
            n = self.meta.node_counts.get(nt)
            if n is None:
                raise UsageError(f"unknown node type {nt!r} (one of {self.node_types})")
            if int(ids.min()) < 0 or int(ids.max()) >= n:
                raise UsageError(f"seed ids of {nt!r} must be in [0, {n}), got {int(ids.min())}.."
                                 f"{int(ids.max())}")
            out[nt] = ids
        return out

    def sample(self, batches: Sequence[Mapping[str, Any]]) -> list[SampledSubgraph]:
        """One :class:`SampledSubgraph` per batch of seeds (``{node type: ids}``, unique per
        type), sampled in one round (module docs)."""
        seeds = [self._checked(b) for b in batches]
        empty = np.empty(0, np.int64)
        node = [{nt: s.get(nt, empty) for nt in self.node_types} for s in seeds]
        begin = [{nt: 0 for nt in self.node_types} for _ in seeds]
        rows = [{m: [] for m in self._stored} for _ in seeds]
        cols = [{m: [] for m in self._stored} for _ in seeds]
        eids = [{m: [] for m in self._stored} for _ in seeds]
        for hop in range(self.num_hops):
            sent = []
            for msg in self._stored:
                fanout, dst_t = self._fanout[msg][hop], msg[2]
                fronts = [n[dst_t][b[dst_t]:] for n, b in zip(node, begin)]
                if fanout != 0 and any(f.shape[0] for f in fronts):
                    sent.append(self._send_hop(msg, fronts, fanout))
            found: list[dict[str, list[tuple[EdgeTypeTuple, np.ndarray]]]] = [{} for _ in seeds]
            for h in sent:
                owner, nbr, eid = self._receive_hop(h)
                cut = np.searchsorted(owner, h.batch_offsets)
                for i in range(len(seeds)):
                    lo, hi = cut[i], cut[i + 1]
                    cols[i][h.message].append(owner[lo:hi] - h.batch_offsets[i]
                                              + begin[i][h.message[2]])
                    if eid is not None:
                        eids[i][h.message].append(eid[lo:hi])
                    found[i].setdefault(h.neighbour_type, []).append((h.message, nbr[lo:hi]))
            for i in range(len(seeds)):
                for nt in self.node_types:
                    begin[i][nt] = node[i][nt].shape[0]
                for nt, parts in found[i].items():
                    ids = parts[0][1] if len(parts) == 1 else np.concatenate([p for _, p in parts])
                    node[i][nt], local = kernels.relabel(node[i][nt], ids)
                    at = 0
                    for msg, part in parts:
                        rows[i][msg].append(local[at:at + part.shape[0]])
                        at += part.shape[0]
        return [SampledSubgraph(
            node={nt: torch.from_numpy(ids) for nt, ids in node[i].items()},
            num_seeds={nt: int(s.shape[0]) for nt, s in seeds[i].items()},
            edge_index={m: torch.from_numpy(np.stack([joined(rows[i][m]), joined(cols[i][m])]))
                        for m in self._stored},
            edge_id=({m: torch.from_numpy(joined(eids[i][m])) for m in self._stored}
                     if self.with_edge_ids else {}))
            for i in range(len(seeds))]

    def features(self, subgraphs: Sequence[SampledSubgraph]) -> list[dict[str, torch.Tensor]]:
        """Per subgraph, the float32 feature rows of its nodes per node type that has features
        (in ``node`` order). One request per partition and node type for all the subgraphs,
        each id asked once however many of them hold it (subgraphs of one round share nodes)."""
        out: list[dict[str, torch.Tensor]] = [{} for _ in subgraphs]
        pending = []
        for nt in self.node_types:
            dim = self.meta.node_feature_dims.get(nt, 0)
            if not dim:
                continue
            per = [s.node[nt].numpy() for s in subgraphs]
            unique, local = kernels.relabel(np.empty(0, np.int64),
                                            per[0] if len(per) == 1 else np.concatenate(per))
            rows = np.empty((unique.shape[0], dim), dtype=np.float32)
            asks = [(at, self.ask(p, P.FeatureRowsRequest(nt, P.wire_ids(unique[at],
                                                                         self._counts[nt]))))
                    for p, at in self._by_partition(nt, unique)]
            pending.append((nt, per, local, rows, asks))
        for nt, per, local, rows, asks in pending:
            for at, reply in asks:
                rows[at] = reply.wait().rows.numpy()
            start = 0
            for i, ids in enumerate(per):
                out[i][nt] = torch.from_numpy(np.take(rows, local[start:start + ids.shape[0]],
                                                      axis=0))
                start += ids.shape[0]
        return out


__all__ = ["Ask", "InProcessReply", "PartitionedSampler", "PendingReply", "RpcReply"]
