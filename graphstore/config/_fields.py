"""Problem-collecting readers for raw YAML values (internal to :mod:`graphstore.config`).

Every reader takes a :class:`Collector`, a dotted path and the raw value; on a bad value it records a
:class:`~graphstore.config.errors.Problem` and returns ``None`` instead of raising, so one pass finds
every problem. Coercers (``as_*``) are plain ``value -> value`` functions that raise :class:`Bad`.
Accepted string forms (from the seed's all-strings style): ``"1"`` for ints, ``"0.1"`` for floats,
``"true"`` / ``"false"`` for bools. A bool is never an int; an int is accepted where a float is expected.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from graphstore.config.errors import Problem, clip, show
from graphstore.config.schema import SQL_NAME_RE, EdgeType, freeze_value, name_error

Coerce = Callable[[Any], Any]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default marker: the key must be present."""

INT_RE = re.compile(r"^[+-]?\d+$")
GCP_PROJECT_RE = re.compile(r"^(?:[a-z][a-z0-9.-]*:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
PY_PATH_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class Bad(Exception):
    """A coercer's complaint; the message follows the value's repr, e.g. ``"is not an integer"``."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Collector:
    """Collects the problems of one config file. ``override_notes`` maps a dotted path set by a
    ``--set`` override to a note appended to problems at or below that path."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []
        self.override_notes: dict[str, str] = {}

    def add(self, path: str, value: Any, message: str, *, missing: bool = False,
            line: int | None = None) -> None:
        """Record a problem; ``value`` is stored as its (cut) repr unless ``missing``.

        Any user value that ``message`` quotes must be quoted with :func:`show` (cut to a few dozen
        characters), like :meth:`bad` does.
        """
        for opath, note in self.override_notes.items():
            if path == opath or path.startswith((opath + ".", opath + "[")):
                message = f"{message} ({note})"
                break
        self.problems.append(Problem(file=self.file, path=path, value=None if missing else show(value),
                                     message=message, line=line))

    def bad(self, path: str, value: Any, why: str) -> None:
        """Record ``<show(value)> <why>`` at ``path``."""
        self.add(path, value, f"{show(value)} {why}")


def join(path: str, key: object) -> str:
    """``join("a.b", "c") == "a.b.c"``; ``join("", "c") == "c"``."""
    return f"{path}.{key}" if path else str(key)


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def section(col: Collector, path: str, raw: Any, allowed: Sequence[str]) -> dict[str, Any] | None:
    """Check that ``raw`` is a mapping with only ``allowed`` keys (null counts as empty).

    Unknown keys are reported with a did-you-mean; returns ``None`` when ``raw`` is not a mapping.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        col.bad(path or "(top level)", raw, f"must be a mapping with keys: {', '.join(allowed)}")
        return None
    for key in raw:
        if key not in allowed:
            hint = did_you_mean(key, allowed) or f" (allowed: {', '.join(allowed)})"
            col.add(join(path, clip(str(key))), key, f"unknown key {show(key)}{hint}")
    return dict(raw)


def take(col: Collector, m: Mapping[str, Any], path: str, key: str, coerce: Coerce,
         default: Any = REQUIRED) -> Any:
    """Read and coerce ``m[key]``; a missing or null key gives ``default`` or a problem if required."""
    p = join(path, key)
    if m.get(key) is None:
        if default is REQUIRED:
            col.add(p, None, f"missing required key {key!r}" if key not in m
                    else f"{key!r} is null but a value is required", missing=True)
            return None
        return default
    value = m[key]
    try:
        return coerce(value)
    except Bad as exc:
        col.bad(p, value, exc.why)
        return None


def take_section(col: Collector, m: Mapping[str, Any], path: str, key: str, allowed: Sequence[str],
                 *, required: bool = False) -> dict[str, Any] | None:
    """Read a nested mapping; absent or null gives ``{}`` unless ``required``."""
    p = join(path, key)
    if m.get(key) is None:
        if required:
            col.add(p, None, f"missing required key {key!r}", missing=True)
            return None
        return {}
    return section(col, p, m[key], allowed)


def take_items(col: Collector, m: Mapping[str, Any], path: str, key: str,
               *, required: bool = False) -> list[tuple[str, Any]] | None:
    """Read a list as ``(item_path, item)`` pairs; absent or null gives ``[]`` unless ``required``."""
    p = join(path, key)
    if m.get(key) is None:
        if required:
            col.add(p, None, f"missing required key {key!r}", missing=True)
            return None
        return []
    value = m[key]
    if not isinstance(value, list):
        col.bad(p, value, "must be a list")
        return None
    return [(f"{p}[{i}]", item) for i, item in enumerate(value)]


def take_tuple(col: Collector, m: Mapping[str, Any], path: str, key: str, coerce: Coerce,
               default: Any = REQUIRED, *, unique: bool = True) -> tuple[Any, ...] | None:
    """Read a list of coerced items as a tuple, reporting each bad item and each duplicate.

    ``None`` when an item could not be coerced; a duplicate is reported and dropped.
    """
    if key not in m or m[key] is None:
        if default is REQUIRED:
            col.add(join(path, key), None, f"missing required key {key!r}", missing=True)
            return None
        return default
    items = take_items(col, m, path, key)
    if items is None:
        return None
    out: list[Any] = []
    ok = True
    for item_path, item in items:
        try:
            value = coerce(item)
        except Bad as exc:
            col.bad(item_path, item, exc.why)
            ok = False
            continue
        if unique and value in out:
            col.bad(item_path, item, "is listed twice")
            continue
        out.append(value)
    return tuple(out) if ok else None


def check_member(col: Collector, path: str, value: Any, declared: Sequence[str] | None,
                 what: str) -> bool:
    """Report ``value`` unless it is in ``declared``; skip (True) when either is unknown (None)."""
    if declared is None or value is None or value in declared:
        return True
    hint = did_you_mean(value, declared) or f" (declared: {', '.join(declared)})"
    col.bad(path, value, f"is not a declared {what}{hint}")
    return False


EDGE_TYPE_KEYS = ("srcNodeType", "relation", "dstNodeType")


def read_edge_type(col: Collector, path: str, raw: Any,
                   node_types: Sequence[str] | None) -> EdgeType | None:
    """``{srcNodeType, relation, dstNodeType}`` -> EdgeType; endpoints checked against ``node_types``."""
    m = section(col, path, raw, EDGE_TYPE_KEYS)
    if m is None:
        return None
    src, rel, dst = (take(col, m, path, k, as_name) for k in EDGE_TYPE_KEYS)
    ok = check_member(col, join(path, "srcNodeType"), src, node_types, "node type")
    ok = check_member(col, join(path, "dstNodeType"), dst, node_types, "node type") and ok
    if src is None or rel is None or dst is None or not ok:
        return None
    return EdgeType(src_node_type=src, relation=rel, dst_node_type=dst)


def read_edge_types(col: Collector, m: Mapping[str, Any], path: str, key: str,
                    node_types: Sequence[str] | None,
                    *, required: bool) -> list[tuple[str, EdgeType]] | None:
    """A list of edge types as ``(item_path, EdgeType)``, each bad or duplicate item reported.

    ``None`` when any item is malformed, so that later checks against the list are skipped
    instead of repeating the same mistake as "not declared" elsewhere.
    """
    items = take_items(col, m, path, key, required=required)
    if items is None:
        return None
    out: list[tuple[str, EdgeType]] = []
    complete = True
    for item_path, raw in items:
        et = read_edge_type(col, item_path, raw, node_types)
        if et is None:
            complete = False
        elif et in [e for _, e in out]:
            col.bad(item_path, str(et), "is listed twice")
        else:
            out.append((item_path, et))
    return out if complete else None


# ---- coercers -------------------------------------------------------------------------------

def optional(coerce: Coerce) -> Coerce:
    """Accept null as ``None``, else apply ``coerce``."""
    return lambda v: None if v is None else coerce(v)


def as_int(min_value: int | None = None, max_value: int | None = None, unit: str = "") -> Coerce:
    """An int (or a string like ``"1"``), never a bool; within ``[min_value, max_value]`` where
    given (``unit`` names the unit in the message, e.g. ``"MB"``)."""
    def coerce(v: Any) -> int:
        if isinstance(v, bool):
            raise Bad("is not an integer (a boolean is not accepted here)")
        if isinstance(v, str) and INT_RE.match(v.strip()):
            v = int(v.strip())
        if not isinstance(v, int):
            raise Bad(f"is not an integer (got {type(v).__name__})")
        if max_value is not None and min_value is not None and not min_value <= v <= max_value:
            raise Bad(f"must be between {min_value} and {max_value}{unit}")
        if min_value is not None and v < min_value:
            raise Bad(f"must be >= {min_value}{unit}")
        if max_value is not None and v > max_value:
            raise Bad(f"must be <= {max_value}{unit}")
        return v
    return coerce


def as_float(v: Any) -> float:
    """A finite float; ints and strings like ``"0.1"`` are accepted, bools are not."""
    if isinstance(v, bool):
        raise Bad("is not a number (a boolean is not accepted here)")
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            raise Bad("is not a number") from None
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        raise Bad(f"is not a finite number (got {type(v).__name__})")
    return float(v)


def as_bool(v: Any) -> bool:
    """A bool, or the string ``"true"`` / ``"false"`` (any case)."""
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    if not isinstance(v, bool):
        raise Bad(f"is not a boolean (got {type(v).__name__})")
    return v


def as_str(v: Any) -> str:
    """A non-empty string."""
    if not isinstance(v, str):
        raise Bad(f"is not a string (got {type(v).__name__})")
    if not v.strip():
        raise Bad("must not be empty")
    return v


def as_name(v: Any) -> str:
    """A node type or relation name (see :data:`graphstore.config.schema.NAME_RE`)."""
    why = name_error(v)
    if why:
        raise Bad(why)
    return v


def as_match(pattern: re.Pattern[str], what: str) -> Coerce:
    """A string matching ``pattern``; ``what`` names the rule in the message."""
    def coerce(v: Any) -> str:
        v = as_str(v)
        if not pattern.match(v):
            raise Bad(f"is not a valid {what} (must match {pattern.pattern})")
        return v
    return coerce


as_sql_name = as_match(SQL_NAME_RE, "BigQuery name")
as_gcp_project = as_match(GCP_PROJECT_RE, "GCP project id")
as_py_path = as_match(PY_PATH_RE, "dotted Python path")
as_version = as_match(VERSION_RE, "version string")


def as_literal(*choices: str) -> Coerce:
    """One of ``choices``."""
    def coerce(v: Any) -> str:
        if v not in choices:
            raise Bad(f"is not one of {', '.join(map(repr, choices))}{did_you_mean(v, choices)}")
        return v
    return coerce


_SCALARS = (str, int, float, bool, type(None))


def free_mapping(col: Collector, path: str, raw: Any) -> Any:
    """Validate a free-form argument map (str keys; scalar, list or mapping values) and freeze it.

    Returns a read-only mapping, or ``None`` after recording problems.
    """
    if raw is None:
        return freeze_value({})
    if not isinstance(raw, Mapping):
        col.bad(path, raw, "must be a mapping")
        return None
    before = len(col.problems)
    _check_free(col, path, raw)
    return freeze_value(raw) if len(col.problems) == before else None


def _check_free(col: Collector, path: str, value: Any) -> None:
    if isinstance(value, Mapping):
        for key, sub in value.items():
            if not isinstance(key, str):
                col.bad(join(path, key), key, "is not a string key (quote it)")
            _check_free(col, join(path, key), sub)
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            _check_free(col, f"{path}[{i}]", sub)
    elif not isinstance(value, _SCALARS):
        col.bad(path, value, f"is a {type(value).__name__}; use a string, number, bool, list or mapping")
