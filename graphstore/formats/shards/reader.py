"""Read and validate a shard set (format in :mod:`graphstore.formats.shards.format`). Storage uses this.

Opening checks the manifest (present, right format, supported schema version, every listed file
present); loading a partition checks the sha256 of each file it reads. A gs:// set is read lazily:
opening downloads only the manifest, and each file is downloaded the first time it is read, so a
reader of one partition (a storage machine) or one id map (export) fetches only that. Any mismatch raises
:class:`ShardFormatError` naming the file, so a half-written or tampered shard set never loads.
Arrays come back as numpy (no torch here); storage converts them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphstore.io import uris
from graphstore.runtime.errors import InputDataError
from graphstore.formats.shards.format import (
    FORMAT_NAME,
    MANIFEST,
    SCHEMA_FIX,
    SCHEMA_VERSION,
    Manifest,
    edge_dir,
    id_map_dir,
    id_map_path,
    label_dir,
    node_dir,
)


class ShardFormatError(InputDataError):
    """A shard set is missing, incomplete, of another schema version, or fails a checksum."""


@dataclass(frozen=True)
class NodeShard:
    ids: np.ndarray  # int64 dense ids this partition owns: its range, ascending
    feats: np.ndarray | None  # float32 [len(ids), feature_dim], row i belongs to ids[i]


@dataclass(frozen=True)
class EdgeShard:
    src: np.ndarray  # int64 dense ids of the source node type
    dst: np.ndarray  # int64 dense ids of the destination node type
    eids: np.ndarray  # int64 global edge ids (contiguous range, see format docs)
    weight: np.ndarray | None  # float32
    feats: np.ndarray | None  # float32 [E, k]


@dataclass(frozen=True)
class LabelShard:
    src: np.ndarray  # int64 anchors (dense ids of the source node type), owned by this partition
    dst: np.ndarray  # int64 label nodes (dense ids of the destination node type)


@dataclass(frozen=True)
class PartitionData:
    partition: int
    nodes: dict[str, NodeShard]
    edges: dict[str, EdgeShard]
    labels: dict[str, LabelShard]  # supervision edge types, placed by source (anchor)


_NUMPY_OF_ARROW = {pa.int64(): np.dtype(np.int64), pa.int32(): np.dtype(np.int32),
                   pa.float32(): np.dtype(np.float32), pa.float64(): np.dtype(np.float64)}


def column_numpy(column: pa.Array, dtype: type) -> np.ndarray:
    """A record batch's ``column`` as a numpy array of ``dtype``: a read-only view of Arrow's
    buffer when the column is of a fixed-width numeric type without nulls (converted to
    ``dtype`` only when the types differ); ``Array.to_numpy()`` otherwise. Not ``to_numpy()``
    first: pyarrow's pandas shim then imports pandas, 24 MiB of anonymous memory in a storage
    machine's main process, which never needs it (measured with torch loaded, 2026-12-06)."""
    src = _NUMPY_OF_ARROW.get(column.type)
    if src is None or column.null_count:
        return column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    view = np.frombuffer(column.buffers()[1], dtype=src, count=len(column),
                         offset=column.offset * src.itemsize)
    return view.astype(dtype, copy=False)


