"""Weights and features of a BigQuery table: their columns checked, their values checked, and
the select items that write them as the shard format's columns (``weight``, ``f_0..f_{d-1}``).

The rules are the local engine's (graphstore.partition.sources): features are either several
numeric columns or one array column of one width; a weight is one numeric column; every value
must be a finite float32 number (not null, not NaN, not infinite, and below float32's overflow:
the shards store float32). BigQuery has no FLOAT32, so values stay FLOAT64 in BigQuery and in the
exported files; a reader rounds them to float32 as the local engine does when it writes.
Failures are InputDataErrors naming the table, the column and the config key, with an example
value (tables have no row order, so no row number).
"""

from __future__ import annotations

from dataclasses import dataclass

from graphstore.partition.bigquery_jobs import BigQueryJobs, TableSchema, quoted
from graphstore.runtime.errors import InputDataError

FLOAT32_OVERFLOW = 3.4028235677973366e38
"""2**128 - 2**103: the least magnitude a float64 rounds to an infinite float32 from."""
_NUMERIC = {"INTEGER", "INT64", "FLOAT", "FLOAT64", "NUMERIC", "BIGNUMERIC", "BIGDECIMAL",
            "DECIMAL"}


def _bad(value: str) -> str:
    """SQL: true when ``value`` is not a finite float32 number (module docs)."""
    v = f"CAST({value} AS FLOAT64)"
    return f"({v} IS NULL OR IS_NAN({v}) OR IS_INF({v}) OR ABS({v}) >= {FLOAT32_OVERFLOW!r})"


@dataclass(frozen=True)
class ValueColumns:
    """Float columns of one table, as the shard format writes them: ``names`` the source
    columns, ``is_array`` when they are one array column, ``width`` the number of values per row
    (0: none)."""

    names: tuple[str, ...]
    is_array: bool
    width: int

    def select(self, alias: str, out: tuple[str, ...]) -> list[str]:
        """Select items ``CAST(... AS FLOAT64) AS <out[i]>`` for the ``width`` values of a row
        of ``alias``."""
        if self.is_array:
            col = f"{alias}.{quoted(self.names[0])}"
            return [f"CAST({col}[OFFSET({i})] AS FLOAT64) AS {o}" for i, o in enumerate(out)]
        return [f"CAST({alias}.{quoted(c)} AS FLOAT64) AS {o}" for c, o in zip(self.names, out)]


NO_VALUES = ValueColumns((), False, 0)


def feature_names(width: int) -> tuple[str, ...]:
    """``f_0 .. f_{width-1}``: the format's feature columns."""
    return tuple(f"f_{i}" for i in range(width))


def check_values(jobs: BigQueryJobs, schema: TableSchema, columns: tuple[str, ...],
                 config_key: str, what: str = "feature", id_column: str | None = None
                 ) -> ValueColumns:
    """Check ``columns`` of the table ``schema`` describes (types, widths, values; module docs)
    and return them; ``what`` is ``"feature"`` or ``"weight"``, ``id_column`` the column an
    example bad value is named by."""
    if not columns:
        return NO_VALUES
    kinds = [schema.column(c, f"{what} column", config_key) for c in columns]
    arrays = [c for c, k in zip(columns, kinds) if k.repeated]
    if arrays and len(columns) != 1:
        raise InputDataError(f"{schema.uri}: feature column {arrays[0]!r} is a list; give either "
                             f"one list column or several numeric columns ({config_key})")
    for col, kind in zip(columns, kinds):
        if kind.sql_type not in _NUMERIC:
            raise InputDataError(f"{schema.uri}: {what} column {col!r} has type "
                                 f"{'ARRAY<' * kind.repeated}{kind.sql_type}{'>' * kind.repeated}; "
                                 f"{what}s must be numeric ({config_key})")
    ref = quoted(schema.ref)
    if arrays:
        col = quoted(columns[0])
        ((lo, hi, bad),) = jobs.run(
            f"checking the features {columns[0]!r} of {schema.uri}",
            f"SELECT MIN(ARRAY_LENGTH({col})), MAX(ARRAY_LENGTH({col})), "
            f"COUNTIF(EXISTS(SELECT 1 FROM UNNEST({col}) AS v WHERE {_bad('v')})) FROM {ref}")
        if lo != hi:
            raise InputDataError(f"{schema.uri}: column {columns[0]!r} has inconsistent feature "
                                 f"widths ({lo} to {hi})")
        if bad:
            _name_bad(jobs, schema, columns[0], f"(SELECT v FROM UNNEST({col}) AS v WHERE "
                      f"{_bad('v')} LIMIT 1)", f"EXISTS(SELECT 1 FROM UNNEST({col}) AS v WHERE "
                      f"{_bad('v')})", int(bad), what, id_column)
        return ValueColumns(tuple(columns), True, int(lo or 0))
    counts = jobs.run(f"checking the {what}s of {schema.uri}",
                      "SELECT " + ", ".join(f"COUNTIF({_bad(quoted(c))})" for c in columns)
                      + f" FROM {ref}")[0]
    for col, bad in zip(columns, counts):
        if bad:
            _name_bad(jobs, schema, col, quoted(col), _bad(quoted(col)), int(bad), what,
                      id_column)
    return ValueColumns(tuple(columns), False, len(columns))


def _name_bad(jobs: BigQueryJobs, schema: TableSchema, column: str, value_sql: str,
              where_sql: str, count: int, what: str, id_column: str | None) -> None:
    """Raise the InputDataError for ``count`` bad values of ``column``, naming one."""
    by = f", CAST({quoted(id_column)} AS STRING)" if id_column else ""
    rows = jobs.run(f"finding a bad {what} value of {schema.uri}",
                    f"SELECT CAST({value_sql} AS STRING){by} FROM {quoted(schema.ref)} "
                    f"WHERE {where_sql} LIMIT 1")
    value = rows[0][0] if rows else None
    where = f" (id {rows[0][1]!r})" if rows and id_column else ""
    raise InputDataError(f"{schema.uri}: column {column!r}: {what} value {value or 'NULL'}"
                         f"{where} is not a finite float32 number ({count} bad row(s) in total)")
