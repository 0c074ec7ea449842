"""GPU check: 1 storage + 1 compute process x 1 GPU, training then inference on the tiny dataset.

    scripts/gpu_check.sh [--expect auto|cuda|cpu] [--steps 50] [--workdir DIR] [--timeout-s 420]

What Vertex AI would run, on this one machine: a Vertex resource config whose compute pool has one
GPU (``gpu_limit: 1``, ``compute_cluster_local_world_size: 1``), the same commands and cluster
variables a CustomJob's replicas get (``CLUSTER_SPEC``, ``RANK``, ... from pipeline.topology, on
127.0.0.1), for the train stage and then the infer stage. It checks every exit code, that the
compute process took the device ``--expect`` names (from its ``device=... ddp=...`` log line;
``auto``: ``cuda`` when torch sees CUDA, else ``cpu``, where the GPU branch falls back with a
warning), that training ran ``--steps`` steps to a finite loss and a test MRR, and that every node
of every type got exactly one finite embedding. It prints one summary (JSON) last; exit 0 when all
holds, 1 when a check fails, 2 for bad arguments. Everything it writes is under ``--workdir`` (a
new temporary folder by default; an existing one must be empty).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # pipeline/ and components/ of this checkout

from graphstore.config import load_config_pair  # noqa: E402
from graphstore.tools.datagen import DatasetSpec, generate_dataset  # noqa: E402
from graphstore.formats.embeddings import read_success  # noqa: E402
from graphstore.partition import partition_graph  # noqa: E402
from graphstore.runtime.ports import free_ports  # noqa: E402
from graphstore.formats.run_paths import RunPaths  # noqa: E402
from pipeline import topology  # noqa: E402
from pipeline.launch import local_env, loopback_interface  # noqa: E402

DEVICE_LINE = re.compile(r"device=(\S+) ddp=(\S+)")
LOSS_LINE = re.compile(r"step=(\d+) loss=([0-9.naninf+-]+) batches_per_s=([0-9.]+)")


class CheckFailed(Exception):
    """One check did not hold: exit 1 with this line."""


def _configs(work: Path, data: Path, steps: int) -> tuple[Path, Path]:
    """The tiny task (local tables) and a one-GPU Vertex resource config, written under work/."""
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    task["trainerConfig"]["trainerArgs"] = {
        "num_neighbors": [5, 3], "batch_size": 32, "num_random_negatives": 64, "max_steps": steps,
        "val_every_steps": max(1, steps // 2), "log_every_steps": 10, "eval_candidates": 100,
        "hidden_dim": 32, "out_dim": 32, "lr": 0.01, "baselines": ["popularity"]}
    task["graphStoreRuntimeConfig"] = {"heartbeatIntervalS": 1, "heartbeatTimeoutS": 30,
                                       "readinessTimeoutS": 180, "rpcTimeoutS": 180}
    resources = yaml.safe_load((REPO / "configs" / "resource_vertex.yaml").read_text())
    for key, section in (("trainer_resource_config", "vertex_ai_graph_store_trainer_config"),
                         ("inferencer_resource_config", "vertex_ai_graph_store_inferencer_config")):
        pools = resources[key][section]
        pools["graph_store_pool"]["num_replicas"] = 1
        pools["compute_pool"].update(machine_type="n1-standard-8", gpu_type="NVIDIA_TESLA_T4",
                                     gpu_limit=1, num_replicas=1)
        pools["compute_cluster_local_world_size"] = 1
    tp, rp = work / "task.yaml", work / "resource.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text(yaml.safe_dump(resources))
    return tp, rp


def _run_stage(stage: str, tp: Path, rp: Path, run: Path, logs: Path, timeout_s: float) -> dict:
    """Storage then compute, as the CustomJob's two replicas; returns {role: log text}."""
    task, _ = load_config_pair(str(tp), str(rp))
    layout = topology.pool_layout(1, 1)
    ports = free_ports(3, "127.0.0.1")
    hosts = {pool.name: [] for pool in layout}
    for machine, port in zip(topology.machines(layout), ports):
        hosts[machine.pool].append(f"127.0.0.1:{port}")
    contract = topology.contract_args(task_config_path=str(tp), resource_config_path=str(rp),
                                      stage=stage, run_dir=str(run))
    commands = topology.role_commands(task, stage)
    extra = local_env(os.environ, loopback_interface())
    procs: dict[str, tuple[subprocess.Popen, Path]] = {}
    for machine in sorted(topology.machines(layout), key=lambda m: m.role != "storage"):
        key, command = commands[machine.role]
        argv = topology.split_command(command, key)
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        env = {**os.environ, **extra, "PYTHONPATH": str(REPO),
               **topology.cluster_environ(layout, hosts, machine.pool, machine.pool_index,
                                          f"gpu-check-{stage}", ports[-1])}
        log = logs / f"{stage}_{machine.role}.log"
        procs[machine.role] = (subprocess.Popen([*argv, *contract], env=env, cwd=REPO,
                                                stdout=log.open("w"), stderr=subprocess.STDOUT,
                                                start_new_session=True), log)
    deadline = time.monotonic() + timeout_s
    try:
        while any(p.poll() is None for p, _ in procs.values()):
            failed = [r for r, (p, _) in procs.items() if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        for p, _ in procs.values():  # only the process groups this script started
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p, _ in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)
    texts = {role: log.read_text() for role, (_, log) in procs.items()}
    codes = {role: p.returncode for role, (p, _) in procs.items()}
    if codes != {"storage": 0, "compute": 0}:
        tails = "\n".join(f"--- {stage} {role} (exit {codes[role]}), last lines:\n"
                          + "\n".join(text.splitlines()[-25:]) for role, text in texts.items())
        print(tails, file=sys.stderr)
        raise CheckFailed(f"{stage}: exit codes {codes} (timeout {timeout_s:.0f}s); logs in {logs}")
    return texts


