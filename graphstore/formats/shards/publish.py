"""Crash-atomic publishing of shard sets: versioned folders under one root, a pointer written last.

Layout of a shard-set root (the partition stage's ``--output``; a local folder or a gs:// prefix)::

    .graphstore-shards     root marker, JSON {"format": "graphstore-shards", "schema_version",
                           "role": "root", ...}: written first; a non-empty folder without it is
                           never written to, and nothing outside a root is ever deleted
    CURRENT                the pointer, JSON {"format", "schema_version", "version",
                           "published_at"}: names the complete version readers open; replaced in
                           one atomic step (local: rename of a fully written file; gs://: one
                           object upload, which GCS makes atomic)
    v-<UTC>-<hex>/         one shard set (format in graphstore.formats.shards.format): its own marker
                           (role "version", the writer's host and pid, created_at) first,
                           manifest.json last
    .work-<UTC>-<hex>/     local scratch of a running partition (DuckDB spill, staging files)

Publishing order (:class:`NewVersion`), each step a named pause point for the fault tests:
  1. claim the root: refuse a non-empty folder without our marker; write the marker if new;
  2. build the new version in its own folder (gs://: built locally, then uploaded: marker first,
     manifest last);
  3. switch ``CURRENT`` to it: the one atomic step;
  4. remove the version ``CURRENT`` named before (its marker last), then stale leftovers of killed
     runs: folders of ours (by marker) that are not current and whose writer is gone (same host,
     pid no longer running) or older than :data:`STALE_AFTER_S`.
A kill before step 3 leaves the old version current; from step 3 on, the new one. Readers open
what ``CURRENT`` names and verify it against its manifest: the old or the new set, never a mix,
never neither. Paths are literal: nothing here expands globs.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
from dataclasses import dataclass

from graphstore.io import uris
from graphstore.runtime.errors import UsageError
from graphstore.runtime.pause_points import pause_point
from graphstore.formats.shards.format import FORMAT_NAME, MANIFEST, SCHEMA_VERSION

MARKER = ".graphstore-shards"
POINTER = "CURRENT"
VERSION_PREFIX = "v-"
WORK_PREFIX = ".work-"
STALE_AFTER_S = 24 * 3600.0
"""A leftover folder whose writer cannot be checked (another host, e.g. a finished Vertex task)
is removed once it is this old; one on this host goes as soon as its writer pid is gone."""
KERNEL_FILE_SYSTEMS = ("/proc", "/sys", "/dev")
_NAME = re.compile(r"^(v-|\.work-)\d{8}T\d{6}Z-[0-9a-f]{8}$")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _marker_text(role: str) -> str:
    return json.dumps({"format": FORMAT_NAME, "schema_version": SCHEMA_VERSION, "role": role,
                       "host": socket.gethostname(), "pid": os.getpid(),
                       "created_at": _now().isoformat(timespec="seconds")}, indent=1)


def read_marker(folder: str) -> dict | None:
    """Our marker of ``folder`` as a dict, or None when it is absent or not ours (any format
    other than ours, or not JSON: such a folder is somebody else's and is left alone)."""
    uri = uris.join(folder, MARKER)
    try:
        if not uris.exists(uri):
            return None
        raw = json.loads(uris.read_text(uri))
    except (ValueError, UnicodeDecodeError, OSError):
        return None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        return None
    return raw


def is_version_name(name: str) -> bool:
    """True for a version folder name we generate (``v-<UTC>-<hex>``); nothing else is opened."""
    return bool(_NAME.match(name)) and name.startswith(VERSION_PREFIX)


def read_pointer(root: str) -> str | None:
    """The version ``CURRENT`` names, or None when there is no pointer. A pointer that is not
    ours, or names anything but a version folder directly under the root, is an error."""
    uri = uris.join(root, POINTER)
    if not uris.exists(uri):
        return None
    try:
        raw = json.loads(uris.read_text(uri))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{uri}: not a shard-set pointer ({type(exc).__name__})") from None
    version = raw.get("version") if isinstance(raw, dict) else None
    if (not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME
            or not isinstance(version, str) or not is_version_name(version)):
        raise UsageError(f"{uri}: not a shard-set pointer of {FORMAT_NAME} (it must name a "
                         "v-<time>-<hex> folder beside it); re-partition into a new folder")
    return version


def _check_local_root(root: str) -> None:
    """UsageError naming the problem when ``root`` cannot be (or become) a local shard-set root."""
    if os.path.lexists(root) and not os.path.isdir(root):
        what = "a broken symlink" if os.path.islink(root) else "a file"
        raise UsageError(f"--output {root} is {what}; give a folder path")
    probe = os.path.abspath(root)
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"--output {root}: {probe} is a file, so no folder can be made under it")
    real = os.path.realpath(probe)
    top = "/" + real.strip("/").split("/")[0]
    if top in KERNEL_FILE_SYSTEMS:
        raise UsageError(f"--output {root} is under {top}, a kernel file system; give a folder "
                         "on a disk")


