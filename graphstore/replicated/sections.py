"""Writing a container file section by section, and the streaming CSR build the writer uses.

:class:`SectionWriter` appends 64-byte aligned sections to a new file, each filled through a
writable file-backed map (``np.memmap``), so writing a section larger than memory costs page
cache, not anonymous memory; its checksum is read back from the map once it is complete. The
preamble is written last (graphstore.replicated.format).

CSR build in two passes over the same batches (pure numpy, no Python loop per edge):
:func:`count_rows` adds each batch's row keys to a degree array; ``indptr`` is its prefix sum;
:func:`scatter_positions` then places every element of a batch at ``cursor[row] + rank``
(rank: its position among the batch's elements of that row) and advances ``cursor``. Batches
read in edge id order therefore leave each row's elements in edge id order.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from graphstore.replicated.format import (
    PREAMBLE_BYTES, GraphHeader, Kind, Section, aligned, pack_preamble,
)

_HASH_CHUNK = 16 << 20


def count_rows(keys: np.ndarray, degree: np.ndarray) -> None:
    """``degree[k] += (number of times k occurs in keys)``, in place."""
    if len(keys):
        degree += np.bincount(keys, minlength=len(degree))


def indptr_of(degree: np.ndarray) -> np.ndarray:
    """``[0, d0, d0+d1, ...]``: int64, one longer than ``degree``."""
    out = np.zeros(len(degree) + 1, dtype=np.int64)
    np.cumsum(degree, out=out[1:])
    return out


def scatter_positions(keys: np.ndarray, cursor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, positions)``: element ``order[i]`` of the batch goes to ``positions[i]``.

    Stable: elements of one row keep their batch order. ``cursor[k]`` (the next free slot of
    row k) is advanced by the count of k in ``keys``."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    uniq, first, counts = np.unique(sorted_keys, return_index=True, return_counts=True)
    rank = np.arange(len(sorted_keys), dtype=np.int64) - np.repeat(first, counts)
    positions = cursor[sorted_keys] + rank
    cursor[uniq] += counts
    return order, positions


class SectionWriter:
    """Builds one container file at ``path`` (which must not exist). ``reserve`` a section, fill
    the returned array, ``seal`` it; ``close(header)`` writes the header and, last, the
    preamble. ``abort()`` removes the file."""

    def __init__(self, path: str, kind: Kind) -> None:
        self.path, self.kind = path, kind
        self._fh = open(path, "xb+")
        self._fh.write(b"\0" * PREAMBLE_BYTES)
        self._end = PREAMBLE_BYTES
        self._open: dict[str, tuple[int, str, tuple[int, ...]]] = {}
        self.sections: dict[str, Section] = {}

    def reserve(self, name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        """A writable array for section ``name`` (zeros), mapped onto its place in the file."""
        if name in self.sections or name in self._open:
            raise ValueError(f"section {name!r} written twice")
        dt = np.dtype(dtype)
        offset = aligned(self._end)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        self._fh.truncate(offset + nbytes)
        self._end = offset + nbytes
        self._open[name] = (offset, dt.str, tuple(int(d) for d in shape))
        if nbytes == 0:
            return np.empty(shape, dtype=dt)
        self._fh.flush()
        return np.memmap(self.path, dtype=dt, mode="r+", offset=offset, shape=tuple(shape))

    def seal(self, name: str, array: np.ndarray) -> None:
        """Flush ``array`` (from :meth:`reserve`) and record its checksum."""
        offset, dtype, shape = self._open.pop(name)
        if isinstance(array, np.memmap):
            array.flush()
        digest = hashlib.sha256()
        flat = array.reshape(-1).view(np.uint8)
        for start in range(0, len(flat), _HASH_CHUNK):
            digest.update(memoryview(np.ascontiguousarray(flat[start:start + _HASH_CHUNK])))
        self.sections[name] = Section(offset=offset, dtype=dtype, shape=shape,
                                      sha256=digest.hexdigest())

    def put(self, name: str, values: np.ndarray) -> None:
        """A section holding ``values`` (written through the map, then sealed)."""
        values = np.ascontiguousarray(values)
        out = self.reserve(name, values.dtype.newbyteorder("<").str, values.shape)
        out[...] = values
        self.seal(name, out)

    def close(self, header: GraphHeader) -> None:
        """Write ``header`` after the last section, then the preamble; fsync."""
        if self._open:
            raise ValueError(f"sections reserved but never sealed: {sorted(self._open)}")
        raw = header.to_json()
        offset = aligned(self._end)
        self._fh.truncate(offset)
        self._fh.seek(offset)
        self._fh.write(raw)
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.seek(0)
        self._fh.write(pack_preamble(self.kind, offset, raw))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()

    def abort(self) -> None:
        self._fh.close()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
