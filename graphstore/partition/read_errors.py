"""Failures while reading raw input files, turned into errors a user can act on.

- A file that cannot be decoded (corrupt Parquet pages, a truncated or corrupt gzip, a ragged
  CSV row, an empty file) is an InputDataError (exit 2) naming the file and what is wrong with it,
  with the line where one is known.
- Running out of memory (DuckDB's ``OutOfMemoryException``, Python's ``MemoryError``, which
  Arrow's and numpy's allocation failures are) is a RuntimeFailure (exit 1) naming
  ``datasetConfig.partitionConfig.memoryLimitMb``; it is never blamed on an input file.
- Anything else (a bug in our SQL, a full disk while writing) passes through unchanged.

CSV input is read as comma-separated, ``"``-quoted, with a header row (:data:`CSV_OPTIONS`);
column types are detected from the data.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gzip
import inspect
import io
import os
import re
import zlib
from typing import Callable, Iterator, Protocol, Sequence, TypeVar

import duckdb
import pyarrow as pa

from graphstore.runtime.errors import InputDataError, RuntimeFailure



class Table(Protocol):
    """What this module needs of an input table (graphstore.partition.sources.Table has it);
    a protocol, so this module does not import the one that imports it."""

    uri: str
    path: str
    fmt: str

    @property
    def sql_path(self) -> str: ...

MEMORY_KEY = "datasetConfig.partitionConfig.memoryLimitMb"
CSV_OPTIONS = "header=true, delim=',', quote='\"', escape='\"', auto_detect=true"
"""``read_csv`` options of every CSV input (types are still detected from the data)."""
_GZIP_CHUNK = 1 << 20
F = TypeVar("F", bound=Callable)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


OUT_OF_MEMORY = (MemoryError, duckdb.OutOfMemoryException)
"""What running out of memory raises during a partition step (Python's, DuckDB's)."""


def out_of_memory(step: str, memory_limit_mb: int, exc: BaseException) -> RuntimeFailure:
    """The error for running out of memory during ``step``."""
    return RuntimeFailure(
        f"partition ran out of memory while {step} ({_first_line(exc)}); {MEMORY_KEY} is "
        f"{memory_limit_mb} MB: set it to what this machine can give the partitioner (higher when "
        "DuckDB reached it, lower when the machine ran out first), or use a machine with more memory")


def check_csv_file(path: str, uri: str) -> None:
    """Reject an empty CSV file and a truncated or corrupt ``.gz`` one before DuckDB reads it
    (DuckDB reads a gzip stream cut short as if the file ended there). A ``.gz`` file is
    decompressed once to check it."""
    if os.path.getsize(path) == 0:
        raise InputDataError(f"{uri}: the file is empty (0 bytes); a CSV table needs a header row")
    if not path.lower().endswith(".gz"):
        return
    size = 0
    try:
        with gzip.open(path, "rb") as fh:
            while chunk := fh.read(_GZIP_CHUNK):
                size += len(chunk)
    except EOFError:
        raise InputDataError(f"{uri}: truncated gzip: the compressed data ends early after "
                             f"{size} bytes; copy or compress the file again") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise InputDataError(f"{uri}: corrupt gzip ({_first_line(exc)}) after {size} bytes; "
                             "copy or compress the file again") from None
    if size == 0:
        raise InputDataError(f"{uri}: the file is empty (no data after decompression); a CSV "
                             "table needs a header row")


def _open_text(path: str) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if path.lower().endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def find_ragged_row(path: str) -> tuple[int, int, int] | None:
    """``(line, fields, header_fields)`` of the first row whose field count differs from the
    header's (blank lines are skipped, as DuckDB does), or None. Reads the whole file: call it
    only to explain a failure."""
    with _open_text(path) as fh:
        reader = csv.reader(fh, delimiter=",", quotechar='"', doublequote=True)
        header = next(reader, None)
        if header is None:
            return None
        for row in reader:
            if row and len(row) != len(header):
                return reader.line_num, len(row), len(header)
    return None


def describe_csv_error(exc: duckdb.Error, path: str) -> str:
    """What is wrong with a CSV file DuckDB failed on, as one line (line number first)."""
    msg = str(exc)
    line = re.search(r"CSV Error on Line: (\d+)", msg)
    where = f"line {line.group(1)}: " if line else ""
    cols = re.search(r"Expected Number of Columns: (\d+) Found: (\d+)", msg)
    if cols:
        return f"{where}ragged row: {cols.group(2)} field(s), the header has {cols.group(1)}"
    conv = re.search(r'Error when converting column "(.*?)"\. (.*)', msg)
    if conv:
        return f"{where}column {conv.group(1)!r}: {conv.group(2).strip()}"
    if "unterminated quote" in msg:
        return f"{where}a value opens a quote (\") that never closes"
    ragged = find_ragged_row(path) if not line else None
    if ragged:
        return f"line {ragged[0]}: ragged row: {ragged[1]} field(s), the header has {ragged[2]}"
    return where + _first_line(exc)


def _describe(exc: BaseException, table: "Table") -> str:
    if table.fmt == "csv" and isinstance(exc, duckdb.Error):
        return describe_csv_error(exc, table.path)
    msg = _first_line(exc)
    failed = re.search(r'Failed to read file "[^"]*": (.*)', msg)
    return failed.group(1) if failed else re.sub(r"^[A-Za-z ]+ Error: ", "", msg)


def _blamed(exc: BaseException, tables: Sequence["Table"]) -> "Table | None":
    """The input file a DuckDB read error is about: the one its message names, else the only
    table read; None for a failure that is not about reading (e.g. writing to a full disk)."""
    msg = str(exc)
    for table in tables:
        if table.path in msg or os.path.abspath(table.path) in msg or table.sql_path[1:-1] in msg:
            return table
    if len(tables) == 1 and isinstance(exc, (duckdb.InvalidInputException,
                                             duckdb.ConversionException)):
        return tables[0]
    return None


def cannot_read(table: "Table", exc: BaseException) -> InputDataError:
    """The error for an input file that could not be decoded."""
    return InputDataError(f"{table.uri}: cannot read as {table.fmt}: {_describe(exc, table)}")


@contextlib.contextmanager
def reading(step: str, tables: Sequence["Table"], memory_limit_mb: int) -> Iterator[None]:
    """Run a partition step whose DuckDB queries read ``tables``, translating its failures
    (module docs). ``step`` says what it was doing, for the out-of-memory message."""
    try:
        yield
    except OUT_OF_MEMORY as exc:
        raise out_of_memory(step, memory_limit_mb, exc) from None
    except (duckdb.InvalidInputException, duckdb.ConversionException, duckdb.IOException) as exc:
        table = _blamed(exc, tables)
        if table is None:
            raise
        raise cannot_read(table, exc) from None


def _tables_in(value: object) -> list["Table"]:
    """The input tables in a step's argument: a Table, or a mapping whose values hold them."""
    if hasattr(value, "sql_path"):
        return [value]  # type: ignore[list-item]
    if isinstance(value, dict):
        return [t for item in value.values()
                for t in (item if isinstance(item, tuple) else (item,)) if hasattr(t, "sql_path")]
    return []


