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
    max_epochs: int = 0  # also stop after this many epochs of the first supervision type; 0: off
    val_every_steps: int = 100
    log_every_steps: int = 20
    eval_candidates: int = 500  # shared random candidates per evaluated pair (see metrics.py)
    hidden_dim: int = 64
    out_dim: int = 64
    num_layers: int = 2
    decoder: Literal["dot", "cosine"] = "dot"
    loss: Literal["retrieval", "bpr"] = "retrieval"
    temperature: float = 1.0
    logq_correction: bool = False  # subtract log(expected draws) of each candidate (losses.py)
    seed: int = 0

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], where: str = "trainerConfig.trainerArgs") -> "TrainerArgs":
        args = cls(**typed_values(cls, raw, where))
        if args.decoder not in ("dot", "cosine"):
            raise UsageError(f"{where}.decoder: 'dot' or 'cosine', got {args.decoder!r}")
        if args.loss not in ("retrieval", "bpr"):
            raise UsageError(f"{where}.loss: 'retrieval' or 'bpr', got {args.loss!r}")
        if args.batch_size < 1 or args.max_steps < 1 or args.eval_candidates < 1:
            raise UsageError(f"{where}: batch_size, max_steps and eval_candidates must be >= 1")
        return args


def typed_values(cls: type, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check ``raw`` against the fields of the dataclass ``cls`` (typed by their defaults).

    Unknown keys, wrong types and negative numbers raise UsageError naming ``where.key``;
    returns the values converted (lists -> tuples, ints -> floats where the default is a float).
    """
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    defaults = cls()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        default = getattr(defaults, key)
        if isinstance(default, tuple) or (default is None and isinstance(value, (list, tuple))):
            if not isinstance(value, (list, tuple)) or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v >= -1 for v in value):
                raise UsageError(f"{where}.{key}: expected a list of ints (-1 = all), got {value!r}")
            value = tuple(value)
        elif isinstance(default, (bool, str)):
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
    return values
