"""``graphStoreStorageConfig``: the storage side of a stage (internal module).

``splitter_kwargs`` may be a mapping or, as in the seed, a string holding a Python dict literal
(parsed with ``ast.literal_eval``, never ``eval``). The keys the splitter shares with the rest of the
config are checked: ``sampling_direction`` must equal ``sample_edge_direction``; ``num_val`` /
``num_test`` are fractions in [0, 1) summing below 1, or ints >= 0 (absolute counts). Other keys pass
through to the splitter untouched.
"""

from __future__ import annotations

import ast
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Mapping

from pydantic import (
    Field, PlainSerializer, PlainValidator, ValidationInfo, WithJsonSchema, field_validator, model_validator,
)

from graphstore.config._fields import (
    INT_RE, Bad, Choice, Coerce, Int, Issues, Label, Model, PyPath, Str, as_bool, as_float, as_free_map,
    as_int, as_literal, freeze_value, thaw_value,
)
from graphstore.runtime.errors import clip


def as_split_amount(v: Any) -> int | float:
    """``num_val`` / ``num_test``: a fraction in [0, 1) or an absolute count (int >= 0)."""
    if isinstance(v, str):
        text = v.strip()
        v = as_int()(text) if INT_RE.match(text) else as_float(text)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Bad("is not a fraction in [0, 1) or a count >= 0")
    if isinstance(v, int):
        if v < 0:
            raise Bad("must be >= 0 (an int is an absolute count)")
        return v
    if not 0.0 <= v < 1.0:
        raise Bad("must be in [0, 1) (a float is a fraction; use an int for an absolute count)")
    return v


_SPLITTER_TYPED: Mapping[str, Coerce] = MappingProxyType({
    "sampling_direction": as_literal("in", "out"),
    "num_val": as_split_amount,
    "num_test": as_split_amount,
    "should_convert_labels_to_edges": as_bool,
})


def as_splitter_kwargs(raw: Any) -> Mapping[str, Any]:
    """A mapping, or a string holding a Python dict literal; the shared keys typed and checked."""
    if isinstance(raw, str):
        try:
            raw = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError) as exc:
            raise Bad(f"is not a Python dict literal ({type(exc).__name__}: {clip(str(exc))})") from None
        if not isinstance(raw, dict):
            raise Bad("must be a mapping (or a string holding a Python dict literal)")
    typed = dict(as_free_map(raw))
    issues = Issues()
    for key, coerce in _SPLITTER_TYPED.items():
        if key in typed:
            try:
                typed[key] = coerce(typed[key])
            except Bad as exc:
                issues.bad((key,), typed[key], exc.why)
                typed[key] = None
    fractions = [typed[k] for k in ("num_val", "num_test") if isinstance(typed.get(k), float)]
    if sum(fractions) >= 1.0:
        issues.bad((), {k: typed[k] for k in ("num_val", "num_test") if k in typed},
                   f"num_val + num_test = {sum(fractions):g} must be < 1 (nothing left to train on)")
    issues.raise_any()
    return freeze_value(typed)


SplitterKwargs = Annotated[Mapping[str, Any], PlainValidator(as_splitter_kwargs), PlainSerializer(thaw_value),
                           WithJsonSchema({"anyOf": [{"type": "object"}, {"type": "string"}]}),
                           Label("map, or str with a Python dict literal")]


class StorageArgs(Model):
    """Arguments of the storage command. ``num_server_sessions`` is always filled in (derived)."""

    doc_inline: ClassVar[bool] = True
    doc_defaults: ClassVar[dict[str, str]] = {"num_server_sessions": "derived"}

    sample_edge_direction: Choice("in", "out") = Field("in", description=(
        "Direction neighbours are sampled along. Must be equal in `trainerConfig` and `inferencerConfig`."))
    splitter_cls_path: PyPath | None = Field(None, description=(
        "Splitter class run on storage to create train / val / test splits (training). "
        "`graphstore.DistNodeAnchorLinkSplitter` splits the anchors (an anchor's supervision edges all go "
        "to its split: cold start for val/test anchors); `graphstore.DistEdgeLinkSplitter` splits the "
        "supervision edges (an anchor keeps its training edges in the graph and is evaluated on its "
        "held-out ones: warm start, the usual recommendation protocol). Both take the same "
        "`splitter_kwargs`; for the edge splitter an integer `num_val` / `num_test` counts edges."))
    splitter_kwargs: SplitterKwargs = Field(default_factory=lambda: MappingProxyType({}), description=(
        "Keyword arguments of the splitter; needs `splitter_cls_path`. Checked keys: `sampling_direction` "
        "(`in`/`out`, must equal `sample_edge_direction`), `num_val` and `num_test` (a float in [0, 1) is "
        "a fraction, an int >= 0 an absolute count; the fractions must sum below 1), "
        "`should_convert_labels_to_edges` (bool). Other keys pass through."))
    num_server_sessions: Int(1) | None = Field(None, description=(
        "How many compute process groups connect over the job's life: **1 for the trainer**, "
        "**`len(inferencerConfig.nodeTypes)` for the inferencer** (one spawned process group per node "
        "type). Leave it out; a value that differs from the derivation is a problem."))

    @field_validator("splitter_kwargs")
    @classmethod
    def _same_direction(cls, kwargs: Mapping[str, Any], info: ValidationInfo) -> Mapping[str, Any]:
        direction, sampling = info.data.get("sample_edge_direction"), kwargs.get("sampling_direction")
        if direction is not None and sampling is not None and sampling != direction:
            issues = Issues()
            issues.bad(("sampling_direction",), sampling,
                       f"differs from sample_edge_direction {direction!r}; they must be equal")
            issues.raise_any()
        return kwargs

    @model_validator(mode="after")
    def _splitter_class(self) -> StorageArgs:
        if self.splitter_kwargs and self.splitter_cls_path is None:
            issues = Issues()
            issues.bad(("splitter_kwargs",), thaw_value(self.splitter_kwargs),
                       "is set but splitter_cls_path is not; set the splitter class too")
            issues.raise_any()
        return self


class GraphStoreStorageConfig(Model):
    """The storage side of one stage: the command each storage process runs, and its arguments."""

    doc_name: ClassVar[str] = "storage config"

    command: Str = Field(description="Command each storage process runs.")
    storage_args: StorageArgs = Field(default_factory=StorageArgs, alias="storageArgs")
