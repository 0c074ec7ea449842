"""Allocators that give freed memory back: set once by a storage machine's main process.

A storage partition is built from batches of a few MiB (graphstore.dataset.partition_graph), and a
server session builds protocol answers of the same size; both are freed at once, but two
allocators kept the pages: glibc's ``malloc`` raises its mmap threshold (up to 32 MiB) after the
first large block is freed, so later blocks of that size come from a heap it rarely trims; and
pyarrow's default pool (mimalloc) keeps what Parquet decoding freed. Measured with
``benchmarks/plan.py`` on a 2 M-edge, 2 M-label partition (peak PSS of the storage tree,
2026-12-02): 1 272-1 282 MiB with the defaults, 1 177-1 180 MiB with a fixed 1 MiB mmap threshold
and pyarrow's system pool (main process -40 MiB, session -60 MiB); nothing changed on a 20 k-edge
partition (1 019 MiB either way) and the load took as long.

:func:`map_own_blocks_from` lowers the threshold further in the storage main process alone, which
builds the partition: reading node features decodes one array per feature column per batch
(~128 KiB each), which under a 1 MiB threshold fragmented its heap: measured on the ``large``
benchmark graph's partition 0 (2026-12-05, ``load_partition_graph`` in one process): 286-295 MiB
anonymous after the load with 1 MiB, 228 MiB with 64 KiB, in the same 3.2-3.4 s. Its peak is
the storage tree's, since the first session process and the sampling forkserver start while it
loads. Its children keep 1 MiB (sampling moves many blocks of that size; not measured lower).
:func:`release_freed_memory` returns what is left once a partition is built.
:func:`use_lean_allocators` applies both to this process and, through the environment, to every
process it starts afterwards (glibc reads ``MALLOC_MMAP_THRESHOLD_`` and pyarrow
``ARROW_DEFAULT_MEMORY_POOL`` when a process starts), so call it before the first session
process and sampling forkserver start. A value the user already set is kept.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os

MMAP_THRESHOLD_BYTES = 1 << 20
"""Blocks of at least this size are mapped on their own and unmapped when freed."""
LOADER_MMAP_THRESHOLD_BYTES = 64 << 10
"""The same, in the process that builds a storage partition (:func:`map_own_blocks_from`)."""
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc malloc.h)


def use_lean_allocators() -> None:
    """Fixed mmap threshold and pyarrow's system pool, here and in every later child process."""
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD_BYTES))
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    libc = _glibc()
    if libc is not None:
        with contextlib.suppress(ValueError):  # a threshold the user set that is not a number
            libc.mallopt(_M_MMAP_THRESHOLD, int(os.environ["MALLOC_MMAP_THRESHOLD_"]))
    if os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system":
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())


def map_own_blocks_from(threshold_bytes: int = LOADER_MMAP_THRESHOLD_BYTES) -> None:
    """This process only (its children read the environment): map blocks of at least
    ``threshold_bytes`` on their own. Call after :func:`use_lean_allocators`; a threshold the
    user set in ``MALLOC_MMAP_THRESHOLD_`` is kept."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != str(MMAP_THRESHOLD_BYTES):
        return
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, threshold_bytes)


def release_freed_memory() -> None:
    """Give the pages of freed heap blocks back to the system (glibc ``malloc_trim``): blocks
    under the mmap threshold (per-column arrays of a batch, Python objects) leave free pages
    between live ones that glibc keeps otherwise. Called once a partition is built (measured in
    a process that built a partition of 12.8 M feature values: 281 -> 228 MiB anonymous, what
    it holds after building a 20 k-edge one). No-op where there is no glibc."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has ``mallopt`` and ``malloc_trim``), else None: another
    C library's allocator has its own rules."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (AttributeError where they are missing)
    except (OSError, AttributeError):
        return None
    return libc
