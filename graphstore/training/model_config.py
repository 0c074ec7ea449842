"""The model's configuration: what a checkpoint stores to rebuild the model (torch-free)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

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
    id_embedding_counts: dict[str, int] = field(default_factory=dict)  # node type -> rows

    def to_dict(self) -> dict:
        d = asdict(self)
        d["edge_types"] = [list(e) for e in self.edge_types]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        return cls(**{**d, "edge_types": tuple(tuple(e) for e in d["edge_types"])})
