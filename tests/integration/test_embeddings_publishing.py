"""Embeddings are published crash-atomically (graphstore.formats.embeddings): a real writer process is
SIGKILLed before and after its ``_SUCCESS`` switch; export then reads the old or the new
embeddings whole, never neither and never a mix. ``_SUCCESS`` is checked before it is trusted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from graphstore.runtime.errors import RuntimeFailure
from graphstore.export.rows import build_rows
from tests.embedding_runs import DIM, build_graph, make_run
from tests.kill_points import REPO, kill_at

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
WRITER = Path(__file__).with_name("write_embeddings.py")


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("graph"))


def exported_scale(run: Path, tmp: Path) -> float:
    """Build the export rows of ``user`` and return the one scale every row was written with."""
    out = tmp / "rows.parquet"
    build_rows(str(run), "user", run_id="r", model_version="v", out_path=str(out))
    table = pq.read_table(out).to_pylist()
    scales = set()
    for row in table:
        emb = row["embedding"]
        assert len(emb) == DIM
        base = emb[1] - emb[0]  # scale * 1
        scales.add(round(base, 4))
    assert len(scales) == 1, scales  # every row from one attempt: never a mix
    return scales.pop()


@pytest.mark.parametrize("point,expected", [("embeddings:before-success", 1.0),
                                            ("embeddings:switched", 3.0)])
def test_sigkill_around_the_success_switch_leaves_old_or_new(graph, tmp_path, point, expected):
    run = make_run(graph, tmp_path, "r1", scale=1.0)  # a complete earlier attempt (schema 1)
    n = len(graph["raw"]["user"])
    assert exported_scale(run, tmp_path) == 1.0
    kill_at(point, [str(WRITER), str(run), "user", str(n), str(DIM), "3.0"], tmp_path)
    assert exported_scale(run, tmp_path) == expected
    # a complete attempt later removes what the killed one left
    proc = subprocess.run([sys.executable, str(WRITER), str(run), "user", str(n), str(DIM), "5.0"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert exported_scale(run, tmp_path) == 5.0
    folder = run / "embeddings" / "user"
    files = json.loads((folder / "_SUCCESS").read_text())["files"]
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*.parquet")) == sorted(files)


@pytest.mark.parametrize("listed", ["../../etc/hostname", "/etc/hostname",
                                    "attempt-20261130T000000Z-0000abcd/../../../x.parquet"])
def test_success_file_list_is_confined_to_the_folder(graph, tmp_path, listed):
    run = make_run(graph, tmp_path, "r1")
    marker_path = run / "embeddings" / "user" / "_SUCCESS"
    marker = json.loads(marker_path.read_text())
    marker["files"] = [listed]
    marker_path.write_text(json.dumps(marker))
    with pytest.raises(RuntimeFailure, match="not an embeddings part file of this folder"):
        build_rows(str(run), "user", run_id="r", model_version="v",
                   out_path=str(tmp_path / "rows.parquet"))
    assert not (tmp_path / "rows.parquet").exists()


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"schema_version": 1}', "\xff\xfe"])
def test_malformed_success_is_a_clear_error(graph, tmp_path, text):
    run = make_run(graph, tmp_path, "r1")
    (run / "embeddings" / "user" / "_SUCCESS").write_bytes(text.encode("latin-1"))
    with pytest.raises(RuntimeFailure, match="_SUCCESS"):
        build_rows(str(run), "user", run_id="r", model_version="v",
                   out_path=str(tmp_path / "rows.parquet"))
