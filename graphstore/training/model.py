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

from graphstore.errors import UsageError

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
        h = {}
        for nt, n in num_nodes_dict.items():
            if nt in self.inputs and nt in x_dict:
                h[nt] = self.inputs[nt](x_dict[nt])
            else:
                h[nt] = self.type_bias[nt].expand(n, -1) if nt in self.type_bias else \
                    torch.zeros(n, self.cfg.hidden_dim, device=self.skips[0].weight.device)
            if nt in self.id_emb:
                if node_ids_dict is None or nt not in node_ids_dict:
                    raise ValueError(f"the model has id embeddings for {nt!r}: pass node_ids_dict")
                h[nt] = h[nt] + self.id_emb[nt](node_ids_dict[nt].to(h[nt].device))
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
