"""``python -m graphstore.tools.doctor``: report which parts of the sampling stack work here, as JSON.

Checks (each one isolated: a failure is recorded, never raised):
  * versions and builds: Python, torch (CUDA or CPU build, CUDA available, device count),
    torch_geometric, graphlearn_torch, torch_sparse, torch_scatter, pyg_lib;
  * whether the installed graphlearn-torch is the version graphstore's GLT workarounds were
    written for (``glt_adapter``: graphstore.dataset.glt_adapter; ``--require-glt`` fails otherwise);
  * neighbour-sampling backends, each asked to sample the full 2-hop neighbourhood of one seed on
    a tiny in-memory graph whose answer is known (``pyg_lib``, ``torch_sparse``, PyG's
    ``NeighborLoader``, GLT's CPU ``NeighborSampler``);
  * ``gloo`` (a one-process group plus an all-reduce) and torch RPC (a one-worker self call) on
    127.0.0.1, each started and shut down inside the check.

It starts no long-lived servers, downloads nothing and writes no files. Exit code 0, or 1 when a
``--require-*`` check fails (the message says how to fix it), or 2 for bad flags.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import json
import platform
import sys
import traceback
from typing import Any, Callable

from graphstore.dataset.glt_adapter import GLT_VERSION, glt_version_problem, installed_glt_version
from graphstore.runtime.ports import free_ports

# The tiny graph: 0->1, 0->2, 1->3, 2->4, 3->5, 6->0. Seed 0, two hops outwards: {0,1,2,3,4}.
EDGES = [(0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (6, 0)]
NUM_NODES = 7
SEED = 0
EXPECTED_2HOP = {0, 1, 2, 3, 4}

FIXES = {
    "neighbor": "install torch-sparse (make setup installs it from wheels/) or pyg-lib",
    "glt": "install graphlearn-torch==0.2.4 with torch==2.3.0 (CUDA 12.1 build from PyPI) and numpy<2; "
           "run `make setup`",
    "cuda": "run on a machine with an NVIDIA GPU and a CUDA build of torch "
            "(torch.cuda.is_available() must be True)",
}


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]


def _version(module: str) -> dict[str, Any]:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding
        return {"importable": False, "error": _error(exc)}
    version = getattr(mod, "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version(module.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            version = None
    return {"importable": True, "version": version}


def _csr_out():
    """(rowptr, col) of the tiny graph, rows = source nodes."""
    import torch

    rowptr = [0]
    cols: list[int] = []
    for node in range(NUM_NODES):
        nbrs = sorted(dst for src, dst in EDGES if src == node)
        cols.extend(nbrs)
        rowptr.append(len(cols))
    return torch.tensor(rowptr), torch.tensor(cols)


def _check_nodes(nodes) -> dict[str, Any]:
    got = {int(n) for n in nodes}
    return {"ok": got == EXPECTED_2HOP, "sampled_nodes": sorted(got)}


def probe_pyg_lib() -> dict[str, Any]:
    import pyg_lib  # noqa: F401
    import torch

    rowptr, col = _csr_out()
    out = torch.ops.pyg.neighbor_sample(rowptr, col, torch.tensor([SEED]), [-1, -1])
    return _check_nodes(out[2])


def probe_torch_sparse() -> dict[str, Any]:
    import torch
    import torch_sparse  # noqa: F401

    rowptr, col = _csr_out()
    node, _, _, _ = torch.ops.torch_sparse.neighbor_sample(
        rowptr, col, torch.tensor([SEED]), [-1, -1], False, True)
    return _check_nodes(node)


def probe_pyg_neighbor_loader() -> dict[str, Any]:
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    # PyG samples along incoming edges (messages flow src -> dst); reverse to walk outwards.
    edge_index = torch.tensor([[d for _, d in EDGES], [s for s, _ in EDGES]])
    data = Data(edge_index=edge_index, num_nodes=NUM_NODES)
    batch = next(iter(NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=torch.tensor([SEED]),
                                     batch_size=1)))
    return _check_nodes(batch.n_id)


def probe_glt() -> dict[str, Any]:
    import graphlearn_torch as glt
    import torch

    edge_index = torch.tensor([[s for s, _ in EDGES], [d for _, d in EDGES]])
    ds = glt.data.Dataset(edge_dir="out")
    ds.init_graph(edge_index=edge_index, graph_mode="CPU", directed=True)
    sampler = glt.sampler.NeighborSampler(ds.graph, num_neighbors=[-1, -1],
                                          device=torch.device("cpu"), edge_dir="out")
    out = sampler.sample_from_nodes(glt.sampler.NodeSamplerInput(node=torch.tensor([SEED])))
    return _check_nodes(out.node)


def probe_gloo(timeout_s: float) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    import graphstore.runtime.rendezvous  # noqa: F401  (the probe's store listens on loopback only)

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_ports(1)[0]}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=timeout_s))
    try:
        x = torch.ones(3)
        dist.all_reduce(x)
        return {"ok": bool((x == 1).all())}
    finally:
        dist.destroy_process_group()


def _add(a, b):
    return a + b


def probe_rpc(timeout_s: float) -> dict[str, Any]:
    import torch
    import torch.distributed.rpc as rpc

    import graphstore.runtime.rendezvous  # noqa: F401  (the probe's store listens on loopback only)

    opts = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=2, rpc_timeout=timeout_s,
        init_method=f"tcp://127.0.0.1:{free_ports(1)[0]}", _transports=["uv"])
    rpc.init_rpc("doctor", rank=0, world_size=1, rpc_backend_options=opts)
    try:
        y = rpc.rpc_sync("doctor", _add, args=(torch.ones(2), 1))
        return {"ok": bool((y == 2).all())}
    finally:
        rpc.shutdown()


def _run(probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - a failing backend is a finding, not a crash
        return {"ok": False, "error": _error(exc)}


def torch_report() -> dict[str, Any]:
    info = _version("torch")
    if not info["importable"]:
        return info
    import torch

    info.update(build="cuda" if torch.version.cuda else "cpu", cuda_version=torch.version.cuda,
                cuda_available=torch.cuda.is_available(),
                device_count=torch.cuda.device_count() if torch.cuda.is_available() else 0)
    return info


def glt_adapter_report() -> dict[str, Any]:
    """Is the installed graphlearn-torch the one graphstore.dataset.glt_adapter was written for?"""
    installed = installed_glt_version()
    problem = glt_version_problem(installed)
    return {"written_for": GLT_VERSION, "installed": installed, "ok": problem is None,
            **({"error": problem} if problem else {})}


def collect(timeout_s: float = 20.0) -> dict[str, Any]:
    """Build the whole report (a JSON-serialisable dict)."""
    report: dict[str, Any] = {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "torch": torch_report(),
        "packages": {m: _version(m) for m in
                     ("torch_geometric", "graphlearn_torch", "torch_sparse", "torch_scatter", "pyg_lib")},
        "glt_adapter": glt_adapter_report(),
    }
    if not report["torch"]["importable"]:
        report["neighbor_sampling"] = {}
        report["distributed"] = {}
        return report
    backends = {"pyg_lib": probe_pyg_lib, "torch_sparse": probe_torch_sparse,
                "pyg_neighbor_loader": probe_pyg_neighbor_loader, "graphlearn_torch": probe_glt}
    report["neighbor_sampling"] = {name: _run(fn) for name, fn in backends.items()}
    report["distributed"] = {"gloo_loopback": _run(lambda: probe_gloo(timeout_s)),
                             "rpc_loopback": _run(lambda: probe_rpc(timeout_s))}
    return report


def failed_requirements(report: dict[str, Any], *, neighbor: bool, glt: bool,
                        cuda: bool) -> list[str]:
    """Messages for each required check that failed (empty when all pass)."""
    failures = []
    sampling = report.get("neighbor_sampling", {})
    if neighbor and not any(v.get("ok") for k, v in sampling.items() if k != "graphlearn_torch"):
        failures.append(f"no PyG neighbour-sampling backend works: {FIXES['neighbor']}")
    if glt and not sampling.get("graphlearn_torch", {}).get("ok"):
        err = (report["packages"]["graphlearn_torch"].get("error")
               or sampling.get("graphlearn_torch", {}).get("error"))
        failures.append(f"graphlearn_torch does not sample ({err}): {FIXES['glt']}")
    if glt and report.get("glt_adapter", {}).get("error"):
        failures.append(report["glt_adapter"]["error"])
    if cuda and not report["torch"].get("cuda_available"):
        failures.append(f"CUDA is not available: {FIXES['cuda']}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m graphstore.tools.doctor",
        description="Print JSON about torch / PyG / GLT builds, which neighbour-sampling backends "
                    "really sample a 2-hop neighbourhood, and whether gloo and torch RPC work on "
                    "loopback. Starts no servers, downloads nothing, writes no files.")
    parser.add_argument("--require-neighbor-backend", action="store_true",
                        help="exit 1 unless a PyG sampling backend (pyg_lib, torch_sparse or "
                             "NeighborLoader) samples correctly")
    parser.add_argument("--require-glt", action="store_true",
                        help="exit 1 unless graphlearn_torch imports and samples correctly and "
                             f"is the version graphstore's workarounds were written for ({GLT_VERSION})")
    parser.add_argument("--require-cuda", action="store_true",
                        help="exit 1 unless torch sees a CUDA device")
    parser.add_argument("--timeout-s", type=float, default=20.0,
                        help="timeout for the gloo and RPC loopback checks (default 20)")
    args = parser.parse_args(argv)
    report = collect(args.timeout_s)
    failures = failed_requirements(report, neighbor=args.require_neighbor_backend,
                                   glt=args.require_glt, cuda=args.require_cuda)
    report["requirements_failed"] = failures
    print(json.dumps(report, indent=2))
    for msg in failures:
        print(f"graphstore.tools.doctor: error: {msg}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - a bug in the doctor itself: show it
        traceback.print_exc()
        sys.exit(1)
