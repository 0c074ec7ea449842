"""The default link-prediction encoder: per-type input projection + heterogeneous GraphSAGE.

Homogeneous graphs are the one-node-type, one-edge-type case of the same model, so one code path
serves both. Messages flow along the batch's edge types (PyG convention, ``edge_index[0]`` sends to
``edge_index[1]``); a node type that receives no edge type in a layer keeps its previous state
(residual), so featureless or sink types still get an embedding. Output embeddings are
L2-normalised when ``decoder == "cosine"``.

Learned id embeddings (``ModelConfig.id_embedding_counts``, the trainer's
``trainerArgs.id_embeddings``): a type listed there gets one ``hidden_dim`` vector per node,
looked up by the node's global (dense) id and added to its input projection (or used alone for a
featureless type), so the model can fit each node like a matrix-factorisation model while message
passing still generalises through features and neighbours. The table has exactly the type's node
count rows: a checkpoint's model serves only the graph it was trained on.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import HeteroConv, SAGEConv

from graphstore.runtime.errors import UsageError

from graphstore.training.model_config import EdgeTypeTuple, ModelConfig  # noqa: F401 (re-exported)


def id_embedding_counts(node_types: Sequence[str], node_counts: Mapping[str, int],
                        max_nodes: int) -> dict[str, int]:
    """Rows of each requested id-embedding table (``trainerArgs.id_embeddings``), in request order.

    UsageError naming the key when a type is not a node type of the graph, or when a type has
    more nodes than ``max_nodes`` (``trainerArgs.id_embedding_max_nodes``): the error states the
    type, its node count, the limit and the table's size."""
    where = "trainerConfig.trainerArgs.id_embeddings"
    out: dict[str, int] = {}
    for nt in node_types:
        if nt not in node_counts:
            raise UsageError(f"{where}: {nt!r} is not a node type of the graph "
                             f"(node types: {', '.join(sorted(node_counts))})")
        count = int(node_counts[nt])
        if count > max_nodes:
            raise UsageError(f"{where}: node type {nt!r} has {count} nodes, more than "
                             f"trainerConfig.trainerArgs.id_embedding_max_nodes={max_nodes}; leave "
                             f"{nt!r} out of id_embeddings or raise the limit")
        out[nt] = count
    return out


class LinkPredictionEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.inputs = nn.ModuleDict()
        self.type_bias = nn.ParameterDict()
        self.id_emb = nn.ModuleDict()
        for nt, rows in cfg.id_embedding_counts.items():
            self.id_emb[nt] = nn.Embedding(rows, cfg.hidden_dim)
            nn.init.normal_(self.id_emb[nt].weight, std=0.1)
        for nt, dim in cfg.node_feature_dims.items():
            if dim > 0:
                self.inputs[nt] = nn.Linear(dim, cfg.hidden_dim)
            elif nt not in self.id_emb:  # featureless type: one learned vector, then messages
                self.type_bias[nt] = nn.Parameter(torch.zeros(cfg.hidden_dim))
        self.convs = nn.ModuleList()
        for layer in range(cfg.num_layers):
            out = cfg.out_dim if layer == cfg.num_layers - 1 else cfg.hidden_dim
            self.convs.append(HeteroConv(
                {et: SAGEConv((cfg.hidden_dim, cfg.hidden_dim), out)
                 for et in cfg.edge_types}, aggr="sum"))
        self.skips = nn.ModuleList(
            nn.Linear(cfg.hidden_dim, cfg.out_dim if layer == cfg.num_layers - 1 else cfg.hidden_dim)
            for layer in range(cfg.num_layers))

    def forward(self, x_dict: dict[str, torch.Tensor],
                edge_index_dict: dict[EdgeTypeTuple, torch.Tensor],
                num_nodes_dict: dict[str, int],
                node_ids_dict: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Embeddings per node type. ``node_ids_dict``: each local node's global id, per type;
        required when the model has id embeddings (a ValueError otherwise)."""
        ids = node_ids_dict or {}
        h = {nt: self._input_state(nt, n, x_dict.get(nt), ids.get(nt))
             for nt, n in num_nodes_dict.items()}
        edges = {et: ei for et, ei in edge_index_dict.items() if et in self.cfg.edge_types}
        for layer, (conv, skip) in enumerate(zip(self.convs, self.skips)):
            msgs = conv(h, edges) if edges else {}
            last = layer == len(self.convs) - 1
            new = {}
            for nt, state in h.items():
                out = skip(state) + msgs.get(nt, 0)
                new[nt] = out if last else F.dropout(F.relu(out), self.cfg.dropout, self.training)
            h = new
        if self.cfg.decoder == "cosine":
            h = {nt: F.normalize(v, dim=-1) for nt, v in h.items()}
        return h

    def _input_state(self, nt: str, count: int, x: torch.Tensor | None,
                     node_ids: torch.Tensor | None) -> torch.Tensor:
        """The state of ``count`` nodes of type ``nt`` before the first layer, from their features
        ``x`` (None: the type has none here) and global ids ``node_ids`` (for id embeddings)."""
        if nt in self.inputs and x is not None:
            h = self.inputs[nt](x)
        elif nt in self.type_bias:
            h = self.type_bias[nt].expand(count, -1)
        else:
            h = torch.zeros(count, self.cfg.hidden_dim, device=self.skips[0].weight.device)
        if nt in self.id_emb:
            if node_ids is None:
                raise ValueError(f"the model has id embeddings for {nt!r}: pass node_ids_dict")
            h = h + self.id_emb[nt](node_ids.to(h.device))
        return h

    def embed_seeds(self, x_dict: dict[str, torch.Tensor],
                    edge_index_dict: dict[EdgeTypeTuple, torch.Tensor],
                    num_nodes_dict: dict[str, int], node_ids_dict: dict[str, torch.Tensor] | None,
                    node_type: str, num_seeds: int) -> torch.Tensor:
        """The embeddings of the first ``num_seeds`` nodes of ``node_type`` only: what
        :meth:`forward` gives for them in eval mode (no dropout), each layer computed only for
        the nodes a later layer reads (a sampled neighbourhood's outer hop feeds the first layer
        and is never needed after it: with fan-out [10, 5], the last layer runs on 1 node in 61).

        Ordering rule: layer ``l`` needs, of every type, the nodes whose state layer ``l + 1``
        reads (its own destinations, for the skip term, and the sources of the edges into them),
        so the needed sets are computed from the seeds backwards (:func:`_needed_nodes`), each a
        sorted index into the batch's nodes, each containing the next."""
        if self.training:
            raise ValueError("embed_seeds is for eval mode (dropout would differ from forward)")
        edges = {et: ei for et, ei in edge_index_dict.items() if et in self.cfg.edge_types}
        needed = _needed_nodes(edges, num_nodes_dict, node_type, num_seeds, len(self.convs))
        ids = node_ids_dict or {}
        h = {nt: self._input_state(nt, len(idx), x_dict[nt][idx] if nt in x_dict else None,
                                   ids[nt][idx] if nt in ids else None)
             for nt, idx in needed[0].items()}
        for layer, (conv, skip) in enumerate(zip(self.convs, self.skips)):
            src_of, dst_of = needed[layer], needed[layer + 1]
            src_pos = {nt: _positions(idx, num_nodes_dict[nt]) for nt, idx in src_of.items()}
            dst_pos = {nt: _positions(idx, num_nodes_dict[nt]) for nt, idx in dst_of.items()}
            # the destinations' own states (each destination set lies in the source set)
            dst_state = {nt: h[nt][src_pos[nt][idx]] for nt, idx in dst_of.items()}
            msgs: dict[str, torch.Tensor] = {}
            for et, ei in edges.items():
                src, _, dst = et
                if dst not in dst_of:
                    continue
                keep = dst_pos[dst][ei[1]] >= 0
                local = torch.stack([src_pos[src][ei[0][keep]], dst_pos[dst][ei[1][keep]]])
                out = conv.convs[et]((h[src], dst_state[dst]), local,
                                     size=(len(src_of[src]), len(dst_of[dst])))
                msgs[dst] = msgs[dst] + out if dst in msgs else out
            last = layer == len(self.convs) - 1
            new = {}
            for nt, state in dst_state.items():
                out = skip(state) + msgs.get(nt, 0)
                new[nt] = out if last else F.relu(out)
            h = new
        out = h[node_type]
        return F.normalize(out, dim=-1) if self.cfg.decoder == "cosine" else out


def _positions(idx: torch.Tensor, n: int) -> torch.Tensor:
    """``pos[i]`` = the position of node ``i`` in the sorted index ``idx``; -1 where absent."""
    pos = torch.full((n,), -1, dtype=torch.long, device=idx.device)
    pos[idx] = torch.arange(len(idx), device=idx.device)
    return pos


def _needed_nodes(edges: dict[EdgeTypeTuple, torch.Tensor], num_nodes: dict[str, int],
                  node_type: str, num_seeds: int, num_layers: int) -> list[dict[str, torch.Tensor]]:
    """``needed[l]``: per node type, the sorted indices of the nodes whose state *before* layer
    ``l`` is read (``needed[num_layers]``: the seeds, the first ``num_seeds`` nodes of
    ``node_type``). Before a layer, a node is needed when it is needed after it (the skip term)
    or is the source of an edge into such a node."""
    device = next(iter(edges.values())).device if edges else torch.device("cpu")
    need = {node_type: torch.arange(num_seeds, device=device)}
    out = [need]
    for _ in range(num_layers):
        parts = {nt: [idx] for nt, idx in need.items()}
        for (src, _, dst), ei in edges.items():
            if dst in need:
                member = torch.zeros(num_nodes[dst], dtype=torch.bool, device=device)
                member[need[dst]] = True
                parts.setdefault(src, []).append(ei[0][member[ei[1]]])
        need = {nt: torch.unique(torch.cat(p)) for nt, p in parts.items()}
        out.append(need)
    out.reverse()
    return out
