"""Bounded YAML parsing for config files and ``--set`` values (internal to :mod:`graphstore.config`).

A config is small; a hostile or broken one must fail fast with one line instead of spinning or
exhausting memory. Limits (each refused with :class:`YamlLimit`, a one-line reason):

- :data:`MAX_CONFIG_BYTES`: a config file larger than this is not read (checked by the caller
  before decoding);
- :data:`MAX_ALIAS_EXPANSION`: YAML aliases (``*a``) may add at most this many values beyond the
  ones written out, so a "billion laughs" document (``b: [*a, *a, ...]`` nested) is refused after
  composing, before anything walks the expanded tree (aliases share nodes, so composing is linear);
- :data:`MAX_DEPTH`: mappings and lists nested deeper than this are refused (the config code walks
  values recursively);
- a recursive alias (an anchor used inside its own value) is refused.

Mapping keys that appear twice are recorded (plain YAML silently keeps the last one). Only the
safe YAML tags are constructed (``yaml.SafeLoader``): no Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from graphstore.config.errors import clip

MAX_CONFIG_BYTES = 1 << 20
"""A config file may have at most 1 MiB."""

MAX_ALIAS_EXPANSION = 100_000
"""Values YAML aliases may add beyond those written out in the document."""

MAX_DEPTH = 64
"""Levels of nested mappings / lists a config value may have."""


class YamlLimit(Exception):
    """A document breaks one of the module's limits; ``str()`` is the one-line reason."""


@dataclass(frozen=True, slots=True)
class Parsed:
    """A parsed document and the duplicate keys found in it, as ``(key, 1-based line)``."""

    data: Any
    duplicates: tuple[tuple[Any, int], ...]


class _Loader(yaml.SafeLoader):
    """SafeLoader that records duplicate mapping keys and refuses documents nested too deeply
    while composing (PyYAML's composer recurses once per level)."""

    duplicates: list[tuple[Any, int]]
    depth: int

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH + 1:  # + 1: the document's top-level node
                raise YamlLimit(f"values are nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

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


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_node_tree(root: yaml.Node) -> None:
    """Raise :class:`YamlLimit` if the tree under ``root``, with aliases expanded, is recursive,
    deeper than :data:`MAX_DEPTH` or larger than its distinct nodes plus :data:`MAX_ALIAS_EXPANSION`.

    Linear in the number of distinct nodes (sizes and depths are memoised per node, iteratively,
    so neither a deep document nor a wide alias fan-out costs more than the nodes written out).
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if depth[key] > MAX_DEPTH:
                raise YamlLimit(f"values are nested more than {MAX_DEPTH} levels deep")
            if size[key] > len(size) + MAX_ALIAS_EXPANSION:
                raise YamlLimit(f"YAML aliases expand to more than {MAX_ALIAS_EXPANSION} extra "
                                "values (an alias bomb?); write the values out or use fewer aliases")
            continue
        if key in size:
            continue
        if key in on_path:
            raise YamlLimit(f"a YAML alias refers to its own anchor (line {node.start_mark.line + 1}); "
                            "a config value cannot contain itself")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in reversed(_children(node)))


def parse_yaml(text: str) -> Parsed:
    """Parse one YAML document within the module's limits.

    Raises:
        yaml.YAMLError: a syntax error (with ``problem_mark`` when the position is known).
        YamlLimit: the document is too deep, recursive, or its aliases expand too far.
    """
    loader = _Loader(text)
    loader.duplicates = []
    loader.depth = 0
    try:
        node = loader.get_single_node()
        if node is None:
            return Parsed(data=None, duplicates=())
        check_node_tree(node)
        try:
            data = loader.construct_document(node)
        except (ValueError, OverflowError) as exc:  # e.g. an int of more than 4300 digits
            raise YamlLimit(f"a value cannot be read: {clip(str(exc))}") from None
    finally:
        loader.dispose()
    return Parsed(data=data, duplicates=tuple(loader.duplicates))
