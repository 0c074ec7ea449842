"""Writing a container file section by section, and the streaming CSR build the writer uses.

:class:`SectionWriter` appends 64-byte aligned sections to a new file, each filled through a
writable file-backed map (``np.memmap``), so writing a section larger than memory costs page
cache, not anonymous memory; its checksum is read back from the map once it is complete. The
preamble is written last (graphstore.modes.replicated.format).

The streaming CSR build the writer fills sections with is graphstore.dataset.csr's.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from graphstore.modes.replicated.format import (
    PREAMBLE_BYTES, GraphHeader, Kind, Section, aligned, pack_preamble,
)

_HASH_CHUNK = 16 << 20


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
