"""Shard sets are published crash-atomically and never replace what is not ours
(docs/architecture.md, "Publishing and data safety"; graphstore.formats.shards.publish). Real
``python -m components.partition`` processes, SIGKILLed at each named step of publishing;
afterwards the old or the new set opens and verifies, never neither and never a mix, and the
next run cleans up what the killed one left."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from graphstore.runtime.errors import UsageError
from graphstore.formats.shards.publish import MARKER, POINTER, ShardRoot
from graphstore.formats.shards.reader import ShardSet, current_version_uri
from tests.kill_points import REPO, kill_at
from tests.shard_sets import old_and_new_graphs, partition_argv, verified_files

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BEFORE_SWITCH = ("shards:version-started", "shards:version-complete")
AFTER_SWITCH = ("shards:switched", "shards:removing-old")


def partition(out: str, data: Path, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *partition_argv(out, data)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict:
    """Two small homogeneous graphs ("old" and "new") and their reference shard files."""
    base = tmp_path_factory.mktemp("publish")
    out = {}
    for name, data in old_and_new_graphs(base).items():
        proc = partition(str(base / f"ref_{name}"), data)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = (data, verified_files(str(base / f"ref_{name}")))
    assert out["old"][1] != out["new"][1]
    return out


def only_current_left(root: Path) -> bool:
    version = Path(current_version_uri(str(root))).name
    return sorted(p.name for p in root.iterdir()) == sorted([MARKER, POINTER, version])


@pytest.mark.parametrize("point", BEFORE_SWITCH + AFTER_SWITCH)
def test_sigkill_at_each_step_of_publishing_leaves_the_old_or_the_new_set(tmp_path, datasets,
                                                                          point):
    (old_data, old_files), (new_data, new_files) = datasets["old"], datasets["new"]
    out = tmp_path / "shards"
    assert partition(str(out), old_data).returncode == 0
    kill_at(point, partition_argv(str(out), new_data), tmp_path)
    expected = old_files if point in BEFORE_SWITCH else new_files
    assert verified_files(str(out)) == expected  # complete, verified, and not a mix
    leftovers = sorted(p.name for p in out.iterdir() if p.name not in (MARKER, POINTER))
    assert len(leftovers) >= 2 if point in BEFORE_SWITCH else len(leftovers) >= 1, leftovers
    # the next run finds the killed run's folders (ours, their writer gone) and removes them
    again = partition(str(out), new_data)
    assert again.returncode == 0, again.stderr[-3000:]
    assert verified_files(str(out)) == new_files and only_current_left(out)


def test_user_folder_holding_a_manifest_json_is_refused_untouched(tmp_path, datasets):
    """Issue 11 item 1: a folder of the user's that happens to hold manifest.json is not ours."""
    mine = tmp_path / "x"
    mine.mkdir()
    (mine / "manifest.json").write_text("{}")
    (mine / "thesis.tex").write_text("mine")
    proc = partition(str(mine), datasets["old"][0])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "is not a shard set of ours" in proc.stderr and len(proc.stderr.splitlines()) <= 3
    assert sorted(p.name for p in mine.iterdir()) == ["manifest.json", "thesis.tex"]
    assert (mine / "manifest.json").read_text() == "{}"
    assert (mine / "thesis.tex").read_text() == "mine"


def test_empty_output_is_a_usage_error_and_deletes_nothing(tmp_path, datasets):
    """Issue 11 item 2: ``--output ""`` once deleted ./manifest.json of the working directory."""
    (tmp_path / "manifest.json").write_text('{"format": "graphstore-shards"}')
    proc = partition("", datasets["old"][0], cwd=tmp_path)
    assert proc.returncode == 2 and "--output is empty" in proc.stderr, proc.stderr[-2000:]
    assert (tmp_path / "manifest.json").exists()