def _device_of(stage: str, text: str, expect: str) -> str:
    found = DEVICE_LINE.findall(text)
    if not found:
        raise CheckFailed(f"{stage}: the compute log has no 'device=... ddp=...' line")
    devices = sorted({d for d, _ in found})
    want = ("cuda:0", "nccl") if expect == "cuda" else ("cpu", "gloo")
    if set(found) != {want}:
        raise CheckFailed(f"{stage}: compute ran on {found}, expected device={want[0]} "
                          f"ddp={want[1]} (--expect {expect})")
    return devices[0]


def check(expect: str, steps: int, work: Path, timeout_s: float) -> dict:
    import torch

    if expect == "auto":
        expect = "cuda" if torch.cuda.is_available() else "cpu"
    if expect == "cuda" and not torch.cuda.is_available():
        raise CheckFailed(f"--expect cuda, but torch {torch.__version__} sees no CUDA device "
                          "(torch.cuda.is_available() is False)")
    summary: dict = {"expect": expect, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                     "cuda_available": torch.cuda.is_available(),
                     "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    data, run, logs = work / "data", work / "run", work / "logs"
    logs.mkdir(parents=True)
    t0 = time.perf_counter()
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=1), str(data))
    tp, rp = _configs(work, data, steps)
    task, _ = load_config_pair(str(tp), str(rp))
    manifest = partition_graph(task, num_partitions=1, output_uri=RunPaths(str(run)).shards)
    summary["prepare_s"] = round(time.perf_counter() - t0, 1)

    t0 = time.perf_counter()
    train = _run_stage("train", tp, rp, run, logs, timeout_s)
    summary["train_s"] = round(time.perf_counter() - t0, 1)
    summary["train_device"] = _device_of("train", train["compute"], expect)
    # on a machine without CUDA the one-GPU config falls back to the CPU, saying why
    summary["cpu_fallback_warned"] = "computing on the CPU: the resource config gives 1 GPU" \
        in train["compute"]
    if expect == "cpu" and not summary["cuda_available"] and not summary["cpu_fallback_warned"]:
        raise CheckFailed("train: no warning that the GPU config fell back to the CPU")
    losses = [(int(s), float(v), float(r)) for s, v, r in LOSS_LINE.findall(train["compute"])]
    metrics = json.loads((run / "checkpoint" / "metrics.json").read_text())
    if metrics.get("steps") != steps or not losses or not all(math.isfinite(v) for _, v, _ in losses):
        raise CheckFailed(f"train: steps {metrics.get('steps')} (expected {steps}), losses {losses}")
    summary.update(steps=metrics["steps"], loss_first=losses[0][1], loss_last=losses[-1][1],
                   batches_per_s_last=losses[-1][2], test_mrr=round(metrics["test"]["model"]["mrr"], 4),
                   test_popularity_mrr=round(metrics["test"]["popularity"]["mrr"], 4))

    t0 = time.perf_counter()
    infer = _run_stage("infer", tp, rp, run, logs, timeout_s)
    summary["infer_s"] = round(time.perf_counter() - t0, 1)
    summary["infer_device"] = _device_of("infer", infer["compute"], expect)
    import numpy as np
    import pyarrow.parquet as pq

    counts = {}
    for node_type in task.inferencer.node_types:
        folder = RunPaths(str(run)).embeddings(node_type)
        marker = read_success(str(run), node_type)
        table = pq.read_table([str(Path(folder) / f) for f in marker.files])
        ids = table.column("int_id").to_numpy()
        emb = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
        expected = manifest.node_types[node_type].count
        if len(ids) != expected or len(np.unique(ids)) != expected or not np.isfinite(emb).all():
            raise CheckFailed(f"infer {node_type}: {len(ids)} rows, {len(np.unique(ids))} distinct, "
                              f"for {expected} nodes (finite: {bool(np.isfinite(emb).all())})")
        counts[node_type] = expected
    summary["embedded"] = counts
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu_check.sh", description=__doc__.split("\n")[0])
    parser.add_argument("--expect", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--workdir", help="an empty or new folder (default: a new temporary one)")
    parser.add_argument("--timeout-s", type=float, default=420, help="per stage")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gpu-check-"))
    if work.exists() and any(work.iterdir()):
        parser.error(f"--workdir {work} is not empty; give a new or empty folder")
    work.mkdir(parents=True, exist_ok=True)
    print(f"gpu_check: working in {work}", flush=True)
    try:
        summary = check(args.expect, args.steps, work, args.timeout_s)
    except CheckFailed as exc:
        print(f"gpu_check: FAILED: {exc}", file=sys.stderr)
        return 1
    print("gpu_check: OK " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
