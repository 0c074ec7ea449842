"""A big graph end to end on this machine: ``python -m pipeline run`` on the generated ``xlarge``
graph (hetero, 50 M raw edges, 90 M stored with the reverse type, 7.5 M nodes, 16 features),
2 storage processes + 1 compute machine x 2 compute processes (configs/resource_local.yaml):
partition -> train (100 steps, no baselines, no validation; 0.2% of the labels held out for the
test, as benchmarks/plan.py does: the task config's 10% is 4 M test pairs at this size, whose
scoring alone ran past 3 minutes) -> infer every node -> export.

While it runs, every 0.5 s, this script reads ``/proc`` for every process of the run and keeps,
per role, the peak of its process tree's proportional set size (PSS: shared pages counted once;
the measure ``pipeline plan``'s model is fitted on) and of its largest process's RSS. Roles: the
partition task, each storage machine (its main process, session processes, their sampling
workers), the compute machine of each stage (its parent, worker server and workers), export. It
then prints the run's stages with their seconds beside ``pipeline plan --shards``' estimate for
each storage machine, and writes benchmarks/results/xlarge.json (date, commit, command, machine).

usage: python benchmarks/xlarge.py [--size xlarge] [--work DIR] [--json FILE] [--set K=V]...
The generated graph is kept in DIR/data and reused; the run folder is made anew each time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
POLL_S = 0.5
SPLIT_KEY = "trainerConfig.graphStoreStorageConfig.storageArgs.splitter_kwargs"
SETTINGS = [f"{SPLIT_KEY}.num_val=0.002", f"{SPLIT_KEY}.num_test=0.002",
            "trainerConfig.trainerArgs.max_steps=100", "trainerConfig.trainerArgs.baselines=[]",
            "trainerConfig.trainerArgs.val_every_steps=1000"]


def _read(pid: int, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _kib(pid: int, key: str, name: str) -> int:
    for line in _read(pid, name).splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            out += [int(c) for c in _read(pid, f"task/{tid}/children").split()]
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


def _role(pid: int) -> str | None:
    """The role of a process that starts one (None for any other process)."""
    cmd = _read(pid, "cmdline").replace("\0", " ")
    for module, role in (("components.partition", "partition"), ("components.export", "export"),
                         ("components.train", "compute (train)"),
                         ("components.infer", "compute (infer)")):
        if f"-m {module}" in cmd:
            return role
    for function, role in (("_partition", "partition"), ("_export", "export")):
        if "kfp.dsl.executor_main" in cmd and f"--function_to_execute {function}" in cmd:
            return role  # pipeline run: kfp.local runs these tasks in its executor process
    if "-m components.storage" in cmd:
        env = dict(kv.split("=", 1) for kv in _read(pid, "environ").split("\0") if "=" in kv)
        stage = "train" if "--stage train" in cmd else "infer"
        return f"storage {int(env.get('RANK', '1')) - 1} ({stage})"
    return None


class Monitor(threading.Thread):
    """Peak tree PSS and largest RSS (MiB) per role, sampled every POLL_S (module docs)."""

    def __init__(self, root_pid: int) -> None:
        super().__init__(daemon=True)
        self.root_pid, self.peaks, self._halt = root_pid, {}, threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for pid in _tree(self.root_pid):
                role = _role(pid)
                if role is None:
                    continue
                tree = _tree(pid)
                pss = sum(_kib(p, "Pss", "smaps_rollup") for p in tree) / 1024
                rss = max(_kib(p, "VmRSS", "status") for p in tree) / 1024
                peak = self.peaks.setdefault(role, {"peak_pss_mib": 0.0, "max_rss_mib": 0.0,
                                                    "processes": 0})
                peak["peak_pss_mib"] = round(max(peak["peak_pss_mib"], pss), 1)
                peak["max_rss_mib"] = round(max(peak["max_rss_mib"], rss), 1)
                peak["processes"] = max(peak["processes"], len(tree))
            self._halt.wait(POLL_S)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


def _plan(run_root: Path, run_id: str, data: Path) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "plan", "--task-config", "configs/task_hetero.yaml",
         "--resource-config", "configs/resource_local.yaml", "--shards",
         str(run_root / run_id / "shards"), "--set", f"datasetConfig.dataRootUri={data}"],
        cwd=REPO, capture_output=True, text=True)
    return proc.stdout.splitlines()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="xlarge")
    ap.add_argument("--work", default=str(REPO / ".data" / "bench-xlarge"))
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "xlarge.json"))
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    a = ap.parse_args()
    work = Path(a.work)
    data, run_root = work / a.size, work / "runs"
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    if not (data / "dataset.json").exists():
        subprocess.run([sys.executable, "-m", "graphstore.tools.datagen", "--size", a.size, "--output",
                        str(data), "--overwrite"], cwd=REPO, check=True)
    datagen_s = time.perf_counter() - t0
    shutil.rmtree(run_root, ignore_errors=True)
    run_id = "xlarge"
    settings = [f"datasetConfig.dataRootUri={data}", *SETTINGS, *a.overrides]
    argv = [sys.executable, "-m", "pipeline", "run", "--task-config", "configs/task_hetero.yaml",
            "--resource-config", "configs/resource_local.yaml", "--run-root", str(run_root),
            "--run-id", run_id, "--quiet-kfp", *[x for s in settings for x in ("--set", s)]]
    t1 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    monitor = Monitor(proc.pid)
    monitor.start()
    out = proc.stdout.read()
    proc.wait()
    monitor.stop()
    seconds = time.perf_counter() - t1
    print(out[-6000:])
    if proc.returncode != 0:
        raise SystemExit(f"pipeline run failed ({proc.returncode})")
    stages = {}
    for rec in sorted((run_root / run_id / "_stages").glob("*.json")):
        body = json.loads(rec.read_text())
        stages[rec.stem] = {k: body.get(k) for k in ("status", "seconds", "summary") if k in body}
    plan = _plan(run_root, run_id, data)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    result = {"date": started.isoformat(timespec="seconds"), "commit": commit,
              "command": "python benchmarks/xlarge.py " + " ".join(sys.argv[1:]),
              "pipeline_command": " ".join(argv[1:]),
              "machine": {"node": platform.node(), "cpus": os.cpu_count(),
                          "memory_gib": round(os.sysconf("SC_PAGE_SIZE") *
                                              os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
              "datagen_seconds": round(datagen_s, 1), "run_seconds": round(seconds, 1),
              "stages": stages, "peaks": monitor.peaks, "plan": plan, "poll_s": POLL_S}
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(result, indent=1))
    print(f"run {seconds:.0f} s")
    for role, peak in sorted(monitor.peaks.items()):
        print(f"{role:>22}: peak PSS {peak['peak_pss_mib']:>9,.0f} MiB, largest RSS "
              f"{peak['max_rss_mib']:>8,.0f} MiB, {peak['processes']} processes")
    print("\n".join(line for line in plan if line.strip().startswith(("0 ", "1 ", "partition"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
