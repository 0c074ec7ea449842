"""Allocators: storage machines give freed memory back; sampling processes keep it for reuse.

A storage partition is built from batches of a few MiB (graphstore.dataset.partition_graph), and
those blocks are freed at once, but two allocators kept the pages: glibc's ``malloc`` raises its
mmap threshold (up to 32 MiB) after the first large block is freed, so later blocks of that size
come from a heap it rarely trims; and pyarrow's default pool (mimalloc) keeps what Parquet
decoding freed. Measured with ``benchmarks/plan.py`` on a 2 M-edge, 2 M-label partition (peak
PSS of the storage tree, 2026-12-02): 1 272-1 282 MiB with the defaults, 1 177-1 180 MiB with a
fixed 1 MiB mmap threshold and pyarrow's system pool; nothing changed on a 20 k-edge partition
(1 019 MiB either way) and the load took as long.

:func:`use_lean_allocators` (the storage main process, before its first child starts) sets
pyarrow's system pool here and, through ``ARROW_DEFAULT_MEMORY_POOL``, in every child, and the
1 MiB threshold in this process only. :func:`map_own_blocks_from` lowers the threshold further
in that process, which builds the partition: reading node features decodes one array per
feature column per batch (~128 KiB each), which under a 1 MiB threshold fragmented its heap:
measured on the ``large`` benchmark graph's partition 0 (2026-12-05, ``load_partition_graph``
in one process): 286-295 MiB anonymous after the load with 1 MiB, 228 MiB with 64 KiB, in the
same 3.2-3.4 s. :func:`release_freed_memory` returns what is left once a partition is built.

Sampling is the opposite case: every hop and every feature request allocates arrays of 1-20 MiB
(replies, hash tables, batches) and frees them a moment later. Mapped on their own, each is
page-faulted in (zeroed by the kernel) and unmapped again; with two sampler threads glibc's
per-thread arenas also trim their heaps after each. :func:`use_sampling_allocator` (storage
session processes, graph-store and colocated compute processes) keeps blocks below
:data:`SAMPLING_MMAP_THRESHOLD_BYTES` on the heap and up to :data:`SAMPLING_TRIM_THRESHOLD_BYTES`
of free heap for reuse, in at most :data:`SAMPLING_ARENAS` arenas (the sampler threads of a
loader are new each epoch; each new thread took an arena of its own, and each arena kept its
free heap: the compute process's peak RSS in ``benchmarks/sampling.py``'s graph-store row was
1 354-1 405 MiB with the thresholds alone, 745-786 MiB with 1 or 2 arenas, 1 082 MiB before
either, at the same seeds/s within the runs' spread). Measured 2026-12-07 (the partitioned
sampler in one process with both partitions in-process, 2 threads, the 1 M-edge benchmark
graph): 376 k seeds/s with glibc's defaults, 322 k with a fixed 1 MiB threshold (what sessions
had), 540 k with 32 MiB / 128 MiB, peak RSS 849 MiB against 856 MiB with the defaults.
Replicated workers keep glibc's defaults: the same settings (through ``MALLOC_*``) gave their
one-thread inline sampler no gain (``benchmarks/sampling.py --modes replicated_w1``, 4
interleaved pairs on 2026-12-07: 337-370 k seeds/s without, 273-333 k with).

A value the user set in the environment (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_ARENA_MAX``, ``ARROW_DEFAULT_MEMORY_POOL``) is kept: glibc
reads it when a process starts and nothing here overrides it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

MMAP_THRESHOLD_BYTES = 1 << 20
"""Blocks of at least this size are mapped on their own and unmapped when freed (the storage
main process)."""
LOADER_MMAP_THRESHOLD_BYTES = 64 << 10
"""The same, while that process builds a storage partition (:func:`map_own_blocks_from`)."""
SAMPLING_MMAP_THRESHOLD_BYTES = 32 << 20
"""The same, in a sampling process (:func:`use_sampling_allocator`): glibc's own largest."""
SAMPLING_TRIM_THRESHOLD_BYTES = 128 << 20
"""Free heap a sampling process keeps before giving the top of its heap back."""
SAMPLING_ARENAS = 2
"""glibc arenas of a sampling process: its sampler threads, new each epoch, share them (and
the memory they keep) instead of each taking its own."""
_M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (glibc malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def use_lean_allocators() -> None:
    """pyarrow's system pool here and in every later child process; the fixed 1 MiB mmap
    threshold here (module docs)."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    _set_unless_user_set(_M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD_BYTES)
    if os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system":
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())


def map_own_blocks_from(threshold_bytes: int = LOADER_MMAP_THRESHOLD_BYTES) -> None:
    """This process only: map blocks of at least ``threshold_bytes`` on their own. Call after
    :func:`use_lean_allocators`; a threshold the user set in ``MALLOC_MMAP_THRESHOLD_`` is
    kept."""
    _set_unless_user_set(_M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", threshold_bytes)


def use_sampling_allocator() -> None:
    """This process keeps its sampling temporaries' memory for reuse (module docs): call at the
    start of a process that samples, before its sampler threads start."""
    _set_unless_user_set(_M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_",
                         SAMPLING_MMAP_THRESHOLD_BYTES)
    _set_unless_user_set(_M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_",
                         SAMPLING_TRIM_THRESHOLD_BYTES)
    _set_unless_user_set(_M_ARENA_MAX, "MALLOC_ARENA_MAX", SAMPLING_ARENAS)


def _set_unless_user_set(param: int, env: str, value: int) -> None:
    """``mallopt(param, value)`` unless the environment sets ``env`` (glibc applied it at
    start) or the C library is not glibc."""
    if env in os.environ:
        return
    libc = _glibc()
    if libc is not None:
        libc.mallopt(param, value)


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
