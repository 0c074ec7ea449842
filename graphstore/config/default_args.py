"""Arguments of the default trainer and inferencer, typed and checked in one place.

``trainerConfig.trainerArgs`` is read into :class:`TrainerArgs` when ``trainerConfig.command`` runs
the default trainer (``python -m components.train``), ``inferencerConfig.inferencerArgs`` into
:class:`InferencerArgs` when ``inferencerConfig.command`` runs the default inferencer
(``python -m components.infer``). The config loader runs :func:`arg_problems` at config load, so
``python -m pipeline validate`` reports every bad key with the file and dotted key; the stages call
``from_mapping`` again on the frozen config (same rules).

The rules come from each dataclass field: its type annotation (``int``, ``float``, ``bool``,
``str``, a ``Literal`` of choices, ``tuple[int, ...]``, ``tuple[<Literal>, ...]``: a list of
distinct choices, possibly empty; ``tuple[str, ...]``: a list of distinct non-empty strings,
possibly empty; ``| None`` allows null) and an optional ``metadata={"min": m}`` (numbers default
to >= 0; ``tuple[int, ...]`` lists need at least one item) and ``metadata={"max": m}`` (floats).
Every default keeps the trainer's behaviour of before the option existed.
No torch import here: :mod:`graphstore.config` and ``pipeline/`` import this module.
"""

from __future__ import annotations

import math
import shlex
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Mapping, TypeVar

from graphstore.runtime.errors import UsageError, show

DEFAULT_TRAINER_MODULE = "components.train"
DEFAULT_INFERENCER_MODULE = "components.infer"

A = TypeVar("A")

BaselineName = Literal["popularity", "bpr", "lightgcn"]
"""A baseline the default trainer can score beside the model (graphstore.training.baselines)."""
BASELINES: tuple[BaselineName, ...] = typing.get_args(BaselineName)


def runs_module(command: str, module: str) -> bool:
    """True when the configured ``command`` runs ``python -m <module>`` (with any interpreter)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    return any(a == "-m" and b == module for a, b in zip(argv, argv[1:]))


DEFAULT_NUM_NEIGHBORS = (10, 5)
"""The default trainer's fan-out per layer (``trainerArgs.num_neighbors``); inference samples with
the checkpoint's own unless ``inferencerArgs.num_neighbors`` says otherwise."""


@dataclass(frozen=True, kw_only=True)
class TrainerArgs:
    """``trainerConfig.trainerArgs`` of the default trainer."""

    num_neighbors: tuple[int, ...] = field(default=DEFAULT_NUM_NEIGHBORS, metadata={"min": -1})  # -1: all
    batch_size: int = field(default=256, metadata={"min": 1})  # (anchor, positive) pairs per step and rank
    num_random_negatives: int = 256  # random label nodes per step and rank; 0: none
    in_batch_negatives: bool = True  # the batch's other positives are negatives of each pair too
    hard_negatives_per_anchor: int = 4  # up to this many known negatives of each distinct anchor
    # of a batch join that anchor's negatives (supervision types with hardNegativeEdgeTypes only,
    # drawn anew every batch; 0: not used)
    lr: float = 0.005
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"  # decay to 0 at max_steps
    warmup_steps: int = 0  # linear warm-up from 0 to lr over these first steps
    weight_decay: float = 0.0  # AdamW's decoupled weight decay, every parameter
    max_steps: int = field(default=300, metadata={"min": 1})
    max_epochs: int = 0  # also stop after this many epochs of the first supervision type; 0: off
    val_every_steps: int = field(default=100, metadata={"min": 1})
    early_stopping_patience: int = 0  # stop after this many validations without a better val MRR
    # (the first supervision type's); the best step's weights are checkpointed and tested; 0: off
    log_every_steps: int = 20
    eval_candidates: int = field(default=500, metadata={"min": 1})  # shared random candidates per pair
    full_ranking_k: int = field(default=20, metadata={"min": 0})  # test recall@k / NDCG@k over
    # every label node (training pairs masked), besides the sampled ranking; 0: off
    full_ranking_max_labels: int = field(default=100_000, metadata={"min": 1})  # larger label
    # types skip the full ranking (each test anchor is scored against every label node)
    hidden_dim: int = 64
    out_dim: int = 64
    num_layers: int = field(default=2, metadata={"min": 1})
    dropout: float = field(default=0.0, metadata={"max": 0.9})  # between layers, training only
    id_embeddings: tuple[str, ...] = ()  # node types given a learned vector per node (hidden_dim)
    id_embedding_max_nodes: int = field(default=1_000_000, metadata={"min": 1})  # per such type
    decoder: Literal["dot", "cosine"] = "dot"
    loss: Literal["retrieval", "bpr"] = "retrieval"
    temperature: float = 1.0
    logq_correction: bool = False  # subtract log(expected draws) of each candidate (losses.py)
    seed: int = 0  # model initialisation, the evaluation candidates, the baselines
    baselines: tuple[BaselineName, ...] = BASELINES  # scored beside the model; [] none
    tensorboard: bool = False  # TensorBoard event files into <run-dir>/tensorboard/
    sampling_workers: int | None = None  # every loader's num_workers; None: the mode's default

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], where: str = "trainerConfig.trainerArgs") -> TrainerArgs:
        """Typed args; UsageError listing every problem (``where.key: ...``) otherwise."""
        return parse_args(cls, raw, where)


