"""Inspect and validate raw input tables (Parquet / CSV) with DuckDB before partitioning.

Each check raises :class:`InputDataError` (exit code 2) with the file, the column and, where it is
known, the 1-based data row (CSV: counting rows after the header). Checks that need a scan run as
one aggregate query per table; the queries that locate an offending row run only after a check
failed, so valid input is scanned as few times as possible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import duckdb

from graphstore.runtime.errors import InputDataError
from graphstore.io.literal_paths import duckdb_literal
from graphstore.partition import read_errors

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import EdgeSource, NodeSource

IdKind = Literal["string", "int64"]

_INT_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"}
_NUMERIC_TYPES = _INT_TYPES | {"FLOAT", "DOUBLE", "REAL", "UBIGINT", "HUGEINT"}


def sql_str(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def sql_ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Table:
    """One raw input table: where it is, how to read it, what columns it has."""

    uri: str  # as the user wrote it (for messages)
    path: str  # local path of the file (literal; see :attr:`sql_path`)
    fmt: Literal["parquet", "csv"]
    columns: dict[str, str]  # name -> DuckDB type
    num_rows: int

    @property
    def sql_path(self) -> str:
        """The path as a SQL string DuckDB reads as exactly this file (never a glob)."""
        return sql_str(duckdb_literal(self.path))

    @property
    def relation(self) -> str:
        """A SQL table expression reading the file."""
        if self.fmt == "parquet":
            return f"read_parquet({self.sql_path})"
        return f"read_csv({self.sql_path}, {read_errors.CSV_OPTIONS})"

    def numbered(self) -> str:
        """The table with a 1-based data row number ``__row`` (used only to report errors)."""
        if self.fmt == "parquet":
            return (f"(SELECT *, file_row_number + 1 AS __row FROM "
                    f"read_parquet({self.sql_path}, file_row_number=true))")
        return f"(SELECT *, row_number() OVER () AS __row FROM {self.relation})"


def open_table(con: duckdb.DuckDBPyConnection, uri: str, path: str,
               fmt: Literal["parquet", "csv"]) -> Table:
    """Describe a file (columns, types, row count). Unreadable files raise InputDataError
    (graphstore.partition.read_errors: empty, truncated gzip, ragged CSV rows); running out of
    memory is left to the caller (it knows the memory limit)."""
    probe = Table(uri, path, fmt, {}, 0)
    if fmt == "csv":
        read_errors.check_csv_file(path, uri)
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM {probe.relation}").fetchall()
        if fmt == "parquet":
            num_rows = con.execute(
                f"SELECT coalesce(sum(num_rows), 0) FROM parquet_file_metadata({probe.sql_path})"
            ).fetchone()[0]
        else:
            num_rows = con.execute(f"SELECT count(*) FROM {probe.relation}").fetchone()[0]
    except duckdb.OutOfMemoryException:
        raise
    except duckdb.Error as exc:
        raise read_errors.cannot_read(probe, exc) from None
    return Table(uri, path, fmt, {row[0]: row[1] for row in described}, int(num_rows))


def require_column(table: Table, column: str, role: str, config_key: str) -> str:
    """Return the column's DuckDB type; a missing column names the file and the config key."""
    if column not in table.columns:
        have = ", ".join(table.columns)
        raise InputDataError(
            f"{table.uri}: column {column!r} ({role}, set by {config_key}) not found; "
            f"columns are: {have}"
        )
    return table.columns[column]


def id_kind(table: Table, column: str, config_key: str) -> IdKind:
    """``string`` or ``int64`` for an id column; anything else is a wrong column type."""
    ctype = require_column(table, column, "node id", config_key)
    if ctype == "VARCHAR":
        return "string"
    if ctype in _INT_TYPES or ctype == "BIGINT":
        return "int64"
    raise InputDataError(
        f"{table.uri}: column {column!r} has type {ctype}; node ids must be strings or integers"
    )


def id_expr(column: str, kind: IdKind, alias: str = "") -> str:
    """The SQL expression that normalises an id column (of table ``alias``) to the id kind."""
    ref = f"{alias}.{sql_ident(column)}" if alias else sql_ident(column)
    return f"CAST({ref} AS {'VARCHAR' if kind == 'string' else 'BIGINT'})"


def _is_list(ctype: str) -> bool:
    return ctype.endswith("]")


def feature_sql(table: Table, columns: tuple[str, ...], width: int, alias: str = "") -> str:
    """SQL select items ``f_0 .. f_{width-1}`` (FLOAT) of a row's features, or ``""``.

    Call after :func:`check_features`. One list column is split by position; scalar columns are
    cast one by one. Kept as separate columns: building a FLOAT[d] array per row cost more than
    the rest of the node step (measured with DuckDB 1.5.5).
    """
    if not width:
        return ""
    ref = (lambda c: f"{alias}.{sql_ident(c)}") if alias else sql_ident
    if len(columns) == 1 and _is_list(table.columns[columns[0]]):
        col = ref(columns[0])
        return ", ".join(f"CAST({col}[{i + 1}] AS FLOAT) AS f_{i}" for i in range(width))
    return ", ".join(f"CAST({ref(c)} AS FLOAT) AS f_{i}" for i, c in enumerate(columns))


