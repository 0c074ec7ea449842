"""Raw YAML reading and ``key.path=value`` overrides (internal to :mod:`graphstore.config`).

Precedence: the file's values, then each override in the order given (a later one wins). Overrides
are applied to the raw YAML tree before typing, so an overridden value is validated like any other.
"""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

import yaml

from graphstore.config._fields import Bad
from graphstore.config._problems import Collector
from graphstore.config._yaml import MAX_CONFIG_BYTES, YamlLimit, parse_yaml
from graphstore.config.errors import clip, show

Token = str | int

_SEGMENT_RE = re.compile(r"^([^\[\]=]+)((?:\[\d+\])*)$")
_INDEX_RE = re.compile(r"\[(\d+)\]")


class _NotLoaded:
    def __repr__(self) -> str:
        return "NOT_LOADED"


NOT_LOADED: Any = _NotLoaded()
"""Returned by :func:`read_yaml` when the file could not be read or parsed (a problem was recorded)."""


def _decode(col: Collector, raw: bytes) -> str | None:
    """UTF-8 text of a config file; a problem naming the first bad byte when it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col.add("", None, f"is not UTF-8 text: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} "
                "cannot be decoded; save the file as UTF-8", missing=True, line=line)
        return None


def _syntax_problem(exc: yaml.YAMLError) -> tuple[str, int | None]:
    """One line (and the 1-based line number, when known) for a YAML syntax error."""
    if isinstance(exc, yaml.reader.ReaderError):
        return (f"YAML cannot contain character #x{exc.character:04x} (at character offset "
                f"{exc.position}): {exc.reason}", None)
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" (column {mark.column + 1})" if mark is not None else ""
    return f"YAML syntax error: {clip(problem)}{where}", None if mark is None else mark.line + 1


def read_yaml(col: Collector, path: str | os.PathLike[str]) -> Any:
    """Parse one YAML config file within the limits of :mod:`graphstore.config._yaml`.

    On a missing or unreadable file, a file over :data:`MAX_CONFIG_BYTES`, bytes that are not
    UTF-8, a syntax error or a broken limit: record one problem and return NOT_LOADED.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        col.add("", None, "file not found", missing=True)
        return NOT_LOADED
    except OSError as exc:
        col.add("", None, f"cannot read file: {exc.strerror or exc}", missing=True)
        return NOT_LOADED
    if len(raw) > MAX_CONFIG_BYTES:
        col.add("", None, f"is larger than {MAX_CONFIG_BYTES >> 20} MiB, the most a config file may "
                "have; keep data in data files and name them in the config", missing=True)
        return NOT_LOADED
    text = _decode(col, raw)
    if text is None:
        return NOT_LOADED
    try:
        parsed = parse_yaml(text)
    except yaml.YAMLError as exc:
        message, line = _syntax_problem(exc)
        col.add("", None, message, missing=True, line=line)
        return NOT_LOADED
    except YamlLimit as exc:
        col.add("", None, f"refused: {exc}", missing=True)
        return NOT_LOADED
    for key, line in parsed.duplicates:
        col.add("", key, f"duplicate key {show(key)} (YAML keeps only the last; remove one)", line=line)
    return {} if parsed.data is None else parsed.data


def parse_override(text: str) -> tuple[list[Token], Any]:
    """Split ``a.b[0].c=value`` into path tokens and the YAML-parsed value; raise Bad if malformed."""
    key, sep, value_text = text.partition("=")
    if not sep or not key.strip():
        raise Bad("is not of the form key.path=value")
    tokens: list[Token] = []
    for segment in key.strip().split("."):
        m = _SEGMENT_RE.match(segment)
        if not m:
            raise Bad(f"has a malformed key path segment {show(segment)} (use a.b[0].c=value)")
        tokens.append(m.group(1))
        tokens.extend(int(i) for i in _INDEX_RE.findall(m.group(2)))
    try:
        value = parse_yaml(value_text).data
    except yaml.YAMLError as exc:
        raise Bad(f"has a value that is not valid YAML: {_syntax_problem(exc)[0]}") from None
    except YamlLimit as exc:
        raise Bad(f"has a value that is refused: {exc}") from None
    return tokens, value


def tokens_to_path(tokens: Sequence[Token]) -> str:
    """``["a", 0, "b"] -> "a[0].b"``, the spelling of Problem.path."""
    out = ""
    for t in tokens:
        out = f"{out}[{t}]" if isinstance(t, int) else (f"{out}.{t}" if out else t)
    return out


def apply_override(data: Any, tokens: Sequence[Token], value: Any) -> Any:
    """Set ``value`` at ``tokens`` inside ``data`` (mutated; missing mappings are created).

    Returns the (possibly new) root. Raises Bad when the path runs through a scalar, indexes
    something that is not a list, or an index is out of range.
    """
    if not isinstance(data, dict):
        raise Bad("cannot be applied: the file's top level is not a mapping")
    node: Any = data
    for pos, token in enumerate(tokens):
        last = pos == len(tokens) - 1
        where = tokens_to_path(tokens[:pos]) or "the top level"
        if isinstance(token, int):
            if not isinstance(node, list):
                raise Bad(f"indexes [{token}] into {where}, which is not a list")
            if token >= len(node):
                raise Bad(f"index [{token}] is out of range: {where} has {len(node)} items")
        elif not isinstance(node, dict):
            raise Bad(f"sets key {show(token)} inside {where}, which is a {type(node).__name__}, "
                      "not a mapping")
        if last:
            node[token] = value
        elif isinstance(token, str) and node.get(token) is None:
            if isinstance(tokens[pos + 1], int):
                raise Bad(f"indexes into {tokens_to_path(tokens[:pos + 1])}, which is not set")
            node[token] = {}
            node = node[token]
        else:
            node = node[token]
    return data
