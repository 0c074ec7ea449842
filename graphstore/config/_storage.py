"""``graphStoreStorageConfig`` -> :class:`~graphstore.config.schema.GraphStoreStorageConfig` (internal).

``splitter_kwargs`` may be a mapping or, as in the seed, a string holding a Python dict literal
(parsed with ``ast.literal_eval``, never ``eval``). The keys the splitter shares with the rest of the
config are checked: ``sampling_direction`` must equal ``sample_edge_direction``; ``num_val`` /
``num_test`` are fractions in [0, 1) summing below 1, or ints >= 0 (absolute counts). Other keys pass
through to the splitter untouched.
"""

from __future__ import annotations

import ast
from typing import Any, Mapping

from graphstore.config import _fields as F
from graphstore.config._fields import Bad, Collector, join
from graphstore.config.errors import clip
from graphstore.config.schema import GraphStoreStorageConfig, StorageArgs, freeze_value, thaw_value

STORAGE_ARG_KEYS = ("sample_edge_direction", "splitter_cls_path", "splitter_kwargs",
                    "num_server_sessions")


def as_split_amount(v: Any) -> int | float:
    """``num_val`` / ``num_test``: a fraction in [0, 1) or an absolute count (int >= 0)."""
    if isinstance(v, str):
        text = v.strip()
        v = F.as_int()(text) if F.INT_RE.match(text) else F.as_float(text)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Bad("is not a fraction in [0, 1) or a count >= 0")
    if isinstance(v, int):
        if v < 0:
            raise Bad("must be >= 0 (an int is an absolute count)")
        return v
    if not 0.0 <= v < 1.0:
        raise Bad("must be in [0, 1) (a float is a fraction; use an int for an absolute count)")
    return v


_SPLITTER_TYPED: Mapping[str, F.Coerce] = {
    "sampling_direction": F.as_literal("in", "out"),
    "num_val": as_split_amount,
    "num_test": as_split_amount,
    "should_convert_labels_to_edges": F.as_bool,
}


def _splitter_kwargs(col: Collector, path: str, raw: Any, direction: str | None) -> Any:
    if isinstance(raw, str):
        try:
            raw = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError) as exc:
            col.bad(path, raw, f"is not a Python dict literal ({type(exc).__name__}: {clip(str(exc))})")
            return None
        if not isinstance(raw, dict):
            col.bad(path, raw, "must be a mapping (or a string holding a Python dict literal)")
            return None
    kwargs = F.free_mapping(col, path, raw)
    if kwargs is None:
        return None
    typed = dict(kwargs)
    for key, coerce in _SPLITTER_TYPED.items():
        if key in typed:
            typed[key] = F.take(col, kwargs, path, key, coerce)
    sd = typed.get("sampling_direction")
    if sd is not None and direction is not None and sd != direction:
        col.bad(join(path, "sampling_direction"), sd,
                f"differs from sample_edge_direction {direction!r}; they must be equal")
    fractions = [typed[k] for k in ("num_val", "num_test") if isinstance(typed.get(k), float)]
    if sum(fractions) >= 1.0:
        col.bad(path, {k: typed[k] for k in ("num_val", "num_test") if k in typed},
                f"num_val + num_test = {sum(fractions):g} must be < 1 (nothing left to train on)")
    return freeze_value(typed)


def read_storage(col: Collector, parent: Mapping[str, Any], parent_path: str, *,
                 derived_sessions: int | None, derivation: str) -> GraphStoreStorageConfig | None:
    """Read ``parent.graphStoreStorageConfig``; fill ``num_server_sessions`` with ``derived_sessions``.

    A user value contradicting the derivation is a problem (``derivation`` explains the rule).
    """
    path = join(parent_path, "graphStoreStorageConfig")
    gs = F.take_section(col, parent, parent_path, "graphStoreStorageConfig",
                        ("command", "storageArgs"), required=True)
    if gs is None:
        return None
    command = F.take(col, gs, path, "command", F.as_str)
    sa_path = join(path, "storageArgs")
    sa = F.take_section(col, gs, path, "storageArgs", STORAGE_ARG_KEYS)
    if sa is None:
        return None
    direction = F.take(col, sa, sa_path, "sample_edge_direction", F.as_literal("in", "out"), "in")
    cls_path = F.take(col, sa, sa_path, "splitter_cls_path", F.optional(F.as_py_path), None)
    kwargs = freeze_value({})
    if sa.get("splitter_kwargs") is not None:
        kwargs = _splitter_kwargs(col, join(sa_path, "splitter_kwargs"), sa["splitter_kwargs"],
                                  direction)
    if kwargs and sa.get("splitter_cls_path") is None:
        col.bad(join(sa_path, "splitter_kwargs"), thaw_value(kwargs),
                "is set but splitter_cls_path is not; set the splitter class too")
    sessions = F.take(col, sa, sa_path, "num_server_sessions", F.optional(F.as_int(1)), None)
    if sessions is not None and derived_sessions is not None and sessions != derived_sessions:
        col.bad(join(sa_path, "num_server_sessions"), sessions,
                f"contradicts the derived value {derived_sessions} ({derivation}); remove the key")
    args = StorageArgs(sample_edge_direction=direction, splitter_cls_path=cls_path,
                       splitter_kwargs=kwargs, num_server_sessions=derived_sessions)
    return GraphStoreStorageConfig(command=command, storage_args=args)
