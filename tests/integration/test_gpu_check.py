"""scripts/gpu_check.sh, the GPU check a session with a GPU machine runs, kept working here: on
this CPU-only machine its one-GPU Vertex resource config must fall back to the CPU (with the
warning), train (20 steps here; the script's default is 50) and embed every node; asking for CUDA where there is none fails."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
pytestmark = [pytest.mark.integration]


def _run(*args: str, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.mark.timeout(900)
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU machine runs the script with --expect cuda")
def test_the_gpu_check_runs_on_the_cpu_fallback(tmp_path):
    proc = _run("--expect", "auto", "--steps", "20", "--workdir", str(tmp_path / "work"),
                timeout_s=840)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("gpu_check: OK ")][-1]
    summary = json.loads(line.removeprefix("gpu_check: OK "))
    assert summary["expect"] == "cpu" and summary["cpu_fallback_warned"] is True
    assert summary["train_device"] == summary["infer_device"] == "cpu"
    assert summary["steps"] == 20 and summary["embedded"] == {"user": 200, "item": 100}
    assert summary["test_mrr"] > 0


@pytest.mark.timeout(120)
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is there")
def test_expecting_cuda_without_it_fails_in_one_line(tmp_path):
    proc = _run("--expect", "cuda", "--workdir", str(tmp_path / "work"), timeout_s=100)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "gpu_check: FAILED: --expect cuda, but torch"), proc.stderr
    not_empty = tmp_path / "full"
    not_empty.mkdir()
    (not_empty / "mine.txt").write_text("keep")
    proc = _run("--workdir", str(not_empty), timeout_s=100)
    assert proc.returncode == 2 and "is not empty" in proc.stderr
    assert (not_empty / "mine.txt").read_text() == "keep"