def test_output_through_a_symlink_is_replaced_in_the_link_target(tmp_path, datasets):
    """Issue 11 item 3: the old set was lost when --output was a link to it."""
    target = tmp_path / "real"
    link = tmp_path / "link"
    assert partition(str(target), datasets["old"][0]).returncode == 0
    link.symlink_to(target)
    proc = partition(str(link), datasets["new"][0])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert verified_files(str(link)) == verified_files(str(target)) == datasets["new"][1]
    assert only_current_left(target)


@pytest.mark.parametrize("case", ["under_a_file", "under_proc", "a_file", "version_folder"])
def test_unusable_outputs_are_usage_errors(tmp_path, datasets, case):
    (tmp_path / "plain.txt").write_text("x")
    shards = tmp_path / "shards"
    assert partition(str(shards), datasets["old"][0]).returncode == 0
    output = {"under_a_file": str(tmp_path / "plain.txt" / "shards"),
              "under_proc": "/proc/graphstore-shards",
              "a_file": str(tmp_path / "plain.txt"),
              "version_folder": current_version_uri(str(shards))}[case]
    proc = partition(output, datasets["old"][0])
    assert proc.returncode == 2, (case, proc.stderr[-2000:])
    assert proc.stderr.count("\n") <= 2 and "Traceback" not in proc.stderr
    assert (tmp_path / "plain.txt").read_text() == "x"


def test_stale_cleanup_removes_only_our_dead_leftovers(tmp_path, datasets):
    out = tmp_path / "shards"
    assert partition(str(out), datasets["old"][0]).returncode == 0
    host = socket.gethostname()

    def leftover(name: str, marker: dict | None) -> Path:
        folder = out / name
        folder.mkdir()
        (folder / "part_0").mkdir()
        (folder / "part_0" / "data.parquet").write_text("partial")
        if marker is not None:
            (folder / MARKER).write_text(json.dumps({"format": "graphstore-shards", **marker}))
        return folder

    dead = leftover("v-20261130T000000Z-0000dead", {"role": "version", "host": host, "pid": 2 ** 22 + 7,
                                                    "created_at": "2026-11-30T00:00:00+00:00"})
    live = leftover(".work-20261130T000000Z-00001ive", {"role": "work", "host": host,
                                                        "pid": os.getpid(),
                                                        "created_at": "2999-01-01T00:00:00+00:00"})
    old_elsewhere = leftover("v-20200101T000000Z-0000beef", {
        "role": "version", "host": "another-host", "pid": 1,
        "created_at": "2020-01-01T00:00:00+00:00"})
    foreign = leftover("v-20200101T000000Z-0000cafe", None)  # same name shape, no marker: not ours
    ShardRoot.claim(str(out)).remove_stale(keep=set())
    assert not dead.exists() and not old_elsewhere.exists()
    assert live.exists() and foreign.exists() and (foreign / "part_0" / "data.parquet").exists()


def test_legacy_and_foreign_pointers_are_refused(tmp_path):
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "manifest.json").write_text(json.dumps({"format": "graphstore-shards",
                                                      "schema_version": 1}))
    (legacy / "part_0").mkdir()
    with pytest.raises(UsageError, match="older layout"):
        ShardRoot.claim(str(legacy))
    assert (legacy / "part_0").exists()
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / MARKER).write_text(json.dumps({"format": "graphstore-shards", "role": "root"}))
    (evil / POINTER).write_text(json.dumps({"format": "graphstore-shards",
                                            "version": "../legacy"}))
    with pytest.raises(Exception, match="not a shard-set pointer"):
        ShardSet.open(str(evil))


def test_a_manifest_whose_counts_disagree_with_its_id_maps_does_not_open(tmp_path, datasets):
    """Issue 11 item 4's symptom: counts that disagree with the id maps were accepted."""
    out = tmp_path / "shards"
    assert partition(str(out), datasets["old"][0]).returncode == 0
    manifest_path = Path(current_version_uri(str(out))) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["node_types"]["item"]["count"] += 5
    manifest["node_types"]["item"]["counts_per_partition"][0] += 5
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(Exception, match=r"id_map/item.parquet: \d+ rows, but node type 'item'"):
        ShardSet.open(str(out))