def features_are_one_list(table: Table, columns: tuple[str, ...], config_key: str) -> bool:
    """Validate column types; True when the features are one list column."""
    types = [require_column(table, c, "feature", config_key) for c in columns]
    lists = [c for c, t in zip(columns, types) if _is_list(t)]
    if lists:
        if len(columns) != 1:
            raise InputDataError(
                f"{table.uri}: feature column {lists[0]!r} is a list; give either one list column "
                f"or several numeric columns ({config_key})"
            )
        return True
    for col, ctype in zip(columns, types):
        if ctype not in _NUMERIC_TYPES and not ctype.startswith("DECIMAL"):
            raise InputDataError(
                f"{table.uri}: feature column {col!r} has type {ctype}; features must be numeric"
            )
    return False


def _bad_value(ref: str) -> str:
    """SQL: true when the value ``ref`` is null, NaN, infinite, or beyond float32's range (features
    and weights are stored as float32: a float64 1e300 would become infinite)."""
    return f"({ref} IS NULL OR NOT coalesce(isfinite(TRY_CAST({ref} AS FLOAT)), false))"


def check_features(con: duckdb.DuckDBPyConnection, table: Table, relation: str,
                   columns: tuple[str, ...], config_key: str) -> int:
    """Reject null, NaN and infinite feature values (as float32, the stored type) and
    inconsistent widths; return the width.

    ``relation`` is the SQL expression the columns are read from (the raw file or a staged table).
    """
    if not columns:
        return 0
    if not features_are_one_list(table, columns, config_key):
        bad_terms = " OR ".join(_bad_value(sql_ident(c)) for c in columns)
        bad = con.execute(f"SELECT count(*) FROM {relation} WHERE {bad_terms}").fetchone()[0]
        if bad:
            report_bad_features(con, table, columns, bad)
        return len(columns)
    col = sql_ident(columns[0])
    lo, hi, bad = con.execute(
        f"SELECT min(len({col})), max(len({col})), "
        f"count_if({col} IS NULL OR list_bool_or(list_transform({col}, x -> {_bad_value('x')}))) "
        f"FROM {relation}"
    ).fetchone()
    if lo != hi:
        row = con.execute(
            f"SELECT __row, len({col}) FROM {table.numbered()} WHERE len({col}) != {lo} LIMIT 1"
        ).fetchone()
        raise InputDataError(
            f"{table.uri}: column {columns[0]!r} has inconsistent feature widths ({lo} to {hi}); "
            f"row {row[0]} has {row[1]}, earlier rows {lo}"
        )
    if bad:
        report_bad_features(con, table, columns, bad)
    return int(lo or 0)


def report_bad_values(con: duckdb.DuckDBPyConnection, table: Table,
                      checks: list[tuple[tuple[str, ...], str]]) -> None:
    """Raise the row-level error for values an in-memory check found null, NaN or infinite;
    ``checks``: (columns, config key) of each weight or feature group."""
    for cols, config_key in checks:
        check_features(con, table, table.relation, cols, config_key)
    raise InputDataError(f"{table.uri}: null, NaN or infinite weight or feature values")


def report_bad_features(con: duckdb.DuckDBPyConnection, table: Table,
                        columns: tuple[str, ...], count: int) -> None:
    for c in columns:
        ident = sql_ident(c)
        if _is_list(table.columns[c]):
            cond = f"{ident} IS NULL OR list_bool_or(list_transform({ident}, x -> {_bad_value('x')}))"
        else:
            cond = _bad_value(ident)
        row = con.execute(
            f"SELECT __row, CAST({ident} AS VARCHAR) FROM {table.numbered()} WHERE {cond} "
            f"ORDER BY __row LIMIT 1"
        ).fetchone()
        if row:
            raise InputDataError(
                f"{table.uri}: column {c!r} row {row[0]}: feature value {row[1] or 'NULL'} is not a "
                f"finite float32 number ({count} bad row(s) in total)"
            )
    raise InputDataError(f"{table.uri}: {count} row(s) have null, NaN or infinite features")


def report_null_ids(con: duckdb.DuckDBPyConnection, table: Table, column: str) -> None:
    """Raise if ``column`` has a null; names the first row."""
    row = con.execute(
        f"SELECT __row FROM {table.numbered()} WHERE {sql_ident(column)} IS NULL "
        f"ORDER BY __row LIMIT 1"
    ).fetchone()
    if row:
        total = con.execute(
            f"SELECT count(*) FROM {table.relation} WHERE {sql_ident(column)} IS NULL"
        ).fetchone()[0]
        raise InputDataError(
            f"{table.uri}: column {column!r} row {row[0]}: null id ({total} null(s) in total)"
        )


def resolve_id_kinds(node_tables: dict[str, tuple["NodeSource", Table]],
                     edge_tables: dict[str, tuple["EdgeSource", Table]]) -> dict[str, IdKind]:
    """Each node type's id kind; every column that holds ids of one type must agree."""
    seen: dict[str, tuple[IdKind, str]] = {}

    def note(nt: str, kind: IdKind, where: str) -> None:
        if nt in seen and seen[nt][0] != kind:
            raise InputDataError(
                f"ids of node type {nt!r} are {seen[nt][0]} in {seen[nt][1]} but {kind} in "
                f"{where}; make the id columns the same type"
            )
        seen.setdefault(nt, (kind, where))

    for nt, (ns, table) in node_tables.items():
        note(nt, id_kind(table, ns.id_column, f"nodes[{nt}].idColumn"),
             f"{table.uri} column {ns.id_column!r}")
    for key, (es, table) in edge_tables.items():
        for col, nt, side in ((es.src_column, es.edge_type.src_node_type, "srcColumn"),
                              (es.dst_column, es.edge_type.dst_node_type, "dstColumn")):
            note(nt, id_kind(table, col, f"edges[{key}].{side}"),
                 f"{table.uri} column {col!r}")
    return {nt: kind for nt, (kind, _) in seen.items()}
