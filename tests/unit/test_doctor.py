"""The backend doctor: real probes on this machine, and the --require-* exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphstore.tools.doctor import EXPECTED_2HOP, failed_requirements

REPO = Path(__file__).resolve().parents[2]


def _doctor(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphstore.tools.doctor", *flags], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("doctor")
    res = _doctor(tmp)
    assert res.returncode == 0, res.stderr
    assert list(tmp.iterdir()) == []  # writes no files
    return json.loads(res.stdout)


def test_report_describes_the_pinned_stack(report):
    assert report["torch"]["version"].startswith("2.3.0")
    assert report["torch"]["build"] in ("cuda", "cpu")
    assert report["packages"]["torch_geometric"]["version"] == "2.8.1"
    assert report["packages"]["graphlearn_torch"]["importable"] is True
    assert report["packages"]["torch_sparse"]["version"] == "0.6.18"


def test_backends_really_sample_the_two_hop_neighbourhood(report):
    sampling = report["neighbor_sampling"]
    for name in ("torch_sparse", "pyg_neighbor_loader", "graphlearn_torch"):
        assert sampling[name]["ok"] is True, sampling[name]
        assert set(sampling[name]["sampled_nodes"]) == EXPECTED_2HOP
    assert sampling["pyg_lib"]["ok"] is False and "pyg_lib" in sampling["pyg_lib"]["error"]
    assert report["distributed"]["gloo_loopback"]["ok"] is True
    assert report["distributed"]["rpc_loopback"]["ok"] is True


def test_failed_requirements_logic():
    broken = {"torch": {"cuda_available": False},
              "packages": {"graphlearn_torch": {"importable": False, "error": "ImportError: libc10_cuda.so"}},
              "neighbor_sampling": {"pyg_lib": {"ok": False}, "torch_sparse": {"ok": False},
                                    "graphlearn_torch": {"ok": False}}}
    msgs = failed_requirements(broken, neighbor=True, glt=True, cuda=False)
    assert len(msgs) == 2
    assert "torch-sparse" in msgs[0] and "libc10_cuda" in msgs[1] and "torch==2.3.0" in msgs[1]
    broken["neighbor_sampling"]["torch_sparse"]["ok"] = True
    assert len(failed_requirements(broken, neighbor=True, glt=False, cuda=False)) == 0