def step(what: str, *table_params: str) -> Callable[[F], F]:
    """Decorate a function whose first argument (a method's ``self``, or the partition
    :class:`~graphstore.partition.workspace.Workspace`) has ``memory_limit_mb`` so that it runs
    under :func:`reading`: ``what`` (formatted with the call's arguments, e.g. ``"writing edges
    {key}"``) names the step; ``table_params`` name the arguments holding the tables it reads."""
    def wrap(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def run(self, *args, **kwargs):
            bound = signature.bind(self, *args, **kwargs).arguments
            tables = [t for name in table_params for t in _tables_in(bound[name])]
            with reading(what.format(**bound), tables, self.memory_limit_mb):
                return fn(self, *args, **kwargs)
        return run  # type: ignore[return-value]
    return wrap


@contextlib.contextmanager
def arrow_reading(source: str) -> Iterator[None]:
    """Around code that only reads the Parquet file ``source`` (named so in messages) with
    pyarrow: a decoding error (``ArrowInvalid``, or an ``OSError`` without an errno, e.g.
    ``Corrupt snappy compressed data``) is an InputDataError naming the file. Allocation
    failures (MemoryError) and operating-system errors pass through."""
    try:
        yield
    except MemoryError:
        raise
    except (OSError, pa.ArrowException) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise
        raise InputDataError(f"{source}: cannot read as parquet: {_first_line(exc)}") from None
