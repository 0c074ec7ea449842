"""Graph-store inference throughput: nodes embedded per second, per configuration, one run.

The generated ``large`` graph (hetero, 10 M raw edges, 1.5 M nodes; override with --size) is
partitioned into 2 and a model trained for a few steps (once, kept in the work folder); then the
infer stage runs through the local launcher (2 storage processes, 1 compute machine x 2 compute
processes, every node of both types embedded) once per configuration, interleaved over
``--repeats``: ``inferenceBatchSize`` x the sampling workers per storage server
(``inferencerArgs.sampling_workers``). A run's nodes/s is every node of the stage divided by the
seconds the stage's sessions took from their first loader to their last batch (what the
inferencer logs per node type: ``infer <type> done: N embeddings ... in S s``); the stage's whole
wall time (start-up included) is reported beside it.

usage: python benchmarks/inference.py [--size large] [--batch-sizes 512,4096] [--workers 1,2]
           [--repeats 1] [--work DIR] [--json FILE]
Prints a table and writes benchmarks/results/inference.json (date, commit, command, machine).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DONE = re.compile(r"infer (\S+) done: (\d+) embeddings \(dim \d+\) in ([\d.]+) s")
TRAIN_ARGS = {"max_steps": 5, "val_every_steps": 1000, "log_every_steps": 5, "batch_size": 256,
              "eval_candidates": 50, "baselines": [], "num_neighbors": [10, 5]}


def _configs(root: Path, data: Path, batch: int, workers: int) -> tuple[Path, Path]:
    import yaml

    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    task["trainerConfig"]["trainerArgs"].update(TRAIN_ARGS)
    storage = task["trainerConfig"]["graphStoreStorageConfig"]["storageArgs"]
    storage["splitter_kwargs"].update({"num_val": 0.001, "num_test": 0.001})
    task["inferencerConfig"]["inferenceBatchSize"] = batch
    task["inferencerConfig"].setdefault("inferencerArgs", {})["sampling_workers"] = workers
    local = {"num_storage_processes": 2, "num_compute_machines": 1,
             "compute_cluster_local_world_size": 2}
    res = {k: {"local_graph_store_config": local}
           for k in ("trainer_resource_config", "inferencer_resource_config")}
    tp, rp = root / f"task_b{batch}_w{workers}.yaml", root / "res.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text(yaml.safe_dump(res))
    return tp, rp


def _launch(tp: Path, rp: Path, run: Path, stage: str) -> tuple[str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp), "--resource-config",
         str(rp), "--stage", stage, "--run-dir", str(run), "--timeout-s", "5400"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{stage} failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
    return proc.stdout, time.perf_counter() - t0


def prepare(work: Path, size: str) -> tuple[Path, Path]:
    """The graph, its shards and a checkpoint (made once)."""
    from graphstore.config import load_config_pair
    from graphstore.tools.datagen import DatasetSpec, generate_dataset
    from graphstore.partition import partition_graph
    from graphstore.formats.shards.reader import is_complete

    data, run = work / "data", work / "run"
    if not (data / "dataset.json").exists():
        generate_dataset(DatasetSpec.from_preset(size), str(data), overwrite=True)
    tp, rp = _configs(work, data, 512, 1)
    if not is_complete(str(run / "shards")):
        task, _ = load_config_pair(str(tp), str(rp))
        partition_graph(task, num_partitions=2, output_uri=str(run / "shards"))
    if not (run / "checkpoint" / "model.pt").exists():
        _launch(tp, rp, run, "train")
    return data, run


def measure(work: Path, data: Path, run: Path, batch: int, workers: int) -> dict:
    tp, rp = _configs(work, data, batch, workers)
    out, wall = _launch(tp, rp, run, "infer")
    done = DONE.findall(out)
    nodes = sum(int(n) for _, n, _ in done)
    seconds = sum(float(s) for _, _, s in done)
    return {"batch_size": batch, "sampling_workers": workers, "nodes": nodes,
            "embed_seconds": round(seconds, 1), "nodes_per_s": round(nodes / seconds),
            "stage_seconds": round(wall, 1),
            "per_type": {t: {"nodes": int(n), "seconds": float(s)} for t, n, s in done}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="large")
    ap.add_argument("--batch-sizes", default="512,4096")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--work", default=str(REPO / ".data" / "bench-inference"))
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "inference.json"))
    a = ap.parse_args()
    work = Path(a.work) / a.size
    work.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    data, run = prepare(work, a.size)
    combos = [(int(b), int(w)) for b in a.batch_sizes.split(",") for w in a.workers.split(",")]
    runs: dict[tuple[int, int], list[dict]] = {c: [] for c in combos}
    print(f"{'batch':>6} {'workers':>7} {'nodes':>9} {'embed_s':>8} {'nodes/s':>8} {'stage_s':>8}",
          flush=True)
    for _ in range(a.repeats):  # interleaved: every combination once per repeat
        for batch, workers in combos:
            r = measure(work, data, run, batch, workers)
            runs[(batch, workers)].append(r)
            print(f"{batch:>6} {workers:>7} {r['nodes']:>9,} {r['embed_seconds']:>8} "
                  f"{r['nodes_per_s']:>8,} {r['stage_seconds']:>8}", flush=True)
    summary = [{"batch_size": b, "sampling_workers": w,
                "nodes_per_s_median": statistics.median(r["nodes_per_s"] for r in rs),
                "stage_seconds_median": statistics.median(r["stage_seconds"] for r in rs),
                "runs": rs} for (b, w), rs in runs.items()]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    result = {"date": started.isoformat(timespec="seconds"), "commit": commit,
              "command": "python benchmarks/inference.py " + " ".join(sys.argv[1:]),
              "machine": {"node": platform.node(), "cpus": os.cpu_count()}, "size": a.size,
              "storage": 2, "compute_processes": 2, "summary": summary}
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(result, indent=1))
    for s in summary:
        print(f"batch {s['batch_size']} workers {s['sampling_workers']}: "
              f"{s['nodes_per_s_median']:,.0f} nodes/s (median of {len(s['runs'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
