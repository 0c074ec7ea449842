"""The default link-prediction encoder: per-type input projection + heterogeneous GraphSAGE.

Homogeneous graphs are the one-node-type, one-edge-type case of the same model, so one code path
serves both. Messages flow along the batch's edge types (PyG convention, ``edge_index[0]`` sends to
``edge_index[1]``); a node type that receives no edge type in a layer keeps its previous state
(residual), so featureless or sink types still get an embedding. Output embeddings are
L2-normalised when ``decoder == "cosine"``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import HeteroConv, SAGEConv

EdgeTypeTuple = tuple[str, str, str]


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Everything needed to rebuild the model from a checkpoint."""

    node_feature_dims: dict[str, int]
    edge_types: tuple[EdgeTypeTuple, ...]
    hidden_dim: int = 64
    out_dim: int = 64
    num_layers: int = 2
    dropout: float = 0.0
    decoder: Literal["dot", "cosine"] = "dot"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["edge_types"] = [list(e) for e in self.edge_types]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        return cls(**{**d, "edge_types": tuple(tuple(e) for e in d["edge_types"])})


class LinkPredictionEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.inputs = nn.ModuleDict()
        self.type_bias = nn.ParameterDict()
        for nt, dim in cfg.node_feature_dims.items():
            if dim > 0:
                self.inputs[nt] = nn.Linear(dim, cfg.hidden_dim)
            else:  # featureless type: one learned vector, then message passing does the rest
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
                num_nodes_dict: dict[str, int]) -> dict[str, torch.Tensor]:
        h = {}
        for nt, n in num_nodes_dict.items():
            if nt in self.inputs and nt in x_dict:
                h[nt] = self.inputs[nt](x_dict[nt])
            else:
                h[nt] = self.type_bias[nt].expand(n, -1) if nt in self.type_bias else \
                    torch.zeros(n, self.cfg.hidden_dim, device=self.skips[0].weight.device)
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
