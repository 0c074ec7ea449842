"""The graph file and the features file of replicated mode (``schema_version`` 1).

Both are one container format: raw little-endian arrays ("sections") at 64-byte aligned offsets,
described by a JSON header at the end, found through a fixed 64-byte preamble at the start::

    [0, 64)        preamble: magic (8 bytes: b"GSGRAPH\\0" graph file, b"GSFEATS\\0" features
                   file), u32 schema_version, u32 0, u64 header offset, u64 header length,
                   32 bytes sha256 of the header bytes. Written LAST: a file whose writer died
                   has no magic and never opens.
    [64, H)        sections, each at a 64-byte aligned offset (so every array is aligned for its
                   dtype once the file is memory-mapped), in the order the header lists them.
    [H, H+len)     the header: UTF-8 JSON (see below); the file ends there.

Header keys (``GraphHeader``): ``format`` ("graphstore-graph"), ``schema_version``, ``kind``
("graph" | "features"), ``created_at``, ``sample_edge_direction``, ``node_types`` ({type:
{count, feature_dim}}), ``edge_types`` ({"src__rel__dst": {count, reverse_of, is_supervision,
views: {view: {count, indptr, indices, eids}}}}), ``supervision`` ({"src__rel__dst": {count,
indptr, labels, split, anchors: {"all" | "train" | "val" | "test": section}}}), ``splitter``
(null or {cls_path, kwargs}), ``source`` (the shard set it was written from: uri, config_hash,
manifest sha256), ``id_maps`` ({type: [{uri, bytes}]}: the files of the type's id map in the
shard set, where raw ids are; never copied here),
``sections`` ({name: {offset, dtype, shape, sha256}}).

Rules every writer and reader keeps:

- Numbering is the shard set's: dense node ids per type, edge ids per edge type as the shard
  format assigns them (graphstore.formats.shards.format), so embeddings, id maps and export agree with
  graph-store mode.
- Edges are stored per edge type as CSR in the *sampling direction*: the row of a node holds
  the edges a sampler walks from it (``sample_edge_direction`` "in": the edges pointing INTO
  the node, indices are their sources; "out": the edges leaving it, indices are their
  destinations). ``indptr`` int64 [N_anchor + 1], ``indices`` int64 [E], ``eids`` int64 [E];
  within a row, edges are in ascending edge id.
- Views: ``full`` holds every edge. ``train`` (only when the file was written with a splitter)
  is the message-passing graph of training, exactly what graph-store storage keeps with that
  splitter: the val/test supervision edges (all supervision edges when
  ``should_convert_labels_to_edges`` is false) are removed from the supervision types and
  their reverse types; an edge type without removals shares the ``full`` sections.
- Supervision labels (per supervision edge type, as the user reads it, src -> dst): CSR by
  anchor (the source node): ``indptr`` int64 [N_src + 1], ``labels`` int64 (destination ids),
  ``split`` int8 (0 train, 1 val, 2 test; absent without a splitter), rows in the shards'
  label order; ``anchors/<split>`` int64: sorted anchors with at least one label of the split
  (``all``: any label).
- Features file: one float32 [N, dim] section ``x/<node type>`` per node type with features,
  row = dense id; ``edge_types``/``supervision`` are empty. Edge features are not stored.
- ``sections[*].sha256`` checksums each section's bytes; the preamble checksums the header.
  Opening checks the preamble, the header checksum, the file size and every section's bounds;
  reading every byte against the section checksums is :meth:`GraphFile.verify` (after a copy).
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

SCHEMA_VERSION = 1
FORMAT_NAME = "graphstore-graph"
MAGIC = {"graph": b"GSGRAPH\0", "features": b"GSFEATS\0"}
PREAMBLE_BYTES = 64
ALIGN = 64
_PREAMBLE = struct.Struct("<8sIIQQ32s")  # magic, version, 0, header offset, header length, sha256
View = Literal["full", "train"]
"""A graph file's views: every edge, or the training edges only (a splitter's file)."""
SPLIT_NAMES = ("all", "train", "val", "test")
Kind = Literal["graph", "features"]


def aligned(offset: int) -> int:
    """``offset`` rounded up to the section alignment (64 bytes)."""
    return -(-offset // ALIGN) * ALIGN


@dataclass(frozen=True, kw_only=True)
class Section:
    """Where one array lies in the file: byte ``offset`` (64-aligned), numpy ``dtype`` string
    (little-endian, e.g. ``"<i8"``), ``shape``, sha256 of its bytes."""

    offset: int
    dtype: str
    shape: tuple[int, ...]
    sha256: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True, kw_only=True)
class CsrView:
    """One CSR of an edge type: names of its ``indptr`` / ``indices`` / ``eids`` sections."""

    count: int
    indptr: str
    indices: str
    eids: str


@dataclass(frozen=True, kw_only=True)
class EdgeTypeEntry:
    count: int
    reverse_of: str | None
    is_supervision: bool
    views: dict[str, CsrView]


@dataclass(frozen=True, kw_only=True)
class LabelEntry:
    """A supervision type's labels: CSR by anchor, split codes, anchors per split."""

    count: int
    indptr: str
    labels: str
    split: str | None
    anchors: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class GraphHeader:
    """The header of a graph or features file (see the module docs for each key)."""

    kind: Kind
    created_at: str
    sample_edge_direction: Literal["in", "out"]
    node_types: dict[str, dict[str, int]]
    sections: dict[str, Section]
    edge_types: dict[str, EdgeTypeEntry] = field(default_factory=dict)
    supervision: dict[str, LabelEntry] = field(default_factory=dict)
    splitter: dict[str, Any] | None = None
    source: dict[str, Any] = field(default_factory=dict)
    id_maps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    format: str = FORMAT_NAME
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> GraphHeader:
        """Raises KeyError / TypeError / ValueError on a malformed header (the reader names the
        file)."""
        return cls(
            kind=raw["kind"], created_at=raw["created_at"],
            sample_edge_direction=raw["sample_edge_direction"],
            node_types={k: {"count": int(v["count"]), "feature_dim": int(v["feature_dim"])}
                        for k, v in raw["node_types"].items()},
            sections={k: Section(offset=int(v["offset"]), dtype=str(v["dtype"]),
                                 shape=tuple(int(d) for d in v["shape"]), sha256=str(v["sha256"]))
                      for k, v in raw["sections"].items()},
            edge_types={k: EdgeTypeEntry(count=int(v["count"]), reverse_of=v["reverse_of"],
                                         is_supervision=bool(v["is_supervision"]),
                                         views={n: CsrView(**c) for n, c in v["views"].items()})
                        for k, v in raw.get("edge_types", {}).items()},
            supervision={k: LabelEntry(**v) for k, v in raw.get("supervision", {}).items()},
            splitter=raw.get("splitter"), source=dict(raw.get("source", {})),
            id_maps=dict(raw.get("id_maps", {})), format=raw["format"],
            schema_version=int(raw["schema_version"]))


def pack_preamble(kind: Kind, header_offset: int, header: bytes) -> bytes:
    """The 64-byte preamble for a header of ``header`` bytes at ``header_offset``."""
    return _PREAMBLE.pack(MAGIC[kind], SCHEMA_VERSION, 0, header_offset, len(header),
                          hashlib.sha256(header).digest())


def unpack_preamble(raw: bytes) -> tuple[bytes, int, int, int, bytes]:
    """``(magic, schema_version, header offset, header length, header sha256)``."""
    magic, version, _, offset, length, digest = _PREAMBLE.unpack(raw[:_PREAMBLE.size])
    return magic, version, offset, length, digest
