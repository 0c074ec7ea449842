"""The graph file of replicated mode, checked against the shard set it was written from (read back
through the shard reader), and opened without copying: a 4x larger file does not grow the anonymous
memory of the process that maps and reads it: the tests that start processes (a command line, a
second interpreter, workers). The others are in tests/unit/test_replicated_graph_file.py: unit
tests start no process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
import numpy as np
import pytest
import torch
from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError
from graphstore.modes.replicated import FeatureFile, GraphFile, GraphFileError, write_graph_file
from graphstore.modes.replicated.format import GraphHeader
from graphstore.modes.replicated.sections import SectionWriter
from graphstore.formats.shards.reader import ShardSet
from graphstore.dataset.splitter import SPLIT_CODE
from tests.replicated_graphs import REPO, build, held_out_mask, raw_edges, raw_labels

pytestmark = [pytest.mark.integration]


_PROBE = textwrap.dedent("""
    import json, sys, torch
    from graphstore.modes.replicated import CsrSampler, GraphFile
    def status():
        out = {}
        for line in open("/proc/self/status"):
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
        return out
    torch.set_num_threads(1)
    before = status()
    g = GraphFile.open(sys.argv[1], verify=True)  # reads every byte through the map
    sampler = CsrSampler(g, [10, 5])
    torch.manual_seed(0)
    n = g.metadata.node_counts["n"]
    for _ in range(40):
        sampler.sample(torch.randint(0, n, (512,)).unique())
    after = status()
    print(json.dumps({k: after[k] - before[k] for k in after}))
""")


def _synthetic_file(path: Path, num_nodes: int, num_edges: int) -> None:
    """A homogeneous graph file of random edges, written with the format's own writer."""
    rng = np.random.default_rng(0)
    w = SectionWriter(str(path), "graph")
    dst = np.sort(rng.integers(0, num_nodes, num_edges))
    w.put("indptr", np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=num_nodes))]).astype(np.int64))
    w.put("indices", rng.integers(0, num_nodes, num_edges).astype(np.int64))
    w.put("eids", np.arange(num_edges, dtype=np.int64))
    from graphstore.modes.replicated.format import CsrView, EdgeTypeEntry

    view = CsrView(count=num_edges, indptr="indptr", indices="indices", eids="eids")
    w.close(GraphHeader(kind="graph", created_at="now", sample_edge_direction="in",
                        node_types={"n": {"count": num_nodes, "feature_dim": 0}},
                        sections=dict(w.sections),
                        edge_types={"n__to__n": EdgeTypeEntry(count=num_edges, reverse_of=None,
                                                              is_supervision=False,
                                                              views={"full": view, "train": view})}))


def test_opening_a_4x_larger_file_does_not_grow_anonymous_memory(tmp_path):
    growth = {}
    for scale in (1, 4):
        path = tmp_path / f"g{scale}.bin"
        _synthetic_file(path, 100_000 * scale, 2_000_000 * scale)
        proc = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True,
                              text=True, timeout=300, cwd=REPO)
        assert proc.returncode == 0, proc.stderr[-2000:]
        growth[scale] = json.loads(proc.stdout.strip().splitlines()[-1])
        os.remove(path)
    mib = 1 << 20
    # the 4x file is 128 MiB of CSR: it was read (file-backed pages), not copied (anonymous)
    assert growth[4]["RssFile"] > 64 * mib, growth
    assert growth[1]["RssAnon"] < 32 * mib and growth[4]["RssAnon"] < 32 * mib, growth
    assert growth[4]["RssAnon"] - growth[1]["RssAnon"] < 8 * mib, growth


def test_component_writes_both_files_and_bad_paths_exit_2(tmp_path):
    built = build(tmp_path, kind="hetero")
    run = lambda out, shards=built.shards: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "components.graph_file", "--task-config", str(tmp_path / "task.yaml"),
         "--shards", shards, "--output", str(out), "--features-output", str(tmp_path / "f.bin")],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    ok = run(tmp_path / "g.bin")
    assert ok.returncode == 0, ok.stderr[-2000:]
    summary = json.loads(ok.stdout.strip().splitlines()[-1])
    assert summary["views"] == ["full", "train"] and summary["edges"]["user__buys__item"] == 1600
    GraphFile.open(str(tmp_path / "g.bin"), verify=True)  # complete: opens and verifies
    FeatureFile.open(str(tmp_path / "f.bin"), verify=True)
    (tmp_path / "theirs.bin").write_text("not ours")
    for out, shards, message in ((tmp_path / "theirs.bin", built.shards, "not overwritten"),
                                 (tmp_path / "g2.bin", str(tmp_path / "nope"), "not a complete shard set")):
        bad = run(out, shards)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr
    assert (tmp_path / "theirs.bin").read_text() == "not ours" and not (tmp_path / "g2.bin").exists()
