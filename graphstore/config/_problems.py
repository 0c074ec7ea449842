"""Collecting a config file's problems, and pydantic's errors as our problems (internal).

A :class:`Collector` gathers the :class:`~graphstore.config.errors.Problem` s of one file. Pydantic
reports every error of a model at once, each with its location (YAML keys and list indexes);
:func:`add_validation_errors` turns each into one problem with the dotted key, the value (cut by
:func:`~graphstore.runtime.errors.show`) and the house message: ``unknown key 'x' (did you mean 'y'?)``,
``missing required key 'k'``, or ``<value> <why>`` from a coercer or a cross-field check.
"""

from __future__ import annotations

import typing
from typing import Any, Sequence

from pydantic import BaseModel, ValidationError

from graphstore.config._fields import did_you_mean
from graphstore.config.errors import Problem, clip, show

_GENERIC = {"tuple_type": "must be a list", "list_type": "must be a list",
            "dict_type": "must be a mapping", "model_type": "must be a mapping"}


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


def loc_path(loc: Sequence[Any]) -> str:
    """``("a", 0, "b") -> "a[0].b"``, the spelling of Problem.path (keys cut by :func:`clip`)."""
    out = ""
    for t in loc:
        out = f"{out}[{t}]" if isinstance(t, int) else (f"{out}.{clip(str(t))}" if out else clip(str(t)))
    return out


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The config model inside a field annotation (``X``, ``X | None``, ``tuple[X, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def model_at(root: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model that validated the mapping at ``loc`` (YAML keys and indexes), if any."""
    model: type[BaseModel] | None = root
    for step in loc:
        if model is None:
            return None
        if isinstance(step, int):
            continue
        fields = {f.alias or name: f for name, f in model.model_fields.items()}
        model = _model_in(fields[step].annotation) if step in fields else None
    return model


def _raw_at(raw: Any, loc: Sequence[Any]) -> Any:
    for step in loc:
        try:
            raw = raw[step]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def add_validation_errors(col: Collector, exc: ValidationError, root: type[BaseModel], raw: Any) -> None:
    """Record every error of ``exc`` (validating ``raw`` as ``root``) as a problem in ``col``."""
    for err in exc.errors(include_url=False):
        loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
        path = loc_path(loc) or "(top level)"
        if kind == "extra_forbidden":
            model = model_at(root, loc[:-1])
            allowed = list(getattr(model, "yaml_keys", dict)())
            hint = did_you_mean(loc[-1], allowed) or f" (allowed: {', '.join(allowed)})"
            col.add(loc_path(loc), loc[-1], f"unknown key {show(loc[-1])}{hint}")
        elif kind == "missing":
            key = loc[-1]
            parent = _raw_at(raw, loc[:-1])
            null = isinstance(parent, dict) and key in parent
            col.add(path, None, f"{key!r} is null but a value is required" if null
                    else f"missing required key {key!r}", missing=True)
        elif kind == "config":
            col.add(path, value, err["ctx"]["message"], missing=err["ctx"]["missing"])
        elif kind == "value_error":
            col.bad(path, value, str(err["ctx"]["error"]))
        else:
            col.bad(path, value, _GENERIC.get(kind, err["msg"]))
