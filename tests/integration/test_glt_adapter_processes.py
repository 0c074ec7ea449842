"""graphstore.dataset.glt_adapter: the GLT version check (both branches, with real installed-package metadata)
and that applying every workaround twice is harmless (real GLT, real RPC on loopback): the tests
that start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_glt_adapter.py: unit tests start no process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
import pytest
from graphstore.tools.doctor import failed_requirements
from graphstore.dataset.glt_adapter import GLT_VERSION, check_glt_version, glt_version_problem

pytestmark = [pytest.mark.integration]


REPO = Path(__file__).resolve().parents[2]


_OTHER_VERSION = """
import sys
from graphstore.dataset import glt_adapter
from graphstore.runtime.cli import run_cli
print(glt_adapter.installed_glt_version(), flush=True)
try:
    glt_adapter.GltLoader
except glt_adapter.RuntimeFailure as exc:
    print("GltLoader refused:", exc, flush=True)
from graphlearn_torch.distributed import dist_sampling_producer as d
def main():
    glt_adapter.prepare_sampling_server(1.0)
try:
    run_cli(main, "probe")
finally:
    print(d.MP_STATUS_CHECK_INTERVAL, type(d.mp).__name__, flush=True)
"""


_TWICE = """
import datetime, pickle, torch, torch.distributed as dist
from torch.distributed import rpc
import graphstore.runtime.rendezvous
from graphstore.dataset import glt_adapter as a
from graphstore.runtime.ports import free_ports
from graphlearn_torch.distributed import DistDataset, DistLoader, dist_sampling_producer as d
import torch.multiprocessing as tmp

a.check_glt_version(); a.check_glt_version()
a.prepare_sampling_server(1.5); first = d.mp
a.prepare_sampling_server(1.5)
out = {"interval": d.MP_STATUS_CHECK_INTERVAL, "same_proxy": d.mp is first,
       "wraps_torch_mp": first._base is tmp,
       "spawn_is_forkserver": d.mp.get_context("spawn").get_start_method() == "forkserver"}

ds = DistDataset(num_partitions=1, partition_idx=0, edge_dir="out")
a.set_no_node_labels(ds); a.set_no_node_labels(ds)
out["node_labels"] = {k: list(v.shape) for k, v in ds.node_labels.items()}

out["classes_built_once"] = a.GltLoader is a.GltLoader and a.LabeledEdgeInput is a.LabeledEdgeInput
out["loader_base"] = a.GltLoader.__mro__[1] is DistLoader
x = a.LabeledEdgeInput(row=torch.arange(3), col=torch.arange(3),
                       label=torch.ones(3, dtype=torch.long), input_type=None)
y = pickle.loads(pickle.dumps(x.share_memory().share_memory()))
out["input_pickles"] = type(y) is a.LabeledEdgeInput and y.to(torch.device("cpu")) is y
out["input_shared"] = all(t.is_shared() for t in (x.row, x.col, x.label))

host = "127.0.0.1"
dist.init_process_group("gloo", init_method=f"tcp://{host}:{free_ports(1, host)[0]}", rank=0,
                        world_size=1, timeout=datetime.timedelta(seconds=60))
a.default_store().set("k", "v")
out["store"] = a.default_store().get("k").decode()
dist.destroy_process_group()
rpc.init_rpc("probe", rank=0, world_size=1, rpc_backend_options=rpc.TensorPipeRpcBackendOptions(
    init_method=f"tcp://{host}:{free_ports(1, host)[0]}", rpc_timeout=30, _transports=["uv"]))
a.set_client_rpc_timeout(7.0); a.set_client_rpc_timeout(7.0)
out["rpc_timeout"] = rpc.get_rpc_timeout()
out["rpc_works"] = int(rpc.rpc_sync("probe", torch.add, args=(torch.ones(1), 1))[0])
rpc.shutdown()
print(out)
"""


def _other_glt_installed(tmp_path: Path, version: str) -> Path:
    """A folder holding graphlearn-torch ``version``'s package metadata (what pip writes)."""
    info = tmp_path / f"graphlearn_torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: graphlearn-torch\nVersion: {version}\n")
    return tmp_path


def _python(code: str, *path_first: Path) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; ``path_first`` goes before the repository on
    ``PYTHONPATH`` (so its package metadata is found before the installed one)."""
    path = ":".join([*map(str, path_first), str(REPO)])
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=240, env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"})


def test_another_installed_glt_version_is_one_clear_error(tmp_path):
    run = _python(_OTHER_VERSION, _other_glt_installed(tmp_path, "0.3.0"))
    assert run.returncode == 1, run.stderr
    problem = glt_version_problem("0.3.0")
    assert run.stdout.splitlines() == ["0.3.0", f"GltLoader refused: {problem}", "5.0 module"]
    assert run.stderr.strip().splitlines() == [f"probe: error: {problem}"]
    doctor = _python("import json; from graphstore.tools.doctor import glt_adapter_report as r; "
                     "print(json.dumps(r()))", tmp_path)
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    assert report == {"written_for": "0.2.4", "installed": "0.3.0", "ok": False, "error": problem}


def test_applying_every_workaround_twice_is_harmless():
    run = _python(_TWICE)
    assert run.returncode == 0, run.stderr[-3000:]
    out = eval(run.stdout.strip().splitlines()[-1])  # noqa: S307 - our own probe's dict
    assert out == {"interval": 1.5, "same_proxy": True, "wraps_torch_mp": True,
                   "spawn_is_forkserver": True, "node_labels": {"__no_node_labels__": [0]},
                   "classes_built_once": True, "loader_base": True, "input_pickles": True,
                   "input_shared": True, "store": "v", "rpc_timeout": 7.0, "rpc_works": 2}


def test_importing_the_adapter_imports_neither_torch_nor_glt():
    run = _python("import sys, graphstore.dataset.glt_adapter as a; a.glt_version_problem(None); "
                  "print([m for m in ('torch', 'graphlearn_torch') if m in sys.modules])")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
