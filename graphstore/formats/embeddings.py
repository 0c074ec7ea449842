"""The embeddings format (schema_version 2): what the inferencer writes and export reads.

Per node type, under ``<run-dir>/embeddings/<node_type>/`` (``RunPaths.embeddings``,
graphstore.formats.run_paths)::

    attempt-<UTC>-<hex>/part-<rank>-of-<world>.parquet
                                     one per compute rank of one inference attempt: int_id INT64
                                     (dense id), embedding LIST<FLOAT32> (all of one length, ``dim``)
    _SUCCESS                         JSON, the pointer: written last and only when every node of
                                     the type appears exactly once over the attempt's parts:
                                     {schema_version, node_type, count, dim, files (paths relative
                                      to this folder), checkpoint_step, finished_at (UTC ISO
                                      8601), seconds}

Publishing is crash-atomic: an attempt writes only into its own ``attempt-*`` folder, so the
previous ``_SUCCESS`` and the files it lists stay valid until the new ``_SUCCESS`` replaces it in
one atomic step (local: rename; gs://: one object upload); only then are other attempts' folders
removed. A kill at any moment leaves the old complete set or the new one. A folder without
``_SUCCESS`` holds no complete embeddings and must not be read. ``files`` entries are checked
against the names this module writes (no ``..``, no absolute paths) before anything is read.
Schema 1 (flat ``part-*`` files beside ``_SUCCESS``) is still read.
This module imports neither torch nor GLT.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass

import numpy as np

from graphstore.io import uris
from graphstore.runtime.errors import RuntimeFailure
from graphstore.formats.run_paths import RunPaths

SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)
SUCCESS = "_SUCCESS"
ATTEMPT_PREFIX = "attempt-"
_LISTED_FILE = re.compile(r"^(attempt-\d{8}T\d{6}Z-[0-9a-f]{8}/)?part-\d{5}-of-\d{5}\.parquet$")


def embeddings_uri(run_dir: str, node_type: str) -> str:
    """Where the embeddings of ``node_type`` go: ``<run-dir>/embeddings/<node_type>``
    (``RunPaths(run_dir).embeddings(node_type)``)."""
    return RunPaths(run_dir).embeddings(node_type)


def shard_name(rank: int, world: int) -> str:
    """File name of compute rank ``rank``'s part (of ``world`` ranks)."""
    return f"part-{rank:05d}-of-{world:05d}.parquet"


def write_part(uri: str, ids: np.ndarray, embeddings: np.ndarray) -> None:
    """Write one rank's part: ``ids`` int64 [n], ``embeddings`` float32 [n, dim]. Written to a
    local temporary file, then put in place whole (a reader never sees half a part)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dim = embeddings.shape[1] if embeddings.ndim == 2 else 0
    flat = pa.array(np.ascontiguousarray(embeddings, dtype=np.float32).reshape(-1), type=pa.float32())
    offsets = pa.array(np.arange(0, (len(ids) + 1) * dim, dim, dtype=np.int32) if dim
                       else np.zeros(len(ids) + 1, np.int32), type=pa.int32())
    table = pa.table({"int_id": pa.array(np.asarray(ids, dtype=np.int64), type=pa.int64()),
                      "embedding": pa.ListArray.from_arrays(offsets, flat)})
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "part.parquet")
        pq.write_table(table, local)
        uris.put_file(local, uri)


def is_shard_name(name: str) -> bool:
    return name.startswith("part-") and name.endswith(".parquet")


def new_attempt_name(now: datetime.datetime | None = None) -> str:
    """A fresh attempt folder name, ``attempt-<UTC>-<hex>`` (unique per attempt)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return f"{ATTEMPT_PREFIX}{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(4)}"


def check_listed_file(marker_uri: str, name: object) -> str:
    """``name`` from a ``_SUCCESS`` file list, when it is a part file this module writes (so it
    stays inside the folder); RuntimeFailure naming the marker otherwise."""
    if not isinstance(name, str) or not _LISTED_FILE.match(name):
        raise RuntimeFailure(f"{marker_uri} lists {str(name)[:120]!r}, which is not an embeddings "
                             "part file of this folder; rerun the infer stage")
    return name


