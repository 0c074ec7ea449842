"""``trainerConfig.trainerArgs`` of the default trainer, typed and checked in one place."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal, Mapping

from graphstore.errors import UsageError


@dataclass(frozen=True, kw_only=True)
class TrainerArgs:
    num_neighbors: tuple[int, ...] = (10, 5)
    batch_size: int = 256  # (anchor, positive) pairs per step and rank
    num_random_negatives: int = 256  # random label nodes per step and rank
    lr: float = 0.005
    weight_decay: float = 0.0
    max_steps: int = 300
    val_every_steps: int = 100
    log_every_steps: int = 20
    eval_candidates: int = 500  # shared random candidates per evaluated pair (see metrics.py)
    hidden_dim: int = 64
    out_dim: int = 64
    num_layers: int = 2
    decoder: Literal["dot", "cosine"] = "dot"
    loss: Literal["retrieval", "bpr"] = "retrieval"
    temperature: float = 1.0
    seed: int = 0

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], where: str = "trainerConfig.trainerArgs") -> "TrainerArgs":
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
        values: dict[str, Any] = {}
        for key, value in raw.items():
            default = getattr(cls(), key)
            if isinstance(default, tuple):
                if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
                    raise UsageError(f"{where}.{key}: expected a list of ints, got {value!r}")
                value = tuple(value)
            elif isinstance(default, bool) or isinstance(default, str):
                if not isinstance(value, type(default)):
                    raise UsageError(f"{where}.{key}: expected {type(default).__name__}, got {value!r}")
            elif isinstance(default, int):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise UsageError(f"{where}.{key}: expected an int >= 0, got {value!r}")
            elif isinstance(default, float):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise UsageError(f"{where}.{key}: expected a number >= 0, got {value!r}")
                value = float(value)
            values[key] = value
        args = cls(**values)
        if args.decoder not in ("dot", "cosine"):
            raise UsageError(f"{where}.decoder: 'dot' or 'cosine', got {args.decoder!r}")
        if args.loss not in ("retrieval", "bpr"):
            raise UsageError(f"{where}.loss: 'retrieval' or 'bpr', got {args.loss!r}")
        if args.batch_size < 1 or args.max_steps < 1 or args.eval_candidates < 1:
            raise UsageError(f"{where}: batch_size, max_steps and eval_candidates must be >= 1")
        return args
