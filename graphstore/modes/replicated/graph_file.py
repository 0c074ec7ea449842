"""Opening a graph file or a features file (format: graphstore.modes.replicated.format) without copying.

The whole file is mapped once, read-only (``np.memmap``); every section is a view into that map
and every tensor a ``torch.from_numpy`` of such a view, so opening costs no anonymous memory
whatever the file's size: pages come from the page cache as the sampler touches them, and are
shared by every process on the machine that maps the same file. Tensors returned here are
read-only views: never modify them in place.

``GraphFile.open`` checks the preamble (magic, schema version), the header's checksum, the file
size and that every section lies inside the file; :meth:`GraphFile.verify` reads every section
against its checksum (once after a copy; it touches every page, not anonymous memory).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from functools import cached_property
from typing import Literal

import numpy as np
import torch

from graphstore.config import EdgeType
from graphstore.dataset.metadata import DatasetMetadata
from graphstore.runtime.errors import InputDataError, UsageError
from graphstore.dataset.splitter import SPLIT_CODE
from graphstore.modes.replicated.format import (
    MAGIC, PREAMBLE_BYTES, SCHEMA_VERSION, SPLIT_NAMES, CsrView, GraphHeader, LabelEntry, Section,
    View, unpack_preamble,
)

_HASH_CHUNK = 16 << 20


class GraphFileError(InputDataError):
    """A graph or features file is missing, not ours, of another schema, cut short or corrupt."""


def readonly_tensor(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` of a read-only array, sharing its memory (no copy). torch warns that
    it cannot guard a read-only buffer; the callers' rule is never to write into these."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


class _Mapped:
    """A mapped container file: its header and read-only views of its sections."""

    def __init__(self, path: str, kind: str) -> None:
        self.path = path
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as fh:
                magic, version, offset, length, digest = unpack_preamble(fh.read(PREAMBLE_BYTES))
                if magic != MAGIC[kind]:
                    raise GraphFileError(f"{path} is not a graphstore {kind} file (written by "
                                         "graphstore.modes.replicated.write_graph_file, or cut short)")
                if version != SCHEMA_VERSION:
                    raise GraphFileError(f"{path}: schema_version {version} is not supported (this "
                                         f"version reads {SCHEMA_VERSION}); rewrite the file")
                if offset + length != size:
                    raise GraphFileError(f"{path} is {size} bytes, its preamble says "
                                         f"{offset + length}: cut short or appended to; copy it again")
                fh.seek(offset)
                raw = fh.read(length)
        except FileNotFoundError:
            raise GraphFileError(f"{path} not found (write it with `python -m "
                                 "components.graph_file`)") from None
        except IsADirectoryError:
            raise GraphFileError(f"{path} is a folder, not a {kind} file") from None
        except Exception as exc:  # struct.error on a short file
            if isinstance(exc, GraphFileError):
                raise
            raise GraphFileError(f"{path} is not a graphstore {kind} file ({exc})") from None
        if hashlib.sha256(raw).digest() != digest:
            raise GraphFileError(f"{path}: header checksum mismatch (corrupt); copy it again")
        try:
            self.header = GraphHeader.from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise GraphFileError(f"{path}: malformed header ({exc!r})") from None
        for name, s in self.header.sections.items():
            if s.offset < PREAMBLE_BYTES or s.offset + s.nbytes > offset or s.offset % 64:
                raise GraphFileError(f"{path}: section {name!r} lies outside the data area")
        self._base = np.memmap(path, dtype=np.uint8, mode="r") if size else None

    def array(self, name: str) -> np.ndarray:
        """The section ``name`` as a read-only array viewing the map (no copy)."""
        s = self._section(name)
        if s.nbytes == 0:
            return np.empty(s.shape, dtype=s.dtype)
        return self._base[s.offset:s.offset + s.nbytes].view(np.dtype(s.dtype)).reshape(s.shape)

    def tensor(self, name: str) -> torch.Tensor:
        return readonly_tensor(self.array(name))

    def _section(self, name: str) -> Section:
        try:
            return self.header.sections[name]
        except KeyError:
            raise GraphFileError(f"{self.path}: no section {name!r}") from None

    def verify(self) -> None:
        """Read every section against its sha256 (GraphFileError naming the first bad one)."""
        for name, s in self.header.sections.items():
            digest = hashlib.sha256()
            flat = self.array(name).reshape(-1).view(np.uint8) if s.nbytes else np.empty(0, np.uint8)
            for start in range(0, len(flat), _HASH_CHUNK):
                digest.update(memoryview(flat[start:start + _HASH_CHUNK]))
            if digest.hexdigest() != s.sha256:
                raise GraphFileError(f"{self.path}: section {name!r} fails its checksum (corrupt); "
                                     "copy or write it again")


class GraphFile(_Mapped):
    """An opened graph file: CSR per edge type and view, labels, node counts, metadata."""

    @classmethod
    def open(cls, path: str, *, verify: bool = False) -> GraphFile:
        """Map ``path`` (a local file). ``verify`` also reads every section's checksum."""
        out = cls(os.fspath(path), "graph")
        if verify:
            out.verify()
        return out

    @property
    def edge_dir(self) -> Literal["in", "out"]:
        return self.header.sample_edge_direction

    @property
    def views(self) -> tuple[str, ...]:
        """The views this file has: ``("full",)``, or ``("full", "train")`` with a splitter."""
        return ("full", "train") if self.header.splitter is not None else ("full",)

    @cached_property
    def metadata(self) -> DatasetMetadata:
        """The graph as one partition (``num_partitions`` 1), counts of the full view."""
        h = self.header
        types = {name: EdgeType.parse(name) for name in h.edge_types}
        return DatasetMetadata(
            num_partitions=1, edge_dir=h.sample_edge_direction, node_types=tuple(h.node_types),
            edge_types=tuple(types.values()),
            supervision_edge_types=tuple(et for name, et in types.items()
                                         if h.edge_types[name].is_supervision),
            node_counts={nt: v["count"] for nt, v in h.node_types.items()},
            edge_counts_per_partition={et: (h.edge_types[name].count,)
                                       for name, et in types.items()},
            node_feature_dims={nt: v["feature_dim"] for nt, v in h.node_types.items()},
            has_splits=h.splitter is not None)

    def check_view(self, view: str) -> None:
        if view not in self.views:
            raise UsageError(f"{self.path} has no {view!r} view (it has {list(self.views)}; "
                             "the 'train' view exists when the file was written with a splitter)")

    def csr(self, edge_type: EdgeType, view: View = "full") -> tuple[torch.Tensor, torch.Tensor,
                                                                     torch.Tensor]:
        """``(indptr, indices, eids)`` of ``edge_type`` in ``view``, read-only mapped tensors."""
        self.check_view(view)
        entry: CsrView = self.header.edge_types[str(edge_type)].views[view]
        return self.tensor(entry.indptr), self.tensor(entry.indices), self.tensor(entry.eids)

    def labels(self, supervision_edge_type: EdgeType) -> LabelEntry:
        key = str(supervision_edge_type)
        if key not in self.header.supervision:
            raise UsageError(f"{supervision_edge_type} is not a supervision edge type of "
                             f"{self.path} (have {list(self.header.supervision)})")
        return self.header.supervision[key]

    def anchors(self, supervision_edge_type: EdgeType, split: str | None) -> np.ndarray:
        """Sorted anchors with a label of ``split`` (None: any), a mapped array."""
        entry = self.labels(supervision_edge_type)
        key = split or "all"
        if key not in SPLIT_NAMES:
            raise UsageError(f"split must be one of {list(SPLIT_NAMES[1:])} or None, got {split!r}")
        if key not in entry.anchors:
            raise UsageError(f"{self.path} has no {split!r} split: it was written without a "
                             "splitter (storageArgs.splitter_cls_path)")
        return self.array(entry.anchors[key])

    def positives(self, supervision_edge_type: EdgeType, anchors: np.ndarray,
                  split: str | None = None) -> np.ndarray:
        """``[2, P]`` (anchor, label) pairs of ``anchors`` (rows in ``anchors`` order), only
        those of ``split`` when given and the file has split codes."""
        entry = self.labels(supervision_edge_type)
        indptr, labels = self.array(entry.indptr), self.array(entry.labels)
        anchors = np.asarray(anchors, dtype=np.int64)
        lo, hi = indptr[anchors], indptr[anchors + 1]
        counts = hi - lo
        rows = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(lo - (np.cumsum(counts) - counts), counts)
        src = np.repeat(anchors, counts)
        if split is not None and entry.split is not None:
            keep = self.array(entry.split)[rows] == SPLIT_CODE[split]
            rows, src = rows[keep], src[keep]
        return np.stack([src, labels[rows]])