@dataclass(frozen=True, kw_only=True)
class InferencerArgs:
    """``inferencerConfig.inferencerArgs`` of the default inferencer."""

    num_neighbors: tuple[int, ...] | None = field(default=None, metadata={"min": -1})  # None: as trained
    log_every_batches: int = 20
    checkpoint: str | None = None  # URI of model.pt; None: <run-dir>/checkpoint/model.pt
    sampling_workers: int | None = None  # the loader's num_workers; None: the mode's default

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any],
                     where: str = "inferencerConfig.inferencerArgs") -> InferencerArgs:
        """Typed args; UsageError listing every problem (``where.key: ...``) otherwise."""
        return parse_args(cls, raw, where)


@dataclass(frozen=True, slots=True)
class ArgProblem:
    """One bad argument: its ``key``, the ``value`` and ``why`` it is wrong (``why`` follows the
    value, e.g. ``is not a non-empty list of ints >= -1``); ``unknown``: the key is not a field."""

    key: str
    value: Any
    why: str
    unknown: bool = False


def _check(kind: Any, value: Any, minimum: float, maximum: float = math.inf) -> str | None:
    """Why ``value`` does not fit the annotation ``kind`` (see the module doc), or None."""
    origin, params = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in params:
            return None
        kind = next(p for p in params if p is not type(None))
        origin, params = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return None if value in params else f"is not one of {', '.join(map(repr, params))}"
    if origin is tuple and typing.get_origin(params[0]) is Literal:  # a list of choices, may be empty
        choices = typing.get_args(params[0])
        ok = isinstance(value, (list, tuple)) and all(v in choices for v in value) \
            and len(set(value)) == len(value)
        return None if ok else f"is not a list of distinct items of {', '.join(map(repr, choices))}"
    if origin is tuple and params[0] is str:  # a list of distinct names, may be empty
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value) \
            and len(set(value)) == len(value)
        return None if ok else "is not a list of distinct non-empty strings"
    if origin is tuple:
        ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value)
        return None if ok else f"is not a non-empty list of ints >= {minimum:g}"
    if kind is bool or kind is str:
        return None if isinstance(value, kind) else f"is not a {kind.__name__}"
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        return None if ok else f"is not an int >= {minimum:g}"
    if kind is float:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value) and minimum <= value <= maximum)
        upper = f" and <= {maximum:g}" if math.isfinite(maximum) else ""
        return None if ok else f"is not a finite number >= {minimum:g}{upper}"
    raise TypeError(f"args field type {kind!r} has no rule")  # a bug in the args class


def arg_problems(cls: type, raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ArgProblem]]:
    """Check ``raw`` against the fields of the args dataclass ``cls``.

    Returns the converted values (lists -> tuples, ints -> floats for float fields) and every
    problem found: unknown keys (``unknown=True``) and values that break a field's rule.
    """
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    problems: list[ArgProblem] = []
    for key, value in raw.items():
        f = by_name.get(key) if isinstance(key, str) else None
        if f is None:
            problems.append(ArgProblem(str(key), key, "is not a known key", unknown=True))
            continue
        why = _check(hints[key], value, f.metadata.get("min", 0), f.metadata.get("max", math.inf))
        if why:
            problems.append(ArgProblem(key, value, why))
        elif isinstance(value, list):
            values[key] = tuple(value)
        elif hints[key] is float:
            values[key] = float(value)
        else:
            values[key] = value
    return values, problems


def known_keys(cls: type) -> list[str]:
    """The keys an args dataclass accepts, in declaration order."""
    return [f.name for f in fields(cls)]


def parse_args(cls: type[A], raw: Mapping[str, Any], where: str) -> A:
    """``cls`` built from ``raw``; a one-line UsageError naming ``where.key`` for every problem."""
    values, problems = arg_problems(cls, raw)
    if problems:
        parts = [f"{where}.{p.key}: {show(p.value)} {p.why}" for p in problems]
        if any(p.unknown for p in problems):
            parts.append(f"known keys: {', '.join(known_keys(cls))}")
        raise UsageError("; ".join(parts))
    return cls(**values)