class ShardRoot:
    """A shard-set root that is ours (see module docs). Use :meth:`claim`."""

    def __init__(self, uri: str, created: bool = False) -> None:
        self.uri = uri
        self.created = created  # this process made the root (it held nothing before)

    @classmethod
    def claim(cls, uri: str) -> "ShardRoot":
        """Check ``uri`` and make it a root of ours: an empty or missing folder gets our marker;
        an existing root is reused; anything else (a user's folder, even one holding a file named
        ``manifest.json``, a file, a path under a file) is refused with a UsageError."""
        if not uri or not uri.strip():
            raise UsageError("--output is empty; give the folder (or gs:// prefix) for the shards")
        if uris.is_gcs(uri):
            uris.split_gcs(uri)  # a bucket is named
            if not uri.split("//", 1)[1].partition("/")[2].strip("/"):
                raise UsageError(f"--output {uri} is a whole bucket; give a prefix inside it "
                                 "(gs://bucket/path/shards)")
        else:
            _check_local_root(uri)
        marker = read_marker(uri)
        if marker is not None and marker.get("role") == "root":
            return cls(uri)
        if marker is not None:
            raise UsageError(f"--output {uri} is a folder inside a shard set ({marker.get('role')}"
                             "); give the shard set's own folder (the one holding CURRENT)")
        names = (uris.list_names(uri) + uris.list_dirs(uri)) if _listable(uri) else []
        if names:
            legacy = MANIFEST in names and _is_legacy_set(uri)
            raise UsageError(
                f"--output {uri} " + ("holds a shard set of an older layout (schema_version 1, "
                                      "no CURRENT pointer)" if legacy else
                                      "exists and is not a shard set of ours (no "
                                      f"{MARKER} marker)")
                + "; choose a new or empty folder (nothing was changed)")
        try:
            uris.write_text(uris.join(uri, MARKER), _marker_text("root"))
        except OSError as exc:
            raise UsageError(f"--output {uri} cannot be written: {exc.strerror or exc}") from None
        return cls(uri, created=True)

    def discard_if_unused(self) -> None:
        """Undo :meth:`claim` when this process made the root and nothing was ever published
        into it (a failed first run leaves no folder behind)."""
        if not self.created or self.current() is not None:
            return
        uris.remove_file(uris.join(self.uri, MARKER))
        if not uris.is_gcs(self.uri):
            with contextlib.suppress(OSError):
                os.rmdir(self.uri)  # only when empty

    def current(self) -> str | None:
        """The version name ``CURRENT`` names now (None before the first publish)."""
        return read_pointer(self.uri)

    def switch_to(self, version: str) -> None:
        """Point ``CURRENT`` at ``version`` in one atomic step (the version must be complete)."""
        text = json.dumps({"format": FORMAT_NAME, "schema_version": SCHEMA_VERSION,
                           "version": version,
                           "published_at": _now().isoformat(timespec="seconds")}, indent=1)
        if uris.is_gcs(self.uri):
            uris.write_text(uris.join(self.uri, POINTER), text)
            return
        path = os.path.join(self.uri, POINTER)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.uri)

    def remove_version(self, name: str) -> None:
        """Delete a version or work folder of ours, its marker last (so a kill midway leaves a
        folder that is still recognisably ours and is cleaned up later)."""
        folder = uris.join(self.uri, name)
        if not uris.is_gcs(folder):
            if not os.path.isdir(folder) or os.path.islink(folder):
                return
            for entry in sorted(os.listdir(folder)):
                if entry == MARKER:
                    continue
                path = os.path.join(folder, entry)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
                pause_point("shards:removing-old")
            shutil.rmtree(folder, ignore_errors=True)
            return
        for rel in uris.list_names(folder):
            if rel != MARKER:
                uris.remove_file(uris.join(folder, rel))
        for sub in uris.list_dirs(folder):
            uris.remove_tree(uris.join(folder, sub))
            pause_point("shards:removing-old")
        uris.remove_file(uris.join(folder, MARKER))

    def remove_stale(self, keep: set[str], *, stale_after_s: float = STALE_AFTER_S) -> list[str]:
        """Remove leftovers of killed runs (module docs, step 4) except the names in ``keep``;
        returns the names removed."""
        removed = []
        for name in uris.list_dirs(self.uri):
            if name in keep or not _NAME.match(name):
                continue
            marker = read_marker(uris.join(self.uri, name))
            if marker is None or not _is_stale(marker, stale_after_s):
                continue
            self.remove_version(name)
            removed.append(name)
        for name in uris.list_names(self.uri):  # pointer temp files of a killed switch
            if name.startswith(POINTER + ".tmp") and not uris.is_gcs(self.uri):
                pid = name[len(POINTER) + 4:]
                if pid.isdigit() and not _pid_alive(int(pid)):
                    uris.remove_file(uris.join(self.uri, name))
        return removed