class FeatureFile(_Mapped):
    """An opened features file: ``x(node_type)`` float32 [N, dim] mapped tensors."""

    @classmethod
    def open(cls, path: str, *, verify: bool = False) -> FeatureFile:
        out = cls(os.fspath(path), "features")
        if verify:
            out.verify()
        return out

    def has(self, node_type: str) -> bool:
        return f"x/{node_type}" in self.header.sections

    def x(self, node_type: str) -> torch.Tensor:
        return self.tensor(f"x/{node_type}")

    def rows(self, node_type: str, ids: torch.Tensor) -> torch.Tensor:
        """The feature rows of ``ids`` (a new float32 [len(ids), dim] tensor, in ``ids`` order).
        Gathered by ``np.take`` on the mapped array: ~3x faster than indexing the mapped tensor
        with torch (17.8 k rows of 16 floats: 0.36 ms against 1.2 ms, measured 2026-12-07)."""
        return torch.from_numpy(np.take(self.array(f"x/{node_type}"), ids.numpy(), axis=0))

    def check_matches(self, graph: GraphFile) -> None:
        """The features were written from the same shard set as ``graph`` (UsageError else)."""
        mine, theirs = self.header.source.get("manifest_sha256"), graph.header.source.get("manifest_sha256")
        if mine != theirs or self.header.node_types != graph.header.node_types:
            raise UsageError(f"{self.path} was not written from the shard set of {graph.path}; "
                             "write both from the same shards")
