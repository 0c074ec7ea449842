"""Storage memory: ``pipeline plan``'s estimate against the measured peak of real storage processes.

Each run generates a graph (graphstore.tools.datagen), partitions it into 2 (partition_graph), and runs
the real train stage through the local launcher (``python -m pipeline launch --stage train``: two
``components.storage`` processes, ``components.train`` for a few steps with a tiny val/test split,
so the run is mostly load and serve). While it runs, every 0.2 s, this script sums the
proportional set size (PSS, ``/proc/<pid>/smaps_rollup``: shared memory counted once) of each
storage process tree (the storage main process, its server-session process, the session's
sampling workers) and keeps the peak; it also reads the main process's own peak RSS (VmHWM).

* default: the ``large`` preset (hetero, 10 M raw edges, 18 M stored with reverse edges) is
  measured and compared with graphstore.planning.sizing's estimate (graphstore.planning.sizing.MEASURED, the
  numbers ``pipeline plan`` uses) for each storage machine; the acceptance band is 25%.
* ``--calibrate``: six homogeneous graphs of different shapes (two edge-heavy, node-heavy,
  feature-heavy, mixed, small), a 2 M-edge hetero one and the ``large`` preset served to 1
  compute process, and the mixed one to 2 and to 4, fitted by
  least squares: peak PSS = base + a * edges + b * labels + c * nodes_owned + d * feature_values
  (+ e * (compute processes - 1), fitted through the 1-process runs). Homogeneous graphs keep
  their labels in files of their own, one per edge (labels = edges); the hetero graphs' labels
  are a part of their edges (labels ~ 0.44 x edges), which separates a from b. The fit is printed as a ``MemoryModel(...)`` to paste into
  graphstore/planning/sizing.py.

usage: python benchmarks/plan.py [--calibrate [--repeats N]] [--work DIR] [--json FILE]
(a graph's measurement is kept in DIR/<graph>/measured_c<C>.json and reused; delete it to measure again)
Prints a table and writes benchmarks/results/plan.json (plan_calibration.json with --calibrate).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
POLL_S = 0.2

# (name, edges, nodes, feature dim, compute processes): homogeneous graphs; "hetero" is the
# generator's hetero shape at 2 M raw edges (users, items, weighted user->item edges and their
# reverses, item->item), like the validation graph but 5x smaller; "large" is the preset (10 M raw
# edges, 9 M stored and 4 M labels per partition): the largest rows, so the per-edge and per-label
# terms are fitted where they are a third of the peak, not a tenth. "features" holds 64 M feature
# values per partition (256 MB): with 12.8 M (its size until 2026-12-06) the feature term was
# ~60 MiB of the peak, and a peak sample moves by ~25 MiB between runs, so two calibrations of the
# same code gave 4.95 and 5.15 B per value
CALIBRATION = (
    ("large", 0, 0, 16, 1),
    ("edges16", 16_000_000, 400_000, 16, 1),
    ("edges", 4_000_000, 100_000, 16, 1),
    ("nodes", 1_000_000, 1_500_000, 16, 1),
    ("features", 1_000_000, 1_000_000, 128, 1),
    ("mixed", 2_000_000, 400_000, 32, 1),
    ("small", 20_000, 2_000, 16, 1),
    ("hetero", 2_000_000, 0, 16, 1),
    ("mixed", 2_000_000, 400_000, 32, 2),
    ("mixed", 2_000_000, 400_000, 32, 4),
)
TRAIN_ARGS = {"max_steps": 10, "val_every_steps": 1000, "log_every_steps": 5, "batch_size": 128,
              "eval_candidates": 50, "baselines": []}
SPLIT = {"num_val": 0.002, "num_test": 0.002}


# -- /proc readings ---------------------------------------------------------------------------------
def _status_kib(pid: int, key: str, name: str = "status") -> int:
    try:
        with open(f"/proc/{pid}/{name}") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rollup_kib(pid: int) -> dict[str, int]:
    """``/proc/<pid>/smaps_rollup``'s fields (KiB): Pss and its anonymous, shared-memory and
    file-backed parts."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key.startswith("Pss"):
                    out[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += _children(p)
    return pids


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            items = fh.read().split(b"\0")
    except OSError:
        return {}
    return dict(i.decode(errors="replace").split("=", 1) for i in items if b"=" in i)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    return _status_kib(pid, "PPid")


def _role(pid: int, main: int) -> str:
    """What a process of a storage tree is: the main process, a server session (a spawned
    child), the sampling workers' forkserver, or a sampling worker (the forkserver's children)."""
    if pid == main:
        return "main"
    cmd = _cmdline(pid)
    if "forkserver" in cmd:  # forked children keep their parent's command line
        return "sampling_workers" if "forkserver" in _cmdline(_parent(pid)) else "forkserver"
    if "spawn_main" in cmd:
        return "session"
    return "sampling_workers"


def measure_launch(task: Path, res: Path, run_dir: Path, stage: str = "train") -> dict[int, dict]:
    """Run ``stage``; per storage index: peak tree PSS and main-process VmHWM (MiB).
    The configs have one compute machine, so storage machine i has global RANK 1 + i."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(task), "--resource-config",
         str(res), "--stage", stage, "--run-dir", str(run_dir), "--timeout-s", "3000"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    mains: dict[int, int] = {}  # storage index -> main pid
    peak: dict[int, dict] = {}
    t0 = time.perf_counter()
    while proc.poll() is None:
        for pid in _tree(proc.pid):
            if pid not in mains.values() and "components.storage" in _cmdline(pid):
                rank = _environ(pid).get("RANK")
                if rank is not None and int(rank) >= 1:
                    mains[int(rank) - 1] = pid
        for index, pid in mains.items():
            tree = _tree(pid)
            by_role: dict[str, float] = {}
            kinds: dict[str, float] = {}
            for p in tree:
                role = _role(p, pid)
                rollup = _rollup_kib(p)
                by_role[role] = by_role.get(role, 0.0) + rollup.get("Pss", 0) / 1024
                for key in ("Pss_Anon", "Pss_Shmem", "Pss_File"):
                    kinds[f"{role}.{key}"] = kinds.get(f"{role}.{key}", 0.0) + rollup.get(key, 0) / 1024
            pss = sum(by_role.values())
            hwm = _status_kib(pid, "VmHWM") / 1024
            entry = peak.setdefault(index, {"peak_pss_mib": 0.0, "main_hwm_mib": 0.0, "processes": 0})
            if pss > entry["peak_pss_mib"]:
                entry["peak_pss_mib"] = pss
                entry["peak_by_role_mib"] = {k: round(v, 1) for k, v in sorted(by_role.items())}
                entry["peak_by_kind_mib"] = {k: round(v, 1) for k, v in sorted(kinds.items())}
            entry["main_hwm_mib"] = max(entry["main_hwm_mib"], hwm)
            entry["processes"] = max(entry["processes"], len(tree))
        time.sleep(POLL_S)
    out = proc.stdout.read()
    if proc.returncode != 0:
        raise SystemExit(f"launch failed ({proc.returncode}):\n{out[-4000:]}")
    for entry in peak.values():
        entry["seconds"] = round(time.perf_counter() - t0, 1)
    return peak


# -- runs --------------------------------------------------------------------------------------------
def _configs(root: Path, data: Path, base: str, num_compute: int) -> tuple[Path, Path]:
    import yaml

    task = yaml.safe_load((REPO / "configs" / base).read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    task["trainerConfig"]["trainerArgs"].update(TRAIN_ARGS)
    storage = task["trainerConfig"]["graphStoreStorageConfig"]["storageArgs"]
    storage["splitter_kwargs"].update(SPLIT)
    if base == "task_homo.yaml":  # the generated homogeneous tables carry feature_dim columns
        dim = json.loads((data / "dataset.json").read_text())["feature_dim"]
        task["datasetConfig"]["dataSources"]["nodes"][0]["featureColumns"] = [f"f_{i}" for i in range(dim)]
    local = {"num_storage_processes": 2, "num_compute_machines": 1,
             "compute_cluster_local_world_size": num_compute}
    res = {k: {"local_graph_store_config": local}
           for k in ("trainer_resource_config", "inferencer_resource_config")}
    tp, rp = root / f"task_c{num_compute}.yaml", root / f"res_c{num_compute}.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text(yaml.safe_dump(res))
    return tp, rp


def run_graph(work: Path, name: str, spec, base: str, num_compute: int,
              repeat: int = 0) -> list[dict]:
    """Generate (once), partition (once), launch; one row per storage machine. ``repeat``
    numbers the measurement (each is kept in its own file)."""
    from graphstore.config import load_config_pair
    from graphstore.tools.datagen import generate_dataset
    from graphstore.partition import partition_graph
    from graphstore.formats.shards.reader import ShardSet, is_complete
    from graphstore.planning.sizing import MEASURED, loads_from_manifest

    root = work / name
    data, run = root / "data", root / f"run_c{num_compute}"
    if not (data / "dataset.json").exists():
        generate_dataset(spec, str(data), overwrite=True)
    tp, rp = _configs(root, data, base, num_compute)
    shards = root / "shards"
    if not is_complete(str(shards)):
        task, _ = load_config_pair(str(tp), str(rp))
        partition_graph(task, num_partitions=2, output_uri=str(shards))
    run.mkdir(parents=True, exist_ok=True)
    if not (run / "shards").exists():
        (run / "shards").symlink_to(shards)
    manifest = ShardSet.open(str(shards)).manifest
    loads = loads_from_manifest(manifest)
    cache = root / f"measured_c{num_compute}_r{repeat}.json"  # a finished measurement is kept
    if cache.exists():
        measured = {int(k): v for k, v in json.loads(cache.read_text()).items()}
    else:
        measured = measure_launch(tp, rp, run)
        cache.write_text(json.dumps(measured))
    rows = []
    for load in loads:
        m = measured[load.partition]
        estimate = MEASURED.peak_bytes(load, num_compute) / 2**20
        rows.append({"graph": name, "compute_processes": num_compute, "partition": load.partition,
                     "edges": load.edges, "labels": load.labels, "nodes_total": load.nodes_total,
                     "nodes_owned": load.nodes_owned,
                     "feature_values": load.feature_values, **m,
                     "estimate_mib": round(estimate, 1),
                     "estimate_vs_pss": round(estimate / m["peak_pss_mib"], 3)})
    return rows


def fit(rows: list[dict]) -> dict:
    """Non-negative least squares over the 1-compute rows (a memory cost is never negative; plain
    least squares gave a negative per-node cost on these six shapes, whose counts are partly
    collinear); the compute term from the graph run with more compute processes."""
    import numpy as np
    from scipy.optimize import nnls

    one = [r for r in rows if r["compute_processes"] == 1]
    a = np.array([[1.0, r["edges"], r["labels"], r["nodes_owned"], r["feature_values"]] for r in one])
    y = np.array([r["peak_pss_mib"] * 2**20 for r in one])
    scale = a.max(axis=0)  # columns of similar size for the solver
    coef, _ = nnls(a / scale, y)
    coef = coef / scale
    pred = a @ coef
    more = [r for r in rows if r["compute_processes"] > 1]
    base_of = {(r["graph"], r["partition"]): r["peak_pss_mib"] for r in one}
    # least squares through the 1-process point: extra MiB = d * (C - 1)
    num = sum((r["compute_processes"] - 1) * (r["peak_pss_mib"] - base_of[(r["graph"], r["partition"])])
              for r in more)
    den = sum((r["compute_processes"] - 1) ** 2 for r in more)
    return {"base_mib": coef[0] / 2**20, "bytes_per_edge": coef[1], "bytes_per_label": coef[2],
            "bytes_per_owned_node": coef[3], "bytes_per_feature_value": coef[4],
            "per_compute_process_mib": num / den if den else 0.0,
            "max_rel_error": float(np.max(np.abs(pred - y) / y))}


def _provenance(started) -> dict:
    """Date, commit, command and machine of a run (every results file carries them); called when
    the run starts."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    return {"date": started.isoformat(timespec="seconds"), "commit": commit,
            "command": "python benchmarks/plan.py " + " ".join(sys.argv[1:]),
            "machine": {"node": platform.node(), "cpus": os.cpu_count()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--work", default=str(REPO / ".data" / "bench-plan"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeats", type=int, default=1,
                    help="measurements of each graph, interleaved (rounds over all graphs); a "
                         "row's peak is their median")
    a = ap.parse_args()
    from graphstore.tools.datagen import DatasetSpec

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    provenance = _provenance(datetime.datetime.now(datetime.timezone.utc))
    print(f"{'graph':>10} {'C':>2} {'part':>4} {'edges':>10} {'labels':>10} {'nodes':>9} {'feat_vals':>10} "
          f"{'peak_pss_mib':>12} {'main_hwm_mib':>12} {'estimate_mib':>12} {'est/pss':>7}", flush=True)
    rows: list[dict] = []
    if a.calibrate:
        rounds: list[list[dict]] = []
        for repeat in range(a.repeats):  # interleaved: every graph once per round
            rounds.append([])
            for name, edges, nodes, dim, c in CALIBRATION:
                if name == "large":
                    spec, base = DatasetSpec.from_preset("large"), "task_hetero.yaml"
                elif name == "hetero":
                    spec, base = DatasetSpec.from_num_edges(edges), "task_hetero.yaml"
                else:
                    spec = DatasetSpec(kind="homo", num_items=nodes, num_item_item_edges=edges,
                                       feature_dim=dim)
                    base = "task_homo.yaml"
                new = run_graph(work, name, spec, base, c, repeat)
                rounds[-1] += new
                _print(new)
        rows = [_median_row(same) for same in zip(*rounds)]
        if a.repeats > 1:
            print("medians of the rounds:")
            _print(rows)
        result = {"fit": fit(rows), "repeats": a.repeats}
    else:
        new = run_graph(work, "large", DatasetSpec.from_preset("large"), "task_hetero.yaml", 1)
        rows += new
        _print(new)
        worst = max(abs(r["estimate_vs_pss"] - 1) for r in rows)
        result = {"max_abs_error": round(worst, 3), "within_25_percent": worst <= 0.25}
    from graphstore.planning.sizing import MEASURED

    result.update(provenance, rows=rows, model=MEASURED.__repr__(), poll_s=POLL_S,
                  train_args=TRAIN_ARGS, split=SPLIT)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    out = Path(a.json or REPO / "benchmarks" / "results" /
               ("plan_calibration.json" if a.calibrate else "plan.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return 0


def _median_row(same: tuple[dict, ...]) -> dict:
    """One graph's row from its measurements (same graph, compute processes and partition):
    the one whose peak is the median (the lower middle one of an even count), with every
    measured peak in ``peak_pss_samples_mib``."""
    peaks = [r["peak_pss_mib"] for r in same]
    middle = sorted(same, key=lambda r: r["peak_pss_mib"])[(len(same) - 1) // 2]
    return {**middle, "peak_pss_samples_mib": [round(p, 1) for p in peaks]}


def _print(rows: list[dict]) -> None:
    for r in rows:
        print(f"{r['graph']:>10} {r['compute_processes']:>2} {r['partition']:>4} {r['edges']:>10,} {r['labels']:>10,} "
              f"{r['nodes_owned']:>9,} {r['feature_values']:>10,} {r['peak_pss_mib']:>12,.0f} "
              f"{r['main_hwm_mib']:>12,.0f} {r['estimate_mib']:>12,.0f} {r['estimate_vs_pss']:>7.2f}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