def _listable(uri: str) -> bool:
    return uris.is_gcs(uri) or os.path.isdir(uri)


def _is_legacy_set(uri: str) -> bool:
    try:
        raw = json.loads(uris.read_text(uris.join(uri, MANIFEST)))
    except (ValueError, UnicodeDecodeError, OSError, UsageError):
        return False
    return isinstance(raw, dict) and raw.get("format") == FORMAT_NAME


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_stale(marker: dict, stale_after_s: float) -> bool:
    """A leftover is stale when its writer on this host is gone, or when it is old enough."""
    if marker.get("host") == socket.gethostname() and isinstance(marker.get("pid"), int):
        if marker["pid"] != os.getpid() and not _pid_alive(marker["pid"]):
            return True
    try:
        created = datetime.datetime.fromisoformat(marker["created_at"])
    except (KeyError, TypeError, ValueError):
        return False
    return (_now() - created).total_seconds() > stale_after_s


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _new_name(prefix: str, stamp: str, token: str) -> str:
    return f"{prefix}{stamp}-{token}"


@dataclass
class NewVersion:
    """One version being built under a claimed root (module docs, steps 2-4).

    ``local_dir`` is where the writer puts the shard files (marker already there; the writer adds
    ``manifest.json`` last); ``work_dir`` is scratch on the same file system. Use as a context
    manager: leaving it without :meth:`publish` (an error) removes what this run created and leaves
    the root's current version as it was.
    """

    root: ShardRoot
    name: str
    local_dir: str
    work_dir: str
    published: bool = False

    @classmethod
    def start(cls, root: ShardRoot) -> "NewVersion":
        stamp = _now().strftime("%Y%m%dT%H%M%SZ")
        token = secrets.token_hex(4)
        name = _new_name(VERSION_PREFIX, stamp, token)
        if uris.is_gcs(root.uri):
            work = tempfile.mkdtemp(prefix="partition-")
            local = os.path.join(work, "out")
            os.makedirs(local)
            uris.write_text(uris.join(root.uri, name, MARKER), _marker_text("version"))
        else:
            work = os.path.join(root.uri, _new_name(WORK_PREFIX, stamp, token))
            local = os.path.join(root.uri, name)
            for folder, role in ((work, "work"), (local, "version")):
                os.makedirs(folder)
                uris.write_text(os.path.join(folder, MARKER), _marker_text(role))
        pause_point("shards:version-started")
        return cls(root, name, local, work)

    def __enter__(self) -> "NewVersion":
        return self

    def __exit__(self, *exc) -> None:
        if uris.is_gcs(self.root.uri):
            shutil.rmtree(self.work_dir, ignore_errors=True)
            if not self.published:
                self.root.remove_version(self.name)
                self.root.discard_if_unused()
            return
        self.root.remove_version(os.path.basename(self.work_dir))
        if not self.published:
            self.root.remove_version(self.name)
            self.root.discard_if_unused()

    def publish(self) -> None:
        """Upload (gs://), switch ``CURRENT`` to this version, then remove the previous version
        and stale leftovers. ``manifest.json`` must already be in ``local_dir``."""
        if not os.path.isfile(os.path.join(self.local_dir, MANIFEST)):
            raise RuntimeError(f"publish before {MANIFEST} was written")  # a bug, not user input
        if uris.is_gcs(self.root.uri):
            _upload_version(self.local_dir, uris.join(self.root.uri, self.name))
        pause_point("shards:version-complete")
        previous = self.root.current()
        self.root.switch_to(self.name)
        self.published = True
        pause_point("shards:switched")
        if previous and previous != self.name:
            self.root.remove_version(previous)
        self.root.remove_stale({self.name})


def _upload_version(local_dir: str, uri: str) -> None:
    """Upload a built version: every file but the marker (already there) and the manifest, then
    the manifest; a pause point halfway lets the fault tests kill a partial upload."""
    rels = [r for r in uris.iter_files(local_dir) if r not in (MARKER, MANIFEST)]
    for i, rel in enumerate(rels):
        if i == len(rels) // 2:
            pause_point("shards:uploading")
        uris.put_file(os.path.join(local_dir, rel), uris.join(uri, rel))
    uris.put_file(os.path.join(local_dir, MANIFEST), uris.join(uri, MANIFEST))
