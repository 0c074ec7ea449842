"""Crash-atomic publishing on gs:// (the GCS emulator, the real client): a partition process is
SIGKILLed at each step of publishing a shard set to a gs:// prefix, and an embeddings writer
around its ``_SUCCESS`` switch; the old or the new output opens and verifies afterwards, and the
next run removes the killed run's objects. GCS has no rename: the pointer object is the switch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from graphstore.io import uris
from graphstore.formats.embeddings import read_success
from graphstore.formats.shards.publish import MARKER, POINTER
from graphstore.formats.shards.reader import current_version_uri
from tests.kill_points import REPO, kill_at
from tests.shard_sets import old_and_new_graphs, partition_argv, verified_files

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(400)]
BEFORE_SWITCH = ("shards:version-started", "shards:uploading", "shards:version-complete")
AFTER_SWITCH = ("shards:switched", "shards:removing-old")


def run(out: str, data: Path) -> None:
    proc = subprocess.run([sys.executable, *partition_argv(out, data)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("gcs-publish")
    out = {}
    for name, data in old_and_new_graphs(base).items():
        run(str(base / f"ref_{name}"), data)
        out[name] = (data, verified_files(str(base / f"ref_{name}")))
    return out


def test_sigkill_at_each_step_of_publishing_to_gcs(bucket, datasets, tmp_path):
    (old_data, old_files), (new_data, new_files) = datasets["old"], datasets["new"]
    for i, point in enumerate(BEFORE_SWITCH + AFTER_SWITCH):
        out = f"gs://{bucket}/shards{i}"
        run(out, old_data)
        kill_at(point, partition_argv(out, new_data), tmp_path)
        expected = old_files if point in BEFORE_SWITCH else new_files
        assert verified_files(out, tmp_path) == expected, point
        run(out, new_data)  # cleans the killed run's objects (its writer pid is gone)
        assert verified_files(out, tmp_path) == new_files
        version = current_version_uri(out).rsplit("/", 1)[1]
        assert uris.list_dirs(out) == [version], point
        assert uris.list_names(out) == sorted([MARKER, POINTER])


def test_sigkill_around_the_embeddings_switch_on_gcs(bucket, tmp_path):
    run_dir = f"gs://{bucket}/runs/r1"
    writer = str(Path(REPO, "tests", "integration", "write_embeddings.py"))

    def write(scale: str) -> None:
        proc = subprocess.run([sys.executable, writer, run_dir, "user", "50", "4", scale],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]

    write("1.0")
    first = read_success(run_dir, "user").files
    kill_at("embeddings:before-success", [writer, run_dir, "user", "50", "4", "2.0"], tmp_path)
    assert read_success(run_dir, "user").files == first
    assert all(uris.exists(f"{run_dir}/embeddings/user/{f}") for f in first)
    kill_at("embeddings:switched", [writer, run_dir, "user", "50", "4", "3.0"], tmp_path)
    switched = read_success(run_dir, "user").files
    assert switched != first
    assert all(uris.exists(f"{run_dir}/embeddings/user/{f}") for f in switched)
    write("4.0")
    last = read_success(run_dir, "user").files
    assert uris.list_dirs(f"{run_dir}/embeddings/user") == [last[0].split("/")[0]]
