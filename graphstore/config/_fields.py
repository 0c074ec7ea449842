"""The value types of the config models and their base class (internal to :mod:`graphstore.config`).

Each type is an ``Annotated`` pydantic type made of three things: a coercer (``as_*``, a plain
``value -> value`` function that raises :class:`Bad` with the house message, e.g. ``"is not an
integer"``), the JSON Schema editors see (which accepts the same string forms), and a
:class:`Label` naming the type in docs/configs.md. Accepted string forms (from the seed's
all-strings style): ``"1"`` for ints, ``"0.1"`` for floats, ``"true"`` / ``"false"`` for bools. A
bool is never an int; an int is accepted where a float is expected.

:class:`Model` is the base of every config section: frozen, unknown keys forbidden, YAML keys as
aliases (Python code uses the field names), and null meaning "the default" for every key.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Callable, ClassVar, Iterable, Mapping

from pydantic import (
    BaseModel, ConfigDict, PlainSerializer, PlainValidator, PrivateAttr, ValidationError, WithJsonSchema,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

Coerce = Callable[[Any], Any]

INT_RE = re.compile(r"^[+-]?\d+$")
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
"""Node types and relations become file and table names: a letter, then letters, digits, ``_``."""
SQL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""BigQuery dataset names and table prefixes (never interpolate anything else into SQL)."""
GCP_PROJECT_RE = re.compile(r"^(?:[a-z][a-z0-9.-]*:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
PY_PATH_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")
EDGE_TYPE_SEP = "__"

_INT_STR = {"type": "string", "pattern": INT_RE.pattern}
_FLOAT_STR = {"type": "string", "pattern": r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"}
_BOOL_STR = {"type": "string", "pattern": r"^\s*([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])\s*$"}


class Bad(ValueError):
    """A coercer's complaint; the message follows the value's repr, e.g. ``"is not an integer"``."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class Label:
    """How docs/configs.md names a type (``Annotated`` metadata), e.g. ``int >= 1``."""

    text: str


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def freeze_value(value: Any) -> Any:
    """Deep-freeze a YAML value: mappings -> ``MappingProxyType``, lists -> tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze_value(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze_value(v) for v in value)
    return value


def thaw_value(value: Any) -> Any:
    """Inverse of :func:`freeze_value`: plain dicts and lists, ready for ``yaml.safe_dump``."""
    if isinstance(value, Mapping):
        return {k: thaw_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw_value(v) for v in value]
    return value


# ---- coercers -------------------------------------------------------------------------------

def as_int(min_value: int | None = None, max_value: int | None = None, unit: str = "") -> Coerce:
    """An int (or a string like ``"1"``), never a bool; within ``[min_value, max_value]`` where
    given (``unit`` names the unit in the message, e.g. ``" (MB)"``)."""
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


def as_seconds(v: Any) -> float:
    """A finite float > 0."""
    v = as_float(v)
    if v <= 0:
        raise Bad("must be > 0 seconds")
    return v


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
    """A node type or relation name (see :data:`NAME_RE`)."""
    if not isinstance(v, str):
        raise Bad(f"must be a string, got {type(v).__name__}")
    if not NAME_RE.match(v):
        raise Bad("must match ^[A-Za-z][A-Za-z0-9_]*$ (it becomes a file and table name)")
    if EDGE_TYPE_SEP in v:
        raise Bad(f"must not contain {EDGE_TYPE_SEP!r} (it separates the parts of an edge type name)")
    return v


def as_match(pattern: re.Pattern[str], what: str) -> Coerce:
    """A string matching ``pattern``; ``what`` names the rule in the message."""
    def coerce(v: Any) -> str:
        v = as_str(v)
        if not pattern.match(v):
            raise Bad(f"is not a valid {what} (must match {pattern.pattern})")
        return v
    return coerce


def as_literal(*choices: str) -> Coerce:
    """One of ``choices``."""
    def coerce(v: Any) -> str:
        if v not in choices:
            raise Bad(f"is not one of {', '.join(map(repr, choices))}{did_you_mean(v, choices)}")
        return v
    return coerce


_SCALARS = (str, int, float, bool, type(None))


def free_problems(value: Any, loc: tuple[Any, ...] = ()) -> Iterable[tuple[tuple[Any, ...], Any, str]]:
    """``(loc, value, why)`` for each part of a free-form map that YAML cannot hold as a config value."""
    if isinstance(value, Mapping):
        for key, sub in value.items():
            if not isinstance(key, str):
                yield (*loc, str(key)), key, "is not a string key (quote it)"
            yield from free_problems(sub, (*loc, str(key)))
    elif isinstance(value, (list, tuple)):
        for i, sub in enumerate(value):
            yield from free_problems(sub, (*loc, i))
    elif not isinstance(value, _SCALARS):
        yield loc, value, f"is a {type(value).__name__}; use a string, number, bool, list or mapping"


# ---- problems raised from validators ---------------------------------------------------------

class Issues:
    """Problems a validator found, each at its own location (relative to the value validated);
    :meth:`raise_any` raises them together, and pydantic places them under the value's key."""

    def __init__(self) -> None:
        self.details: list[InitErrorDetails] = []

    def add(self, loc: tuple[Any, ...], value: Any, message: str, *, missing: bool = False) -> None:
        """A problem whose whole ``message`` is given (it quotes ``value`` itself, if at all)."""
        error = PydanticCustomError("config", "{message}", {"message": message, "missing": missing})
        self.details.append(InitErrorDetails(type=error, loc=loc, input=value))

    def bad(self, loc: tuple[Any, ...], value: Any, why: str) -> None:
        """The problem ``<value> <why>``, like a coercer's :class:`Bad`."""
        self.details.append(InitErrorDetails(type="value_error", loc=loc, input=value,
                                             ctx={"error": Bad(why)}))

    def member(self, loc: tuple[Any, ...], value: Any, declared: Iterable[Any] | None, what: str) -> bool:
        """Report ``value`` unless it is in ``declared`` (skipped, True, when that is unknown)."""
        names = None if declared is None else [str(d) for d in declared]
        if names is None or str(value) in names:
            return True
        hint = did_you_mean(value, names) or f" (declared: {', '.join(names)})"
        self.bad(loc, str(value), f"is not a declared {what}{hint}")
        return False

    def raise_any(self) -> None:
        if self.details:
            raise ValidationError.from_exception_data("config", self.details)


# ---- the types ------------------------------------------------------------------------------

def typed(base: Any, coerce: Coerce, schema: dict[str, Any], label: str) -> Any:
    """``Annotated[base]`` validated by ``coerce`` alone, with its JSON Schema and docs label."""
    return Annotated[base, PlainValidator(coerce), WithJsonSchema(schema), Label(label)]


def Int(min_value: int | None = None, max_value: int | None = None, unit: str = "") -> Any:  # noqa: N802
    """An int within the bounds; ``"7"`` is accepted too."""
    schema: dict[str, Any] = {"type": "integer"}
    label = "int"
    if min_value is not None:
        schema["minimum"] = min_value
        label = f"int >= {min_value}"
    if max_value is not None:
        schema["maximum"] = max_value
        label = f"int, {min_value} to {max_value}" if min_value is not None else f"int <= {max_value}"
    return typed(int, as_int(min_value, max_value, unit), {"anyOf": [schema, _INT_STR]}, label)


def Choice(*choices: str) -> Any:  # noqa: N802
    """One of ``choices`` (a did-you-mean otherwise)."""
    return typed(str, as_literal(*choices), {"enum": list(choices)},
                 " \\| ".join(f"`{c}`" for c in choices))


def Pattern(pattern: re.Pattern[str], what: str, label: str | None = None) -> Any:  # noqa: N802
    """A string matching ``pattern``; ``what`` names the rule in the message."""
    return typed(str, as_match(pattern, what), {"type": "string", "pattern": pattern.pattern},
                 label or what)


Float = typed(float, as_float, {"anyOf": [{"type": "number"}, _FLOAT_STR]}, "float")
Seconds = typed(float, as_seconds, {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, _FLOAT_STR]},
                "float > 0")
Bool = typed(bool, as_bool, {"anyOf": [{"type": "boolean"}, _BOOL_STR]}, "bool")
Str = typed(str, as_str, {"type": "string", "minLength": 1}, "str")
Name = typed(str, as_name, {"type": "string", "pattern": NAME_RE.pattern, "not": {"pattern": "__"}},
             "name")
SqlName = Pattern(SQL_NAME_RE, "BigQuery name")
GcpProject = Pattern(GCP_PROJECT_RE, "GCP project id")
PyPath = Pattern(PY_PATH_RE, "dotted Python path")
Version = Pattern(VERSION_RE, "version string", f"str (`{VERSION_RE.pattern}`)")
Email = Pattern(EMAIL_RE, "email address", "email")


def as_free_map(v: Any) -> Mapping[str, Any]:
    """A free-form map, checked (every bad part reported) and frozen."""
    if not isinstance(v, Mapping):
        raise Bad("must be a mapping")
    issues = Issues()
    for loc, value, why in free_problems(v):
        issues.bad(loc, value, why)
    issues.raise_any()
    return freeze_value(v)


FreeMap = Annotated[Mapping[str, Any], PlainValidator(as_free_map), PlainSerializer(thaw_value),
                    WithJsonSchema({"type": "object"}), Label("map")]
"""A free-form argument map (str keys; scalar, list or mapping values), read-only once loaded."""


# ---- the base model -------------------------------------------------------------------------

class Model(BaseModel):
    """A config section: frozen, unknown keys forbidden, YAML keys as aliases, null = default.

    ``doc_name`` names the section's type in docs/configs.md (``"edge type"``); a model with
    ``doc_inline`` is listed inside its parent's table as dotted keys; ``doc_defaults`` replaces
    the default shown for a field (``"derived"``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)

    doc_name: ClassVar[str] = "map"
    doc_inline: ClassVar[bool] = False
    doc_defaults: ClassVar[Mapping[str, str]] = MappingProxyType({})

    @classmethod
    def yaml_keys(cls) -> dict[str, str]:
        """YAML key -> field name, in declaration order."""
        return {f.alias or name: name for name, f in cls.model_fields.items()}

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        """Drop keys set to null (a required key is then reported missing); refuse non-mappings."""
        if data is None:
            return {}
        if isinstance(data, BaseModel):
            return data
        if not isinstance(data, Mapping):
            raise Bad(f"must be a mapping with keys: {', '.join(cls.yaml_keys())}")
        keys = cls.yaml_keys()
        return {k: v for k, v in data.items() if not (v is None and k in keys)}

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self).model_fields:  # as a frozen dataclass does
            raise AttributeError(f"{type(self).__name__} is frozen: cannot assign to field {name!r}")
        super().__setattr__(name, value)

    def to_dict(self) -> dict[str, Any]:
        """The YAML spelling, fully resolved; loading it back gives an equal object."""
        return self.model_dump(mode="json", by_alias=True)


class FileModel(Model):
    """A whole config file; ``source_path`` (the file it was loaded from) is excluded from equality."""

    _source_path: str = PrivateAttr("")

    @property
    def source_path(self) -> str:
        return self._source_path

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, k) == getattr(other, k)
                                                 for k in type(self).model_fields)

    __hash__ = None  # type: ignore[assignment]
