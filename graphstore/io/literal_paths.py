"""File paths handed to DuckDB, made literal.

DuckDB treats every path it reads (``read_parquet``, ``read_csv``, ``parquet_file_metadata``) as a
glob pattern: ``*``, ``?`` and ``[...]`` match other files, and a leading ``~`` is the home
folder. A data folder named ``data*`` would then also read ``data_old``. Our paths are literal
everywhere (docs/architecture.md, data safety), so each one goes through :func:`duckdb_literal` first.
"""

from __future__ import annotations

import os
import re

_GLOB_CHARS = re.compile(r"([*?\[])")


def duckdb_literal(path: str) -> str:
    """The pattern DuckDB reads as exactly the file ``path``: absolute (no ``~`` expansion),
    each ``*``, ``?`` and ``[`` wrapped in a one-character class (``[*]``), which DuckDB's glob
    matches only against that character."""
    return _GLOB_CHARS.sub(r"[\1]", os.path.abspath(path))


def duckdb_literal_glob(folder: str, pattern: str) -> str:
    """A DuckDB glob of ``pattern`` (e.g. ``*.parquet``) inside the literal ``folder``."""
    return os.path.join(duckdb_literal(folder), pattern)
