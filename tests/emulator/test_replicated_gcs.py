"""Replicated mode on a gs:// run folder, with the real client against the GCS emulator: the
partition task's graph files are uploaded whole, each machine copies them to the same local
folder and reads them back against their checksums; a damaged object fails the copy naming it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphstore.io import uris
from graphstore.partition import partition_graph
from graphstore.modes.replicated.graph_file import GraphFileError
from graphstore.modes.replicated.run_files import (
    local_copy_dir, local_graph_files, write_run_graph_files,
)
from tests.shard_sets import tiny_hetero_task

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(300)]


def test_graph_files_go_up_whole_and_come_down_verified(tmp_path, gcs, bucket):
    cfg = tiny_hetero_task(tmp_path, seed=3, resource="resource_local_replicated.yaml")
    run = f"gs://{bucket}/runs/r1"
    partition_graph(cfg, num_partitions=2, output_uri=f"{run}/shards")
    summary = write_run_graph_files(cfg, run)
    assert summary["graph_file"] == f"{run}/graph/graph.bin"
    objects = gcs.root / bucket / "runs" / "r1" / "graph"
    assert (objects / "graph.bin").stat().st_size == summary["graph_file_bytes"]
    files = local_graph_files(run)
    assert files.copied and files.graph == os.path.join(local_copy_dir(run), "graph.bin")
    assert Path(files.graph).read_bytes() == (objects / "graph.bin").read_bytes()
    assert Path(files.features).read_bytes() == (objects / "features.bin").read_bytes()
    files.remove_copies()
    assert not os.path.exists(files.graph) and not os.path.exists(files.features)
    # an object damaged before upload (GCS's own checksum then matches what it holds): the
    # copy is read back against the file's section checksums
    raw = bytearray((objects / "graph.bin").read_bytes())
    raw[200] ^= 0xFF
    (tmp_path / "damaged.bin").write_bytes(bytes(raw))
    uris.put_file(str(tmp_path / "damaged.bin"), summary["graph_file"])
    with pytest.raises(GraphFileError, match="fails its checksum"):
        local_graph_files(run)
    assert not os.listdir(local_copy_dir(run))  # the damaged copy was removed
    uris.remove_tree(f"{run}/graph")
    with pytest.raises(Exception, match="no graph file at gs://"):
        local_graph_files(run)