@dataclass(frozen=True, kw_only=True, slots=True)
class EmbeddingsMarker:
    """The ``_SUCCESS`` marker of one node type's embeddings (module docs). ``files`` are paths
    relative to the node type's folder, each a part file this module writes."""

    node_type: str
    count: int  # rows over all files: every node of the type exactly once
    dim: int
    files: tuple[str, ...]
    checkpoint_step: int
    finished_at: datetime.datetime  # UTC
    seconds: float  # the inference attempt's duration
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps({"schema_version": self.schema_version, "node_type": self.node_type,
                           "count": self.count, "dim": self.dim, "files": list(self.files),
                           "checkpoint_step": self.checkpoint_step,
                           "finished_at": self.finished_at.isoformat(timespec="seconds"),
                           "seconds": self.seconds}, indent=1)

    @classmethod
    def from_json(cls, uri: str, text: str, node_type: str) -> EmbeddingsMarker:
        """The marker read from ``uri``, checked: RuntimeFailure when it is not JSON, of an
        unknown schema, lacks a field, or lists files outside the folder. Schema 1 markers have
        no ``node_type``, ``checkpoint_step`` or ``seconds`` (``node_type`` is the folder's)."""
        try:
            raw = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _not_a_marker(uri, exc) from None
        if not isinstance(raw, dict):
            raise RuntimeFailure(f"{uri} is not a JSON object; rerun the infer stage")
        if raw.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
            raise RuntimeFailure(f"{uri}: schema_version {raw.get('schema_version')!r}, this "
                                 f"version reads {READABLE_SCHEMA_VERSIONS}; rerun the infer stage")
        missing = [k for k in ("count", "dim", "files", "finished_at") if k not in raw]
        if missing or not isinstance(raw["files"], list):
            raise RuntimeFailure(f"{uri} lacks {', '.join(missing) or 'a files list'}; rerun the "
                                 "infer stage")
        files = tuple(check_listed_file(uri, name) for name in raw["files"])
        try:
            return cls(node_type=str(raw.get("node_type", node_type)), count=int(raw["count"]),
                       dim=int(raw["dim"]), files=files,
                       checkpoint_step=int(raw.get("checkpoint_step", 0)),
                       finished_at=datetime.datetime.fromisoformat(raw["finished_at"]),
                       seconds=float(raw.get("seconds", 0.0)),
                       schema_version=int(raw["schema_version"]))
        except (TypeError, ValueError) as exc:
            raise RuntimeFailure(f"{uri}: {exc}; rerun the infer stage") from None


def read_success(run_dir: str, node_type: str) -> EmbeddingsMarker:
    """The ``_SUCCESS`` marker of a node type's embeddings, checked
    (:meth:`EmbeddingsMarker.from_json`); RuntimeFailure when it is missing."""
    uri = uris.join(embeddings_uri(run_dir, node_type), SUCCESS)
    if not uris.exists(uri):
        raise RuntimeFailure(f"no complete embeddings for node type {node_type!r}: {uri} is missing "
                             "(run the infer stage; a failed or interrupted run leaves no marker)")
    try:
        text = uris.read_text(uri)
    except UnicodeDecodeError as exc:
        raise _not_a_marker(uri, exc) from None
    return EmbeddingsMarker.from_json(uri, text, node_type)


def _not_a_marker(uri: str, exc: BaseException) -> RuntimeFailure:
    return RuntimeFailure(f"{uri} is not a JSON embeddings marker ({type(exc).__name__}); rerun "
                          "the infer stage")


def publish_success(out_dir: str, marker: EmbeddingsMarker) -> None:
    """Write ``_SUCCESS`` (the atomic switch to the attempt it lists), then remove every other
    attempt folder and flat part files of schema 1 (module docs: order matters)."""
    from graphstore.runtime.pause_points import pause_point

    pause_point("embeddings:before-success")
    uris.write_text(uris.join(out_dir, SUCCESS), marker.to_json())
    pause_point("embeddings:switched")
    keep = {name.split("/", 1)[0] for name in marker.files if "/" in name}
    for name in uris.list_dirs(out_dir):
        if name.startswith(ATTEMPT_PREFIX) and name not in keep:
            uris.remove_tree(uris.join(out_dir, name))
    for name in uris.list_names(out_dir):
        if is_shard_name(name):
            uris.remove_file(uris.join(out_dir, name))
