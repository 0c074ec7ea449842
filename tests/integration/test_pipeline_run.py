"""``python -m pipeline run``: the whole DAG on this machine through kfp.local (real processes)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import NamedTuple

import duckdb
import psutil
import pytest
import yaml

from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.formats.shards.reader import ShardSet

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]

TRAINER_ARGS = {"num_neighbors": [5, 3], "batch_size": 16, "num_random_negatives": 32,
                "max_steps": 1000, "max_epochs": 1, "val_every_steps": 1000, "log_every_steps": 10,
                "eval_candidates": 50, "hidden_dim": 16, "out_dim": 16}


def _configs(tmp: Path) -> tuple[Path, Path]:
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=5), str(tmp / "data"))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(tmp / "data")
    task["trainerConfig"]["trainerArgs"] = TRAINER_ARGS
    task["graphStoreRuntimeConfig"] = {"heartbeatIntervalS": 1, "heartbeatTimeoutS": 15,
                                       "readinessTimeoutS": 120, "rpcTimeoutS": 120,
                                       "sessionTimeoutS": 600}
    tp, rp = tmp / "task.yaml", tmp / "res.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text((REPO / "configs" / "resource_local.yaml").read_text())
    return tp, rp


def _run(tp: Path, rp: Path, root: Path, *extra: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "run", "--task-config", str(tp),
                           "--resource-config", str(rp), "--run-root", str(root), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _rows(root: Path, table: str) -> list[tuple]:
    con = duckdb.connect(str(root / "warehouse" / "warehouse.duckdb"), read_only=True)
    try:
        return con.execute(f"SELECT run_id, count(*), count(DISTINCT node_id) FROM {table} "
                           "GROUP BY run_id ORDER BY run_id").fetchall()
    finally:
        con.close()


@pytest.mark.timeout(1200)
def test_whole_pipeline_runs_locally_and_resumes_from_a_stage(tmp_path):
    tp, rp = _configs(tmp_path)
    root = tmp_path / "runs"
    first = _run(tp, rp, root, "--run-id", "r1")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    run = root / "r1"
    manifest = ShardSet.open(str(run / "shards")).manifest
    counts = {nt: manifest.node_types[nt].count for nt in ("user", "item")}
    for nt, n in counts.items():
        assert _rows(root, f"embeddings_{nt}") == [("r1", n, n)]
    records = {json.loads(p.read_text())["stage"] for p in (run / "_stages").glob("*.json")}
    assert records == {"partition", "train", "infer", "export"}
    out = first.stdout
    assert "run r1: partition, train, infer, export in" in out
    assert "  train     ok" in out and "test MRR" in out
    # the baselines beside the model on the summary line, then where the run report is
    train_line = next(line for line in out.splitlines() if line.startswith("  train     ok"))
    assert "(popularity " in train_line and ", bpr " in train_line and ", lightgcn " in train_line
    assert f"run report: {run / 'report' / 'report.html'}" in out
    assert "top-5 of embeddings_item for user" in out
    assert len([line for line in out.splitlines() if "score" in line]) == 5
    frozen = yaml.safe_load((run / "config" / "task.yaml").read_text())
    assert frozen["trainerConfig"]["trainerArgs"]["max_epochs"] == 1
    metrics = json.loads((run / "checkpoint" / "metrics.json").read_text())
    # one epoch: every rank's full batches of ~1 000 training pairs / 2 ranks / 16 per batch
    assert 5 <= metrics["steps"] <= 60, metrics["steps"]
    assert metrics["val_history"] == [] and metrics["test"]["model"]["count"] > 0
    # the test metrics are the train task's KFP Metrics artifact too
    (train_out,) = (root / "_kfp").glob("*/train/executor_output.json")
    (artifact,) = json.loads(train_out.read_text())["artifacts"]["metrics"]["artifacts"]
    logged = artifact["metadata"]
    assert logged["test_model_mrr"] == pytest.approx(metrics["test"]["model"]["mrr"])
    assert logged["test_user__buys__item_popularity_hits@10"] == pytest.approx(
        metrics["test"]["by_supervision_edge_type"]["user__buys__item"]["popularity"]["hits@10"])
    assert logged["test_lightgcn_mrr"] == pytest.approx(metrics["test"]["lightgcn"]["mrr"])
    # ... and the run report its HTML artifact (what Vertex Pipelines shows)
    outputs = json.loads(train_out.read_text())["artifacts"]
    (html,) = outputs["report"]["artifacts"]
    assert Path(html["uri"]).read_text() == (run / "report" / "report.html").read_text()

    # resume at export: earlier stages are not redone, the rows stay exactly once
    ckpt = run / "checkpoint" / "model.pt"
    before = (ckpt.stat().st_mtime_ns, (run / "_stages" / "train.json").stat().st_mtime_ns)
    again = _run(tp, rp, root, "--run-id", "r1", "--start-at", "export", "--quiet-kfp")
    assert again.returncode == 0, again.stderr[-3000:]
    assert (ckpt.stat().st_mtime_ns, (run / "_stages" / "train.json").stat().st_mtime_ns) == before
    assert "run r1: export in" in again.stdout
    # --quiet-kfp: KFP's task logs go to a file; the terminal gets one line per stage status
    assert "Executing task" not in again.stdout + again.stderr
    assert "Executing task" in (root / "_kfp" / "r1.log").read_text()
    progress = again.stdout.split("run r1: export in")[0]
    assert "  export    ok" in progress and "user: " in progress and "item: " in progress
    for nt, n in counts.items():
        assert _rows(root, f"embeddings_{nt}") == [("r1", n, n)]


def test_a_failing_stage_stops_the_run_with_its_name_and_error(tmp_path):
    tp, rp = _configs(tmp_path)
    os.remove(tmp_path / "data" / "user_item.parquet")
    root = tmp_path / "runs"
    proc = _run(tp, rp, root, "--run-id", "bad", "--quiet-kfp", timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "stage partition failed after" in proc.stderr
    assert "user_item.parquet" in proc.stderr  # the error names the missing input
    assert "--run-id bad --start-at partition" in proc.stderr
    assert not (root / "bad" / "checkpoint").exists()
    status = json.loads((root / "bad" / "_stages" / "partition.json").read_text())
    assert status["status"] == "failed"
    assert "  partition failed" in proc.stdout + proc.stderr


def test_resuming_a_run_that_does_not_exist_is_a_usage_error(tmp_path):
    tp, rp = _configs(tmp_path)
    proc = _run(tp, rp, tmp_path / "runs", "--run-id", "nope", "--start-at", "infer", timeout=120)
    assert proc.returncode == 2
    assert "--start-at infer needs" in proc.stderr and "checkpoint/model.pt" in proc.stderr


class _Marked(NamedTuple):
    """A process of the run and its command line, read while it was alive (it may end, and
    turn zombie, any moment after)."""

    process: psutil.Process
    cmdline: tuple[str, ...]


def _marked(marker: str) -> list[_Marked]:
    """Every live process whose environment carries ``SIGTERM_TEST_MARKER=marker``."""
    out = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.environ().get("SIGTERM_TEST_MARKER") == marker and \
                    p.status() != psutil.STATUS_ZOMBIE:
                out.append(_Marked(p, tuple(p.cmdline())))
    return out


@pytest.mark.timeout(600)
def test_sigterm_to_pipeline_run_alone_ends_the_running_stage_and_its_processes(tmp_path):
    """A SIGTERM sent to the ``pipeline run`` process only (a supervisor's ``kill``, not the
    terminal's Ctrl-C to the whole group) reaches the stage running: the launcher ends the
    storage and compute processes, the train record says failed, the run exits 1, and no
    process of the run is left (before, ``pipeline run`` died alone and the stage ran on)."""
    tp, rp = _configs(tmp_path)
    root = tmp_path / "runs"
    marker = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", "--task-config", str(tp), "--resource-config",
         str(rp), "--run-root", str(root), "--run-id", "r1"],
        cwd=REPO, env={**os.environ, "SIGTERM_TEST_MARKER": marker}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not any("components.storage" in m.cmdline for m in _marked(marker)):
            assert proc.poll() is None and time.monotonic() < deadline, "the train stage never started"
            time.sleep(0.2)
        time.sleep(3)  # the stage's processes are up
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=180)
        deadline = time.monotonic() + 30
        while _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        left = [" ".join(m.cmdline)[:120] for m in _marked(marker)]
        for m in _marked(marker):  # never leave a run behind, also when the test fails
            with contextlib.suppress(psutil.Error):
                m.process.kill()
    assert proc.returncode == 1, f"exit {proc.returncode}:\n{out[-2000:]}\n{err[-3000:]}"
    assert not left, left
    assert "stage train failed" in err, err[-3000:]
    record = json.loads((root / "r1" / "_stages" / "train.json").read_text())
    assert record["status"] == "failed" and "SIGTERM" in record["error"], record
