"""How the partitioner shares its memory and sizes its work: :class:`PartitionTuning`.

The defaults are the measured values the partitioning table of docs/performance.md was taken
with; a caller (the benchmark's DuckDB-only run, tests that force a path or small chunks) passes its own instance to
:func:`graphstore.partition.partition_graph` instead of overwriting module globals.

Invariants (checked when an instance is made, :class:`UsageError` otherwise):
``0 <= lookup_share <= 1``; ``chunk_rows >= 1``; ``max_chunk_rows >= 1``; ``progress_s >= 0``.
None of these values changes what is written (the rows, their order within a file set, the
manifest); they choose the path (in memory or DuckDB) and the chunk files' sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphstore.runtime.errors import UsageError

DEFAULT_LOOKUP_SHARE = 0.25
"""Fraction of ``memoryLimitMb`` that one node type's in-memory table or id map may take, and
so may the edge chunks in flight; a node type that does not fit takes the DuckDB path."""
DEFAULT_CHUNK_ROWS = 1 << 20
"""Rows read, mapped and written per step of the in-memory edge pass (more when a hashed
lookup is large, :func:`graphstore.partition.edge_stream.chunk_rows`)."""
DEFAULT_MAX_CHUNK_ROWS = 1 << 22
"""The most rows of one chunk of the in-memory edge pass."""
DEFAULT_PROGRESS_S = 10.0
"""A long in-memory edge pass logs a progress line this often."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionTuning:
    """Memory share and chunking of one partition run (the memory limit itself is the config's
    ``datasetConfig.partitionConfig.memoryLimitMb``).

    ``lookup_share``: fraction of the memory limit a node type's in-memory table or id map may
    take, and the edge chunks in flight with it; ``0.0`` keeps nothing in memory (every step on
    the DuckDB path). ``chunk_rows`` / ``max_chunk_rows``: the usual and the largest rows per
    chunk of the in-memory edge pass. ``progress_s``: seconds between its progress lines.
    """

    lookup_share: float = DEFAULT_LOOKUP_SHARE
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    max_chunk_rows: int = DEFAULT_MAX_CHUNK_ROWS
    progress_s: float = DEFAULT_PROGRESS_S

    def __post_init__(self) -> None:
        if not 0.0 <= self.lookup_share <= 1.0:
            raise UsageError("PartitionTuning.lookup_share must be in 0..1, "
                             f"got {self.lookup_share!r}")
        for name in ("chunk_rows", "max_chunk_rows"):
            if getattr(self, name) < 1:
                raise UsageError(f"PartitionTuning.{name} must be >= 1, "
                                 f"got {getattr(self, name)!r}")
        if self.progress_s < 0:
            raise UsageError(f"PartitionTuning.progress_s must be >= 0, got {self.progress_s!r}")

    def lookup_budget_bytes(self, memory_limit_mb: int) -> int:
        """Bytes one in-memory node table, id map or set of edge chunks may take under a memory
        limit of ``memory_limit_mb``."""
        return int(memory_limit_mb * self.lookup_share) << 20


DEFAULT_TUNING = PartitionTuning()
"""The tuning a run uses when its caller passes none."""