def sha256_file(path: str, chunk_bytes: int = 4 << 20) -> str:
    """Hex sha256 of a file, read in chunks (memory stays flat)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def crc32c_file(path: str, chunk_bytes: int = 4 << 20) -> str:
    """The CRC32C of a file as 8 hex digits (big-endian, as Cloud Storage keeps it), read in
    chunks."""
    import google_crc32c

    digest = google_crc32c.Checksum()
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            digest.update(block)
    return digest.digest().hex()


def _feature_matrix(table: pa.Table, width: int) -> np.ndarray:
    """Columns ``f_0 .. f_{width-1}`` as one float32 ``[rows, width]`` matrix."""
    out = np.empty((table.num_rows, width), dtype=np.float32)
    for i in range(width):
        out[:, i] = table.column(f"f_{i}").to_numpy()
    return out


def _rows_of_range(ids: np.ndarray, lo: int, hi: int, where: str) -> np.ndarray:
    """The row of each of ``ids`` in the range ``[lo, hi)`` (``id - lo``); ShardFormatError
    unless ``ids`` holds every id of the range exactly once."""
    rows = ids - lo
    if len(ids) != hi - lo or (len(ids) and (rows.min() < 0 or rows.max() >= hi - lo)) or \
            (len(ids) and np.bincount(rows, minlength=hi - lo).max() != 1):
        raise ShardFormatError(f"{where}: its int_id column does not hold each id of the "
                               f"partition's range [{lo}, {hi}) exactly once; re-partition")
    return rows


def current_version_uri(uri: str) -> str:
    """The folder to read for ``uri``: ``uri`` itself when it holds a manifest (one version, or
    a set of an older layout, which the schema check then names), else the version the root's
    ``CURRENT`` pointer names. ShardFormatError when neither exists."""
    from graphstore.runtime.errors import UsageError
    from graphstore.formats.shards.publish import POINTER, read_pointer

    if uris.exists(uris.join(uri, MANIFEST)):
        return uri
    try:
        version = read_pointer(uri)
    except UsageError as exc:
        raise ShardFormatError(str(exc)) from None
    if version is None:
        raise ShardFormatError(
            f"{uris.join(uri, POINTER)} not found: not a complete shard set (the partition stage "
            "publishes it last; rerun `python -m components.partition`)")
    return uris.join(uri, version)


def _check_counts(manifest: Manifest, uri: str) -> None:
    """The manifest's node counts agree with the rows of its id maps, and its per-partition
    counts add up (a set assembled from mismatched inputs never opens)."""
    for nt, info in manifest.node_types.items():
        if len(info.counts_per_partition) != manifest.num_partitions or \
                sum(info.counts_per_partition) != info.count:
            raise ShardFormatError(f"{uris.join(uri, MANIFEST)}: node type {nt!r} counts "
                                   f"{info.count} but its {len(info.counts_per_partition)} "
                                   f"partitions hold {sum(info.counts_per_partition)}; re-partition")
        rels = manifest.id_map_files(nt)
        if not rels:
            raise ShardFormatError(f"{uris.join(uri, id_map_path(nt))}: missing from the "
                                   f"manifest, but node type {nt!r} has {info.count} nodes; "
                                   "re-partition")
        rows = sum(manifest.files[rel].rows or 0 for rel in rels)
        if rows != info.count:
            where = rels[0] if len(rels) == 1 else f"{id_map_dir(nt)}/ ({len(rels)} files)"
            raise ShardFormatError(f"{uris.join(uri, where)}: {rows} rows, but node type {nt!r} "
                                   f"has {info.count} nodes; re-partition")
    for et, info in manifest.edge_types.items():
        if sum(info.counts_per_partition) != info.count:
            raise ShardFormatError(f"{uris.join(uri, MANIFEST)}: edge type {et!r} counts "
                                   f"{info.count} but its partitions hold "
                                   f"{sum(info.counts_per_partition)}; re-partition")


def _read_manifest(path: str) -> Manifest:
    """Parse ``manifest.json`` at the local ``path``: our format, our schema version, well formed."""
    try:
        with open(path) as fh:
            raw = json.load(fh)
        if raw.get("format") != FORMAT_NAME:
            raise ShardFormatError(f"{path}: format is {raw.get('format')!r}, expected {FORMAT_NAME!r}")
        if raw.get("schema_version") != SCHEMA_VERSION:
            raise ShardFormatError(
                f"{path}: schema_version {raw.get('schema_version')!r} is not supported "
                f"(this version reads {SCHEMA_VERSION}: each partition owns one range of dense "
                f"ids); {SCHEMA_FIX}"
            )
        return Manifest.from_dict(raw)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, ShardFormatError):
            raise
        raise ShardFormatError(f"{path}: malformed manifest ({exc!r})") from None


def _check_files(manifest: Manifest, uri: str, root: str, sizes: dict[str, int] | None) -> None:
    """Every file the manifest lists is present (``sizes``: the remote listing, at the byte size
    the manifest gives; None: look in the local ``root``). Checksums are checked on read."""
    if sizes is None:
        missing = [rel for rel in manifest.files if not os.path.isfile(os.path.join(root, rel))]
    else:
        missing = [rel for rel in manifest.files if rel not in sizes]
    if missing:
        raise ShardFormatError(
            f"shard set {uri} is incomplete: {len(missing)} file(s) listed in {MANIFEST} are "
            f"missing, first {uris.join(uri, missing[0])}"
        )
    for rel, entry in manifest.files.items():
        if sizes is not None and sizes[rel] != entry.bytes:
            raise ShardFormatError(f"{uris.join(uri, rel)} is {sizes[rel]} bytes, {MANIFEST} says "
                                   f"{entry.bytes} (re-partition)")


def is_complete(uri: str) -> bool:
    """True when ``uri`` names a published shard set (its manifest is reachable); no checksums."""
    try:
        return uris.exists(uris.join(current_version_uri(uri), MANIFEST))
    except ShardFormatError:
        return False


class ShardSet:
    """A validated, opened shard set. Use :meth:`open`; :meth:`close` (or ``with``) removes the
    local copies of a gs:// set.

    Reads are lazy: a local set is read in place; a gs:// set is opened from its manifest and one
    listing (every listed file present, at the size the manifest gives), and each file is
    downloaded the first time a read needs it, then kept under :attr:`root`. So a storage machine
    fetches only ``manifest.json`` and its own ``part_<p>/`` files, and the
    export task only the id map of its node type (:meth:`fetched` lists what came down). Every
    read of a file checks its sha256 against the manifest unless ``verify`` is False.
    """

    def __init__(self, root: str, manifest: Manifest, source_uri: str, *,
                 remote: bool = False) -> None:
        self.root = root
        self.manifest = manifest
        self.source_uri = source_uri
        self._remote = remote  # files come from source_uri (gs://) into root on first use
        self._fetched: list[str] = []

    @classmethod
    def open(cls, uri: str, *, workdir: str | None = None) -> "ShardSet":
        """Open the shard set at ``uri``: a root (the version its ``CURRENT`` pointer names) or
        one version folder. A gs:// set gets a new local folder under ``workdir`` (default: the
        temp folder) where files land as they are read; nothing but the manifest is downloaded
        here."""
        uri = current_version_uri(uri)
        not_found = ShardFormatError(
            f"{uris.join(uri, MANIFEST)} not found: not a complete shard set "
            "(the partition stage writes it last; rerun `python -m components.partition`)")
        if uris.is_gcs(uri):
            root = tempfile.mkdtemp(prefix="shards-", dir=workdir)
            try:
                uris.get_file(uris.join(uri, MANIFEST), os.path.join(root, MANIFEST))
                sizes = uris.list_sizes(uri)
            except InputDataError:
                shutil.rmtree(root, ignore_errors=True)
                raise not_found from None
            except BaseException:
                shutil.rmtree(root, ignore_errors=True)
                raise
        else:
            root, sizes = uri, None
        path = os.path.join(root, MANIFEST)
        if not os.path.isfile(path):
            raise not_found
        try:
            manifest = _read_manifest(path)
            _check_files(manifest, uri, root, sizes)
            _check_counts(manifest, uri)
        except ShardFormatError:
            if sizes is not None:
                shutil.rmtree(root, ignore_errors=True)
            raise
        return cls(root, manifest, uri, remote=sizes is not None)

    def close(self) -> None:
        """Remove the local copies of a gs:// set (its folder under ``workdir``); a local set is
        left as it is. Reads after close download again."""
        if self._remote:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "ShardSet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fetched(self) -> list[str]:
        """Relative paths downloaded so far, in download order (empty for a local set)."""
        return list(self._fetched)

    def files_of_partition(self, partition: int) -> dict[str, int]:
        """``{relative path: bytes}`` a storage machine reads for ``partition``: its
        ``part_<p>/`` files (the manifest aside)."""
        prefix = f"part_{partition}/"
        return {rel: e.bytes for rel, e in self.manifest.files.items() if rel.startswith(prefix)}

    def _local(self, rel: str) -> str:
        """The local path of ``rel``, downloaded first when the set is remote."""
        path = os.path.join(self.root, rel)
        if self._remote and not os.path.isfile(path):
            uris.get_file(uris.join(self.source_uri, rel), path)
            self._fetched.append(rel)
        return path

    # -- validation ---------------------------------------------------------------------------
    def _verified(self, rel: str) -> str:
        entry = self.manifest.files.get(rel)
        if entry is None:
            raise ShardFormatError(f"{uris.join(self.source_uri, rel)} is not listed in {MANIFEST}")
        path = self._local(rel)
        kind, want = ("sha256", entry.sha256) if entry.sha256 else ("crc32c", entry.crc32c)
        actual = sha256_file(path) if kind == "sha256" else crc32c_file(path)
        if actual != want:
            raise ShardFormatError(
                f"checksum mismatch for {uris.join(self.source_uri, rel)}: manifest says {kind} "
                f"{want[:12]}..., file has {actual[:12]}... (re-partition)"
            )
        return path

    def _files_under(self, rel_dir: str) -> list[str]:
        prefix = rel_dir + "/"
        return sorted(rel for rel in self.manifest.files if rel.startswith(prefix))

    def _read_dir(self, rel_dir: str, verify: bool) -> pa.Table | None:
        rels = self._files_under(rel_dir)
        if not rels:
            return None
        paths = [self._verified(r) if verify else self._local(r) for r in rels]
        return pa.concat_tables([pq.read_table(p) for p in paths])

    # -- reading ------------------------------------------------------------------------------
    def stream_dir(self, rel_dir: str, columns: list[str], *, batch_rows: int = 1 << 20,
                   verify: bool = True) -> Iterator[pa.RecordBatch]:
        """Record batches of ``columns`` of the files under ``rel_dir`` (e.g.
        ``format.edge_dir(p, et)``), in the order edge ids follow (files sorted by name, rows in
        order), at most ``batch_rows`` rows each: memory stays at one batch, whatever the
        partition's size. Each file's checksum is checked before it is read unless ``verify``
        is False. Nothing when the folder has no files (a partition without rows)."""
        for rel in self._files_under(rel_dir):
            path = self._verified(rel) if verify else self._local(rel)
            yield from pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=columns)

    def id_map(self, node_type: str, verify: bool = True) -> pa.Table:
        """Table (int_id, raw_id) sorted by int_id (row ``i`` is dense id ``i``): the whole id map
        in memory (small graphs and tests; at scale, join :meth:`id_map_files` in a query
        engine instead)."""
        table = pa.concat_tables([pq.read_table(p) for p in self.id_map_files(node_type, verify)])
        return table.sort_by("int_id")

    def id_map_files(self, node_type: str, verify: bool = True) -> list[str]:
        """Local paths of ``node_type``'s id map files (``Manifest.id_map_files``; downloaded
        first from gs://, each checksum read in chunks unless ``verify`` is False): rows
        ``(int_id, raw_id)``, one per node, in no particular order."""
        return [self._verified(rel) if verify else self._local(rel)
                for rel in self.manifest.id_map_files(node_type)]

    def load_partition(self, partition: int, verify: bool = True) -> PartitionData:
        """Arrays of one partition, checksums verified unless ``verify`` is False."""
        m = self.manifest
        if not 0 <= partition < m.num_partitions:
            raise ShardFormatError(
                f"partition {partition} does not exist in {self.source_uri} "
                f"(it has {m.num_partitions}: 0..{m.num_partitions - 1})"
            )
        nodes = {nt: self._node_shard(partition, nt, info, verify)
                 for nt, info in m.node_types.items()}
        edges = {et: self._edge_shard(partition, et, info, verify)
                 for et, info in m.edge_types.items()}
        labels = {et: self._label_shard(partition, et, info, edges, verify)
                  for et, info in m.edge_types.items() if info.labels_per_partition is not None}
        return PartitionData(partition, nodes, edges, labels)

    def _node_shard(self, partition: int, nt: str, info: Any, verify: bool) -> NodeShard:
        """Ids (the partition's range) and features (rows placed by id) of one node type."""
        m = self.manifest
        lo, hi = m.node_bounds(nt)[partition:partition + 2]
        table = self._read_dir(node_dir(partition, nt), verify)
        ids = np.arange(lo, hi, dtype=np.int64)
        feats = None if not info.feature_dim else np.empty((hi - lo, info.feature_dim), np.float32)
        if table is not None:
            read = table.column("int_id").to_numpy().astype(np.int64, copy=False)
            rows = _rows_of_range(read, lo, hi, uris.join(self.source_uri, node_dir(partition, nt)))
            if feats is not None:
                feats[rows] = _feature_matrix(table, info.feature_dim)
        elif hi > lo:
            raise ShardFormatError(f"{uris.join(self.source_uri, node_dir(partition, nt))}: "
                                   f"no files, but partition {partition} owns {hi - lo} "
                                   f"{nt!r} nodes ({MANIFEST})")
        return NodeShard(ids, feats)

    def _edge_shard(self, partition: int, et: str, info: Any, verify: bool) -> EdgeShard:
        """Ends, ids (the partition's id range), weights and features of one edge type."""
        m = self.manifest
        table = self._read_dir(edge_dir(partition, et), verify)
        base = m.edge_id_base(et, partition)
        count = info.counts_per_partition[partition]
        if table is None:
            src = dst = np.empty(0, np.int64)
        else:
            src = table.column("src").to_numpy().astype(np.int64, copy=False)
            dst = table.column("dst").to_numpy().astype(np.int64, copy=False)
        if len(src) != count:
            raise ShardFormatError(
                f"{uris.join(self.source_uri, edge_dir(partition, et))}: {len(src)} rows, "
                f"manifest says {count}"
            )
        weight = feats = None
        if info.has_weight:
            weight = (np.empty(0, np.float32) if table is None
                      else table.column("weight").to_numpy().astype(np.float32, copy=False))
        if info.feature_dim:
            feats = (np.empty((0, info.feature_dim), np.float32) if table is None
                     else _feature_matrix(table, info.feature_dim))
        return EdgeShard(src, dst, np.arange(base, base + count, dtype=np.int64), weight, feats)

    def _label_shard(self, partition: int, et: str, info: Any, edges: dict[str, EdgeShard],
                     verify: bool) -> LabelShard:
        """(anchor, label) pairs of one supervision type: its label files, or the reverse
        type's edges flipped back (``labels_from``)."""
        if info.labels_from:
            rev = edges[info.labels_from]
            return LabelShard(rev.dst, rev.src)
        table = self._read_dir(label_dir(partition, et), verify)
        if table is None:
            return LabelShard(np.empty(0, np.int64), np.empty(0, np.int64))
        return LabelShard(table.column("src").to_numpy().astype(np.int64, copy=False),
                          table.column("dst").to_numpy().astype(np.int64, copy=False))
