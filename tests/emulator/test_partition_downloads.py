"""Per-partition I/O on gs:// (issue 12 item 6), counted at the server: a storage process for
partition k downloads only the manifest and ``part_k/``'s objects; export's
read of one id map downloads the manifest and that id map. Each reader runs as its own process
with the real client, pointed at a counting HTTP proxy in front of the GCS emulator, so every
object download it makes is seen and named."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from graphstore.io import uris
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.runtime.env import STORAGE_EMULATOR_HOST
from graphstore.formats.shards.reader import ShardSet, current_version_uri

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.emulator, pytest.mark.timeout(300)]
_MEDIA = "/download/storage/v1/b/"
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class CountingProxy:
    """Forwards every request to the emulator and records the objects downloaded through it."""

    def __init__(self, upstream: str) -> None:
        self.downloads: list[str] = []  # "bucket/key" of each media GET, in order
        target = urllib.parse.urlsplit(upstream)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                path = urllib.parse.urlsplit(self.path)
                if self.command == "GET" and path.path.startswith(_MEDIA):
                    bucket, _, key = path.path[len(_MEDIA):].partition("/o/")
                    owner.downloads.append(f"{bucket}/{urllib.parse.unquote(key)}")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "CountingProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


STORAGE = """
import json, sys
from graphstore.config import load_task_config
from graphstore.modes.graph_store.server import load_partition
task = load_task_config(sys.argv[1])
_, state, fetched = load_partition(sys.argv[2], int(sys.argv[3]), 2,
                                   task.trainer.storage.storage_args)
print(json.dumps({"fetched": fetched,
                  "owned": {k: hi - lo for k, (lo, hi) in state.owned_ranges.items()}}))
"""
EXPORT = """
import json, sys
from graphstore.formats.shards.reader import ShardSet
with ShardSet.open(sys.argv[1]) as s:
    rows = s.id_map(sys.argv[2]).num_rows
    print(json.dumps({"fetched": s.fetched(), "rows": rows}))
"""


def _run(code: str, proxy: CountingProxy, *args: str) -> dict:
    env = {**os.environ, STORAGE_EMULATOR_HOST: proxy.url}
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory, gcs) -> tuple[str, Path]:
    """The tiny hetero graph partitioned (2 partitions) into a gs:// root; (root, task config)."""
    import yaml

    from graphstore.io.gcp import storage_client

    base = tmp_path_factory.mktemp("per-partition")
    data = base / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=3), str(data))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    tp = base / "task.yaml"
    tp.write_text(yaml.safe_dump(task))
    storage_client().create_bucket("per-partition")
    root = "gs://per-partition/shards"
    proc = subprocess.run([sys.executable, "-m", "components.partition", "--task-config", str(tp),
                           "--resource-config", str(REPO / "configs" / "resource_local.yaml"),
                           "--output", root], cwd=REPO, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, tp


@pytest.mark.parametrize("partition", [0, 1])
def test_a_storage_process_downloads_only_its_partition(shard_set, gcs, partition):
    root, tp = shard_set
    version = current_version_uri(root)
    bucket, prefix = uris.split_gcs(version)
    manifest = ShardSet.open(root).manifest
    every = set(manifest.files) | {"manifest.json"}
    own = {rel for rel in manifest.files if rel.startswith(f"part_{partition}/")}
    assert own and len(own) < len(manifest.files) // 2  # the test could tell the difference
    with CountingProxy(gcs.url) as proxy:
        out = _run(STORAGE, proxy, str(tp), root, str(partition))
    # the root's CURRENT pointer, then the version's manifest and part_<k>/ files
    pointer = f"{bucket}/shards/CURRENT"
    assert proxy.downloads[0] == pointer
    got = [d[len(f"{bucket}/{prefix}/"):] for d in proxy.downloads[1:]]
    assert all(d.startswith(f"{bucket}/{prefix}/") for d in proxy.downloads[1:]), proxy.downloads
    assert sorted(got) == sorted({"manifest.json"} | own)  # each object exactly once
    assert len(got) == 1 + len(own) < len(every)
    assert sorted(out["fetched"]) == sorted(own)
    assert sum(out["owned"].values()) == sum(
        info.counts_per_partition[partition] for info in manifest.node_types.values())


def test_export_reads_only_the_id_map_of_its_node_type(shard_set, gcs):
    root, _ = shard_set
    bucket, prefix = uris.split_gcs(current_version_uri(root))
    with CountingProxy(gcs.url) as proxy:
        out = _run(EXPORT, proxy, root, "item")
    assert proxy.downloads == [f"{bucket}/shards/CURRENT", f"{bucket}/{prefix}/manifest.json",
                               f"{bucket}/{prefix}/id_map/item.parquet"]
    assert out == {"fetched": ["id_map/item.parquet"], "rows": 100}


def test_a_tampered_object_of_the_partition_fails_its_checksum(shard_set, gcs, tmp_path):
    """The storage process verifies what it downloads: one flipped byte in part_1's edges."""
    from graphstore.io.gcp import storage_client

    root, tp = shard_set
    version = current_version_uri(root)
    manifest = ShardSet.open(root).manifest
    rel = sorted(r for r in manifest.files if r.startswith("part_1/edges/"))[0]
    bucket, prefix = uris.split_gcs(version)
    blob = storage_client().bucket(bucket).blob(f"{prefix}/{rel}")
    original = blob.download_as_bytes()
    blob.upload_from_string(original[:-9] + bytes([original[-9] ^ 1]) + original[-8:])
    try:
        proc = subprocess.run([sys.executable, "-c", STORAGE, str(tp), root, "1"], cwd=REPO,
                              capture_output=True, text=True, timeout=200)
        assert proc.returncode != 0 and f"checksum mismatch for {version}/{rel}" in proc.stderr
        with CountingProxy(gcs.url) as proxy:  # partition 0 does not read that object
            assert rel not in _run(STORAGE, proxy, str(tp), root, "0")["fetched"]
    finally:
        blob.upload_from_string(original)
