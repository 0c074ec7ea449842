"""bqemulator whose ``EXPORT DATA`` files reach the GCS emulator through its API, as BigQuery's
reach Cloud Storage (run with ``.venv-emulators/bin/python``; tests/emulators.py starts it).

bqemulator 1.4.0 writes an export's files under ``BQEMU_GCS_LOCAL_ROOT`` (the GCS emulator's
folder) as plain files. fake-gcs-server keeps each object's metadata (size, crc32c, md5) in an
extended attribute of its file, so it does not see such a file: listing the bucket fails with
404. Here each file an export wrote is read, removed and uploaded through the GCS emulator's JSON
API (``GCS_EMULATOR_URL``), which gives it the metadata a real object has; the job finishes only
after every upload. Everything else is bqemulator's own command line, unchanged.
"""

from __future__ import annotations

import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path


def _upload(url: str, root: Path, path: Path) -> None:
    bucket, _, key = str(path.relative_to(root)).partition("/")
    data = path.read_bytes()
    path.unlink()
    query = urllib.parse.urlencode({"uploadType": "media", "name": key})
    req = urllib.request.Request(f"{url}/upload/storage/v1/b/{bucket}/o?{query}", data=data,
                                 method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        if resp.status != 200:
            raise OSError(f"upload of gs://{bucket}/{key} to the GCS emulator: {resp.status}")


def _patch(url: str, root: Path) -> None:
    from bqemulator.jobs import executor

    write_export = executor.write_export

    def write_export_through_gcs(arrow_table, options, ctx):
        outcome = write_export(arrow_table, options, ctx)
        for uri in outcome.uris:
            _upload(url, root, Path(executor._resolve_uri(uri, ctx)))
        return outcome

    executor.write_export = write_export_through_gcs


if __name__ == "__main__":
    _patch(os.environ["GCS_EMULATOR_URL"], Path(os.environ["BQEMU_GCS_LOCAL_ROOT"]).resolve())
    from bqemulator.cli import main

    sys.argv[0] = "bqemulator"
    main()
