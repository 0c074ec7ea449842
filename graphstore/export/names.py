"""Warehouse table names: built from config values, checked before any SQL sees them."""

from __future__ import annotations

import re

from graphstore.runtime.errors import UsageError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,1000}$")
LATEST_SUFFIX = "_latest"
_INTEGER = re.compile(r"^\s*[+-]?[0-9]+\s*$")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def sql_name(value: str, what: str) -> str:
    """``value`` when it is a plain SQL identifier (letters, digits, ``_``; not starting with a
    digit); UsageError naming ``what`` otherwise. Identifiers are never quoted-and-trusted."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise UsageError(f"{what} {value!r} is not a valid table name: use letters, digits and _ "
                         "(not starting with a digit)")
    return value


def table_name(prefix: str, node_type: str) -> str:
    """The table of one node type: ``{exportConfig.tablePrefix}{node_type}``."""
    return sql_name(f"{prefix}{node_type}", f"exportConfig.tablePrefix + node type {node_type!r}:")


def latest_view_name(table: str) -> str:
    """The view that shows the newest run's rows of ``table``."""
    return sql_name(f"{table}{LATEST_SUFFIX}", "view")


def node_id_value(node_id: str, integer_ids: bool, table: str) -> str | int:
    """``node_id`` (as typed by a user, e.g. ``--node-id``) as ``table`` stores it: unchanged for
    STRING ids; for INT64 ids an int, and a UsageError when it is not a 64-bit integer."""
    if not integer_ids:
        return node_id
    if not _INTEGER.match(node_id):
        raise UsageError(f"--node-id {node_id!r}: node ids of {table} are integers")
    value = int(node_id)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise UsageError(f"--node-id {node_id!r}: node ids of {table} are 64-bit integers; "
                         "this one is out of range")
    return value
