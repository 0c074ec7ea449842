"""Warehouse table names: built from config values, checked before any SQL sees them."""

from __future__ import annotations

import re

from graphstore.errors import UsageError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,1000}$")
LATEST_SUFFIX = "_latest"


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


def check_run_id(run_id: str) -> str:
    """``run_id`` when it follows graphstore.run_ids' rule; UsageError otherwise."""
    from graphstore.run_ids import check_run_id as check

    return check(run_id)
