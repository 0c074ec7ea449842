"""Raw YAML reading and ``key.path=value`` overrides (internal to :mod:`graphstore.config`).

Precedence: the file's values, then each override in the order given (a later one wins). Overrides
are applied to the raw YAML tree before typing, so an overridden value is validated like any other.
"""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

import yaml

from graphstore.config._fields import Bad, Collector

Token = str | int

_SEGMENT_RE = re.compile(r"^([^\[\]=]+)((?:\[\d+\])*)$")
_INDEX_RE = re.compile(r"\[(\d+)\]")


class _NotLoaded:
    def __repr__(self) -> str:
        return "NOT_LOADED"


NOT_LOADED: Any = _NotLoaded()
"""Returned by :func:`read_yaml` when the file could not be read or parsed (a problem was recorded)."""


class _DupCheckingLoader(yaml.SafeLoader):
    """SafeLoader that records duplicate mapping keys (plain YAML silently keeps the last one)."""

    duplicates: list[tuple[Any, int]]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in seen:
                self.duplicates.append((key, key_node.start_mark.line + 1))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(col: Collector, path: str | os.PathLike[str]) -> Any:
    """Parse one YAML document; on a missing file or a syntax error record a problem, return NOT_LOADED."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        col.add("", None, "file not found", missing=True)
        return NOT_LOADED
    except OSError as exc:
        col.add("", None, f"cannot read file: {exc.strerror or exc}", missing=True)
        return NOT_LOADED
    loader = _DupCheckingLoader(text)
    loader.duplicates = []
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        where = f" (column {mark.column + 1})" if mark is not None else ""
        col.add("", None, f"YAML syntax error: {problem}{where}", missing=True,
                line=mark.line + 1 if mark is not None else None)
        return NOT_LOADED
    finally:
        loader.dispose()
    for key, line in loader.duplicates:
        col.add("", key, f"duplicate key {key!r} (YAML keeps only the last; remove one)", line=line)
    return {} if data is None else data


def parse_override(text: str) -> tuple[list[Token], Any]:
    """Split ``a.b[0].c=value`` into path tokens and the YAML-parsed value; raise Bad if malformed."""
    key, sep, value_text = text.partition("=")
    if not sep or not key.strip():
        raise Bad("is not of the form key.path=value")
    tokens: list[Token] = []
    for segment in key.strip().split("."):
        m = _SEGMENT_RE.match(segment)
        if not m:
            raise Bad(f"has a malformed key path segment {segment!r} (use a.b[0].c=value)")
        tokens.append(m.group(1))
        tokens.extend(int(i) for i in _INDEX_RE.findall(m.group(2)))
    try:
        value = yaml.safe_load(value_text)
    except yaml.YAMLError as exc:
        raise Bad(f"has a value that is not valid YAML: {getattr(exc, 'problem', exc)}") from None
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
            raise Bad(f"sets key {token!r} inside {where}, which is a {type(node).__name__}, "
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
