"""Local paths and ``gs://`` URIs behind one small API. Every stage reads and writes through here.

A URI is either a local path (absolute or relative to the working directory) or ``gs://bucket/key``.
Cloud Storage goes through the official ``google-cloud-storage`` client, imported only when a
``gs://`` URI is used, so local runs never need it. The client honours ``STORAGE_EMULATOR_HOST``
(the tests point it at a local fake-gcs-server).

Invariants:
- "Trees" are prefixes: ``upload_tree(local, "gs://b/run/shards")`` writes ``gs://b/run/shards/<rel>``
  for every file under ``local``; ``remove_tree`` deletes every object under that prefix + ``/``.
- Nothing here reads the environment except the Google client itself.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from graphstore.errors import InputDataError, RuntimeFailure

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
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return storage.Client(project="local-emulator", credentials=AnonymousCredentials())
    return storage.Client()


def exists(uri: str) -> bool:
    """True when the file (local) or object (GCS) exists."""
    if not is_gcs(uri):
        return os.path.exists(uri)
    bucket, key = split_gcs(uri)
    return _client().bucket(bucket).blob(key).exists()


def write_text(uri: str, text: str) -> None:
    """Write a small text file (local, parents created) or GCS object."""
    if not is_gcs(uri):
        os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
        with open(uri, "w") as fh:
            fh.write(text)
        return
    bucket, key = split_gcs(uri)
    _client().bucket(bucket).blob(key).upload_from_string(text.encode())


def read_text(uri: str) -> str:
    """The text of a small local file or GCS object; InputDataError naming a missing one."""
    if not is_gcs(uri):
        if not os.path.isfile(uri):
            raise InputDataError(f"input file not found: {uri}")
        with open(uri) as fh:
            return fh.read()
    from google.api_core import exceptions as gexc

    bucket, key = split_gcs(uri)
    try:
        return _client().bucket(bucket).blob(key).download_as_text()
    except gexc.NotFound as exc:
        raise InputDataError(f"input object not found: {uri} ({exc.message})") from None


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
    try:
        _client().bucket(bucket).blob(key).upload_from_filename(local_path)
    except Exception as exc:  # noqa: BLE001 - reported with the object name
        raise RuntimeFailure(f"upload of {uri} failed: {exc}") from exc


def list_names(uri: str) -> list[str]:
    """Sorted names of the files directly under a folder or GCS prefix (empty when missing)."""
    if not is_gcs(uri):
        if not os.path.isdir(uri):
            return []
        return sorted(n for n in os.listdir(uri) if os.path.isfile(os.path.join(uri, n)))
    bucket, prefix = split_gcs(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    blobs = _client().list_blobs(bucket, prefix=prefix, delimiter="/")
    return sorted(b.name[len(prefix):] for b in blobs)


def localize(uri: str, workdir: str) -> str:
    """Return a local path holding the file at ``uri``; GCS objects are streamed into ``workdir``.

    A missing file raises InputDataError naming the URI.
    """
    if not is_gcs(uri):
        if not os.path.isfile(uri):
            raise InputDataError(f"input file not found: {uri}")
        return uri
    from google.api_core import exceptions as gexc

    bucket, key = split_gcs(uri)
    dest = os.path.join(workdir, "gcs", bucket, key)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    try:
        _client().bucket(bucket).blob(key).download_to_filename(dest)
    except gexc.NotFound as exc:
        raise InputDataError(f"input object not found: {uri} ({exc.message})") from None
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
        try:
            bucket.blob(key).upload_from_filename(os.path.join(local_dir, rel))
        except Exception as exc:  # noqa: BLE001 - reported with the object name
            raise RuntimeFailure(f"upload of gs://{bucket_name}/{key} failed: {exc}") from exc


def remove_tree(uri: str) -> None:
    """Delete a local folder or every object under a GCS prefix. Missing is not an error."""
    if not is_gcs(uri):
        shutil.rmtree(uri, ignore_errors=True)
        return
    client = _client()
    bucket_name, prefix = split_gcs(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    for blob in client.list_blobs(bucket_name, prefix=prefix):
        blob.delete()


def remove_file(uri: str) -> None:
    """Delete one local file or GCS object. Missing is not an error."""
    if not is_gcs(uri):
        try:
            os.remove(uri)
        except FileNotFoundError:
            pass
        return
    from google.api_core import exceptions as gexc

    bucket, key = split_gcs(uri)
    try:
        _client().bucket(bucket).blob(key).delete()
    except gexc.NotFound:
        pass


def download_tree(uri: str, local_dir: str) -> None:
    """Copy every object under the GCS prefix ``uri`` into ``local_dir`` (same relative layout)."""
    client = _client()
    bucket_name, prefix = split_gcs(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    for blob in client.list_blobs(bucket_name, prefix=prefix):
        dest = os.path.join(local_dir, blob.name[len(prefix):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        blob.download_to_filename(dest)
