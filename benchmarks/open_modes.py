"""Open a big shard set in colocated and replicated mode: a short training run in each.

Issue 23 item 6: the partition stage's output at ``xlarge`` (90 M stored edges, 7.5 M nodes) must
open in all three modes. Graph-store mode is what ``benchmarks/xlarge.py`` runs end to end; this
script takes that run's shard set (``--shards``, default the xlarge benchmark's) and, for each of
``--modes``:

* ``colocated``: ``pipeline launch --stage train`` with no storage processes and 2 compute
  machines x 1 process, each loading its own partition in-process;
* ``replicated``: the graph file written from the shards (``write_run_graph_files``, timed, its
  peak RSS read from this process), then ``pipeline launch --stage train`` with the replicated
  resource config (one machine, embedded Ray, 2 DDP workers mapping the one file).

Each run trains ``--steps`` steps (no validation, 0.2% val/test split as the xlarge benchmark, no
baselines) and must exit 0. Reported per mode: the stage's wall time, its test MRR, and the peak
PSS / largest RSS of every compute process tree (sampled every 0.5 s, as benchmarks/xlarge.py).

usage: python benchmarks/open_modes.py [--shards DIR] [--modes colocated,replicated]
           [--steps 20] [--work DIR] [--json FILE]
Writes benchmarks/results/open_modes.json (date, commit, command, machine).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from xlarge import Monitor  # noqa: E402  (the same sampling as the end-to-end run)

XLARGE_RUN = REPO / ".data" / "bench-xlarge" / "runs" / "xlarge"
TRAIN_ARGS = {"val_every_steps": 100000, "log_every_steps": 5, "baselines": [],
              "eval_candidates": 100}
RESOURCES = {
    "colocated": {"num_storage_processes": 0, "num_compute_machines": 2,
                  "compute_cluster_local_world_size": 1},
    "replicated": {"mode": "replicated", "num_compute_machines": 1,
                   "compute_cluster_local_world_size": 2},
}


def _configs(root: Path, source_run: Path, mode: str, steps: int) -> tuple[Path, Path]:
    import yaml

    task = yaml.safe_load((source_run / "config" / "task.yaml").read_text())
    task["trainerConfig"]["trainerArgs"].update(TRAIN_ARGS, max_steps=steps)
    res = {k: {"local_graph_store_config": RESOURCES[mode]}
           for k in ("trainer_resource_config", "inferencer_resource_config")}
    tp, rp = root / "task.yaml", root / "res.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text(yaml.safe_dump(res))
    return tp, rp


def _graph_file(tp: Path, rp: Path, run: Path) -> dict:
    from graphstore.config import load_config_pair
    from graphstore.modes.replicated.run_files import write_run_graph_files

    task, _ = load_config_pair(str(tp), str(rp))
    t0 = time.perf_counter()
    write_run_graph_files(task, str(run))
    size = sum(f.stat().st_size for f in (run / "graph").iterdir())
    return {"seconds": round(time.perf_counter() - t0, 1), "bytes": size,
            "peak_rss_mib_of_this_process": round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def run_mode(mode: str, shards: Path, work: Path, steps: int) -> dict:
    root = work / mode
    run = root / "run"
    run.mkdir(parents=True, exist_ok=True)
    if not (run / "shards").exists():
        (run / "shards").symlink_to(shards.resolve())
    tp, rp = _configs(root, shards.parent, mode, steps)
    out: dict = {"mode": mode, "steps": steps}
    if mode == "replicated":
        out["graph_file"] = _graph_file(tp, rp, run)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp), "--resource-config",
         str(rp), "--stage", "train", "--run-dir", str(run), "--timeout-s", "3000"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    monitor = Monitor(proc.pid)
    monitor.start()
    text, _ = proc.communicate()
    monitor.stop()
    out.update(exit_code=proc.returncode, seconds=round(time.perf_counter() - t0, 1),
               processes=monitor.peaks)
    (root / "launch.log").write_text(text)
    if proc.returncode != 0:
        out["tail"] = text[-3000:]
        return out
    metrics = json.loads((run / "checkpoint" / "metrics.json").read_text())
    out["test_mrr"] = round(metrics["test"]["model"]["mrr"], 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default=str(XLARGE_RUN / "shards"))
    ap.add_argument("--modes", default="colocated,replicated")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--work", default=str(REPO / ".data" / "bench-open-modes"))
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "open_modes.json"))
    args = ap.parse_args()
    shards = Path(args.shards)
    if not (shards / "CURRENT").exists():
        print(f"no shard set at {shards}: run benchmarks/xlarge.py first (or give --shards)",
              file=sys.stderr)
        return 2
    results = []
    for mode in args.modes.split(","):
        r = run_mode(mode, shards, Path(args.work), args.steps)
        results.append(r)
        print(json.dumps(r, indent=1), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    Path(args.json).write_text(json.dumps({
        "date": datetime.date.today().isoformat(), "commit": commit,
        "command": "python benchmarks/open_modes.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "shards": str(shards), "results": results}, indent=1) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
