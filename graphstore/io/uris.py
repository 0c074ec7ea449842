"""Local paths and ``gs://`` URIs behind one small API. Every stage reads and writes through here.

A URI is either a local path (absolute or relative to the working directory) or ``gs://bucket/key``.
Cloud Storage goes through the official ``google-cloud-storage`` client, imported only when a
``gs://`` URI is used, so local runs never need it. The client honours ``STORAGE_EMULATOR_HOST``
(the tests point it at a local fake-gcs-server).

Invariants:
- "Trees" are prefixes: ``upload_tree(local, "gs://b/run/shards")`` writes ``gs://b/run/shards/<rel>``
  for every file under ``local``; ``remove_tree`` deletes every object under that prefix + ``/``.
- The client comes from graphstore.io.gcp (the emulator's when ``STORAGE_EMULATOR_HOST`` is set).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from graphstore.runtime.errors import InputDataError, RuntimeFailure

if TYPE_CHECKING:  # pragma: no cover
    from google.cloud import storage

GCS_SCHEME = "gs://"


def is_gcs(uri: str) -> bool:
    """True for ``gs://`` URIs."""
    return uri.startswith(GCS_SCHEME)


def join(base: str, *parts: str) -> str:
    """Join path segments with ``/`` for GCS and ``os.path.join`` for local paths."""
    if is_gcs(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return os.path.join(base, *parts)


def basename(uri: str) -> str:
    """The last segment of a path or URI (``gs://b/runs/r1`` -> ``r1``)."""
    return uri.rstrip("/").rsplit("/", 1)[-1] if is_gcs(uri) else os.path.basename(uri.rstrip("/"))


def split_gcs(uri: str) -> tuple[str, str]:
    """``gs://bucket/a/b`` -> ``("bucket", "a/b")``. Raises InputDataError for a malformed URI."""
    if not is_gcs(uri):
        raise InputDataError(f"not a gs:// URI: {uri!r}")
    bucket, _, key = uri[len(GCS_SCHEME):].partition("/")
    if not bucket:
        raise InputDataError(f"gs:// URI has no bucket: {uri!r}")
    return bucket, key


def _client() -> "storage.Client":
    from graphstore.io.gcp import storage_client

    return storage_client()


def _retry():
    """Retry policy for every call, uploads included: our writes put whole objects with contents
    fixed by their inputs, so repeating one after a transient error is safe (the library retries
    uploads only when a generation precondition is given)."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY


@contextlib.contextmanager
def _gcs_errors(uri: str, action: str, missing_ok: bool = False) -> Iterator[None]:
    """Turn the client's errors into ours, naming the URI: a missing object or bucket is an
    InputDataError (what to fix), anything else a RuntimeFailure. ``missing_ok``: a missing
    object (in a bucket that exists) ends the block quietly instead."""
    from google.api_core import exceptions as gexc

    try:
        yield
    except gexc.NotFound:
        bucket, _ = split_gcs(uri)
        try:
            have_bucket = _client().bucket(bucket).exists()
        except gexc.GoogleAPIError:
            have_bucket = True  # unknown: report the object
        if not have_bucket:
            raise InputDataError(f"{action} {uri}: bucket {bucket} does not exist (or this "
                                 "account cannot see it)") from None
        if missing_ok:
            return
        raise InputDataError(f"{action} {uri}: object not found") from None
    except gexc.Forbidden as exc:
        raise RuntimeFailure(f"{action} {uri}: permission denied ({exc.message})") from None
    except gexc.GoogleAPIError as exc:
        raise RuntimeFailure(f"{action} {uri} failed: {exc}") from exc


def exists(uri: str) -> bool:
    """True when the file (local) or object (GCS) exists."""
    if not is_gcs(uri):
        return os.path.exists(uri)
    bucket, key = split_gcs(uri)
    with _gcs_errors(uri, "checking"):
        return _client().bucket(bucket).blob(key).exists(retry=_retry())


def write_text(uri: str, text: str) -> None:
    """Write a small text file (local: parents created, written to a temporary name and renamed,
    so a reader never sees part of it) or GCS object (an upload is atomic). A kill at any moment
    leaves the old text or the new (pause point ``write_text:<file name>`` for the fault tests)."""
    from graphstore.runtime.pause_points import pause_point

    if not is_gcs(uri):
        os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
        tmp = f"{uri}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(text)
        pause_point(f"write_text:{basename(uri)}")
        os.replace(tmp, uri)
        return
    bucket, key = split_gcs(uri)
    pause_point(f"write_text:{basename(uri)}")
    with _gcs_errors(uri, "writing"):
        _client().bucket(bucket).blob(key).upload_from_string(text.encode(), retry=_retry())


def read_text(uri: str) -> str:
    """The text of a small local file or GCS object; InputDataError naming a missing one."""
    if not is_gcs(uri):
        if not os.path.isfile(uri):
            raise InputDataError(f"input file not found: {uri}")
        with open(uri) as fh:
            return fh.read()
    bucket, key = split_gcs(uri)
    with _gcs_errors(uri, "reading"):
        return _client().bucket(bucket).blob(key).download_as_text(retry=_retry())


def put_file(local_path: str, uri: str) -> None:
    """Copy a local file to ``uri``; a reader of ``uri`` never sees part of it (local: copy to a
    temporary name beside it, then rename; GCS: an object upload is atomic)."""
    if not is_gcs(uri):
        os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
        tmp = f"{uri}.tmp{os.getpid()}"
        shutil.copyfile(local_path, tmp)
        os.replace(tmp, uri)
        return
    bucket, key = split_gcs(uri)
    with _gcs_errors(uri, "uploading"):  # files over 8 MiB go up in chunks (resumable upload)
        _client().bucket(bucket).blob(key).upload_from_filename(local_path, retry=_retry())


def list_names(uri: str) -> list[str]:
    """Sorted names of the files directly under a folder or GCS prefix (empty when missing)."""
    return _list_children(uri)[0]


def list_dirs(uri: str) -> list[str]:
    """Sorted names of the sub-folders directly under a folder or GCS prefix (empty when missing).
    On GCS a "folder" is any prefix followed by ``/`` that has at least one object under it."""
    return _list_children(uri)[1]


def _list_children(uri: str) -> tuple[list[str], list[str]]:
    """(file names, sub-folder names) directly under ``uri``, each sorted; one GCS listing."""
    if not is_gcs(uri):
        if not os.path.isdir(uri):
            return [], []
        names = os.listdir(uri)
        return (sorted(n for n in names if os.path.isfile(os.path.join(uri, n))),
                sorted(n for n in names if os.path.isdir(os.path.join(uri, n))))
    bucket, prefix = split_gcs(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    with _gcs_errors(uri, "listing"):
        blobs = _client().list_blobs(bucket, prefix=prefix, delimiter="/", retry=_retry())
        files = sorted(b.name[len(prefix):] for b in blobs)  # reading the pages fills prefixes
        return files, sorted(p[len(prefix):].rstrip("/") for p in blobs.prefixes)


def create_exclusive(uri: str, text: str) -> bool:
    """Create a small file only if nothing is there yet: True when this call created it, False
    when it already existed. Atomic against a concurrent caller (local: ``O_EXCL``; GCS: an
    upload with the ``if_generation_match=0`` precondition)."""
    if not is_gcs(uri):
        os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
        try:
            fd = os.open(uri, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return True
    from google.api_core import exceptions as gexc

    bucket, key = split_gcs(uri)
    with _gcs_errors(uri, "creating"):
        try:
            _client().bucket(bucket).blob(key).upload_from_string(
                text.encode(), if_generation_match=0, retry=_retry())
        except gexc.PreconditionFailed:
            return False
    return True


def localize(uri: str, workdir: str) -> str:
    """Return a local path holding the file at ``uri``; GCS objects are streamed into ``workdir``.

    A missing file raises InputDataError naming the URI.
    """
    if not is_gcs(uri):
        if not os.path.isfile(uri):
            raise InputDataError(f"input file not found: {uri}")
        return uri
    bucket, key = split_gcs(uri)
    dest = os.path.join(workdir, "gcs", bucket, key)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with _gcs_errors(uri, "downloading"):  # streamed to the file in chunks
        _client().bucket(bucket).blob(key).download_to_filename(dest, retry=_retry())
    return dest


def iter_files(local_dir: str) -> Iterator[str]:
    """Relative paths (``/``-separated, sorted) of every file under ``local_dir``."""
    root = Path(local_dir)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        yield path.relative_to(root).as_posix()


def upload_tree(local_dir: str, uri: str, *, last: tuple[str, ...] = ()) -> None:
    """Copy every file under ``local_dir`` to the prefix ``uri``; files named in ``last`` go last.

    Used so that a manifest or ``_SUCCESS`` marker lands only after everything it describes.
    """
    client = _client()
    bucket_name, prefix = split_gcs(uri)
    bucket = client.bucket(bucket_name)
    rels = [r for r in iter_files(local_dir) if r not in last] + [r for r in last]
    for rel in rels:
        key = f"{prefix.rstrip('/')}/{rel}" if prefix else rel
        with _gcs_errors(f"gs://{bucket_name}/{key}", "uploading"):
            bucket.blob(key).upload_from_filename(os.path.join(local_dir, rel), retry=_retry())


def remove_tree(uri: str) -> None:
    """Delete a local folder or every object under a GCS prefix. Missing is not an error."""
    if not is_gcs(uri):
        shutil.rmtree(uri, ignore_errors=True)
        return
    client = _client()
    bucket_name, prefix = split_gcs(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    with _gcs_errors(uri, "deleting"):
        for blob in client.list_blobs(bucket_name, prefix=prefix, retry=_retry()):
            blob.delete(retry=_retry())


def remove_file(uri: str) -> None:
    """Delete one local file or GCS object. Missing is not an error."""
    if not is_gcs(uri):
        try:
            os.remove(uri)
        except FileNotFoundError:
            pass
        return
    bucket, key = split_gcs(uri)
    with _gcs_errors(uri, "deleting", missing_ok=True):
        _client().bucket(bucket).blob(key).delete(retry=_retry())


def list_sizes(uri: str) -> dict[str, int]:
    """Every file under a folder or GCS prefix, at any depth: ``{relative path: bytes}`` (``/``
    separators; empty when missing). One paged GCS listing; nothing is downloaded."""
    if not is_gcs(uri):
        if not os.path.isdir(uri):
            return {}
        return {rel: os.path.getsize(os.path.join(uri, rel)) for rel in iter_files(uri)}
    bucket_name, prefix = split_gcs(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    with _gcs_errors(uri, "listing"):
        return {b.name[len(prefix):]: int(b.size or 0)
                for b in _client().list_blobs(bucket_name, prefix=prefix, retry=_retry())}


@dataclass(frozen=True)
class ObjectInfo:
    """A GCS object as its listing describes it: ``bytes`` and ``crc32c`` (8 hex digits,
    big-endian: the checksum GCS keeps for every object, decoded from its base64)."""

    bytes: int
    crc32c: str


def list_objects(uri: str) -> dict[str, ObjectInfo]:
    """Every object under the GCS prefix ``uri``, at any depth, with its size and crc32c:
    ``{relative path: ObjectInfo}``. One paged listing; nothing is downloaded."""
    bucket_name, prefix = split_gcs(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    with _gcs_errors(uri, "listing"):
        return {b.name[len(prefix):]: ObjectInfo(int(b.size or 0),
                                                 base64.b64decode(b.crc32c or "").hex())
                for b in _client().list_blobs(bucket_name, prefix=prefix, retry=_retry())}


def read_range(uri: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of one GCS object (one ranged read)."""
    bucket, key = split_gcs(uri)
    with _gcs_errors(uri, "reading"):
        return _client().bucket(bucket).blob(key).download_as_bytes(
            start=start, end=end - 1, retry=_retry())


def parquet_rows(uri: str, size: int | None = None) -> int:
    """Rows of the Parquet object ``uri`` (of ``size`` bytes; None: asked of GCS) from its footer
    alone: two ranged reads of its last bytes, whatever the file's size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if size is None:
        bucket, key = split_gcs(uri)
        with _gcs_errors(uri, "reading"):
            blob = _client().bucket(bucket).get_blob(key, retry=_retry())
        if blob is None:
            raise InputDataError(f"{uri} not found")
        size = int(blob.size or 0)
    if size < 12:
        raise RuntimeFailure(f"{uri}: {size} bytes is not a Parquet file")
    tail = read_range(uri, size - 8, size)
    footer = int.from_bytes(tail[:4], "little")
    if tail[4:] != b"PAR1" or footer + 12 > size:
        raise RuntimeFailure(f"{uri}: not a Parquet file (no footer)")
    meta = read_range(uri, size - 8 - footer, size)
    return pq.read_metadata(pa.BufferReader(b"PAR1" + meta)).num_rows


def get_file(uri: str, dest: str) -> None:
    """Download one GCS object to the local path ``dest`` (parents created). The object lands
    under a temporary name and is renamed, so ``dest`` exists only complete; a missing object is
    an InputDataError naming it."""
    bucket, key = split_gcs(uri)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    tmp = f"{dest}.part{os.getpid()}"
    try:
        with _gcs_errors(uri, "downloading"):  # streamed to the file in chunks
            _client().bucket(bucket).blob(key).download_to_filename(tmp, retry=_retry())
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def download_tree(uri: str, local_dir: str) -> None:
    """Copy every object under the GCS prefix ``uri`` into ``local_dir`` (same relative layout)."""
    client = _client()
    bucket_name, prefix = split_gcs(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    with _gcs_errors(uri, "downloading"):
        for blob in client.list_blobs(bucket_name, prefix=prefix, retry=_retry()):
            dest = os.path.join(local_dir, blob.name[len(prefix):])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            blob.download_to_filename(dest, retry=_retry())
