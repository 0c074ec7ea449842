"""``--profile-graph-store`` of benchmarks/sampling.py: where a graph-store epoch's time goes.

One graph-store run (2 storage processes + 1 compute process, the loader's defaults). After its
warm-up epoch the consumer waits (benchmarks/_sampling_modes.py, ``--profile-dir``); py-spy is
then attached to every process of the storage side (the storage processes and their GLT
sampling processes) and of the compute side (the compute machine's process and its children),
one ``py-spy record --nonblocking --format raw`` per process, and stopped (SIGINT: it writes its
output) when the timed epoch ends. py-spy leaves idle threads out; a thread blocked inside a
C call that holds no Python-visible wait (e.g. a shared-memory channel's ``recv``) still counts.

Each sample is put in a category by the innermost frame of its stack that a rule of
:data:`CATEGORIES` matches (else ``other``); the printout gives each side's share per category
with its top leaf frames, the samples per process, and the top leaf frames overall.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import psutil

from _sampling_procs import SYSTEM_MARKS

CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("collation", ("collate", "to_data", "to_hetero_data", "_to_pyg", "finish_batch",
                   "torch_geometric/", "graphstore/dataset/loaders.py")),
    ("serialisation", ("pickle", "serializ", "reductions.py", "dumps", "loads", "_rebuild",
                       "shm_channel", "SampleMessage", "to_msg")),
    ("RPC", ("distributed/rpc", "rpc_", "_rpc", "rpc.py", "request_server", "async_request",
             "dist_client", "dist_server", "concurrent/futures", "asyncio")),
    ("storage sampling", ("graphlearn_torch/sampler", "sample_from", "sample_one_hop", "_sample",
                          "neighbor_sampler", "graphlearn_torch/data", "dist_feature",
                          "torch_sparse", "graphstore/storage")),
]
"""Rules, tried on every frame of a stack from the innermost outwards; the first frame that
one rule's fragment matches decides the sample's category (within a frame, in this order).
Checked first, on the innermost frame only: :data:`WAITING` (a thread py-spy saw running
while it waits: an event loop's ``select``, a condition's ``wait``, a sleep)."""
WAITING = ("select (selectors.py", "wait (threading.py", "sleep", "Event.wait", "Queue.get")
_RECORD = re.compile(r"^(.*) (\d+)$")


def find_py_spy(given: str | None) -> str | None:
    """``given`` (a path, or a name on PATH), else ``py-spy`` on PATH; None when not found."""
    if given:
        return given if Path(given).is_file() else shutil.which(given)
    return shutil.which("py-spy")


def record(py_spy: str, pid: int, out: Path, rate: int) -> subprocess.Popen:
    """Start py-spy on ``pid`` alone (raw collapsed stacks to ``out``); end it with :func:`finish`."""
    return subprocess.Popen([py_spy, "record", "--pid", str(pid), "--nonblocking", "--rate", str(rate),
                             "--format", "raw", "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout_s: float = 60.0) -> str:
    """Stop a py-spy of :func:`record` (SIGINT: it writes its output); its ``Samples:`` line."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    lines = [ln for ln in (out or "").splitlines() if "Samples:" in ln or "rror" in ln]
    return lines[-1].replace("py-spy> ", "") if lines else f"exit {proc.returncode}, no summary"


def read_raw(path: Path) -> Counter:
    """``{stack (outermost first, frames 'func (file:line)'): samples}`` of one raw py-spy file."""
    stacks: Counter = Counter()
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            m = _RECORD.match(line.strip())
            if m and m.group(1):
                stacks[tuple(f for f in m.group(1).split(";") if f)] += int(m.group(2))
    return stacks


def category(stack: tuple[str, ...]) -> str:
    """The category of one stack (:data:`CATEGORIES`, :data:`WAITING`)."""
    if any(m in stack[-1] for m in WAITING):
        return "waiting"
    for frame in reversed(stack):
        for name, marks in CATEGORIES:
            if any(m in frame for m in marks):
                return name
    return "other"


def summarise(stacks: Counter, top: int = 3) -> dict:
    """Samples per category with their top leaf frames, and the top leaf frames overall."""
    total = sum(stacks.values())
    cats: dict[str, Counter] = {name: Counter() for name, _ in CATEGORIES + [("waiting", ()), ("other", ())]}
    leaves: Counter = Counter()
    for stack, n in stacks.items():
        cat = category(stack)
        cats[cat][stack[-1]] += n
        leaves[(stack[-1], cat)] += n
    return {"samples": total,
            "categories": {name: {"samples": sum(c.values()),
                                  "share": round(sum(c.values()) / total, 3) if total else 0.0,
                                  "top": [[f, n] for f, n in c.most_common(top)]}
                           for name, c in cats.items()},
            "top_frames": [[f, cat, n] for (f, cat), n in leaves.most_common(12)]}


def print_summary(name: str, s: dict, per_process: list[dict]) -> None:
    """One side's profile (:func:`summarise`) as text."""
    print(f"\n## {name}: {s['samples']} samples of active threads")
    for p in per_process:
        print(f"   pid {p['pid']:>7}: {p['samples']:>6} samples  {p['cmdline'][:90]}")
    for cat, c in sorted(s["categories"].items(), key=lambda kv: -kv[1]["samples"]):
        print(f"  {cat:<17} {c['share'] * 100:5.1f}%  {c['samples']:>7}")
        for frame, n in c["top"]:
            print(f"      {n:>7}  {frame}")
    print("  top frames:")
    for frame, cat, n in s["top_frames"]:
        print(f"    {n:>7}  [{cat}] {frame}")


def _sides(root: psutil.Process) -> dict[int, tuple[str, str]]:
    """``{pid: (side, cmdline)}`` of the processes worth profiling under the launcher ``root``:
    a storage process or the compute machine's, and their descendants (not trackers)."""
    info: dict[int, tuple[int, str]] = {}
    for p in root.children(recursive=True):
        try:
            info[p.pid] = (p.ppid(), " ".join(p.cmdline()))
        except psutil.Error:
            continue

    def side(pid: int) -> str | None:
        while pid in info:
            ppid, cmd = info[pid]
            if "components.storage" in cmd:
                return "storage"
            if "_sampling_modes.py graph_store" in cmd:
                return "compute"
            pid = ppid
        return None

    return {pid: (s, cmd) for pid, (_, cmd) in info.items()
            if (s := side(pid)) is not None and not any(m in cmd for m in SYSTEM_MARKS)}


def profile_graph_store(a: argparse.Namespace, root: Path, run_mode: Callable, mode) -> int:
    """The ``--profile-graph-store`` run (module docs); py-spy must be found (checked before)."""
    py_spy = find_py_spy(a.py_spy)
    marks = root / "profile"
    marks.mkdir(exist_ok=True)
    for f in marks.iterdir():
        f.unlink()
    targets: dict[int, tuple[str, str]] = {}

    def during(proc: subprocess.Popen) -> None:
        while not (marks / "start").exists():
            if proc.poll() is not None:
                return
            time.sleep(0.1)
        targets.update(_sides(psutil.Process(proc.pid)))
        spies = {pid: record(py_spy, pid, marks / f"{side}_{pid}.raw", a.profile_rate)
                 for pid, (side, _) in targets.items()}
        time.sleep(2.0)  # attached before the epoch starts
        (marks / "go").write_text("")
        while not (marks / "end").exists() and proc.poll() is None:
            time.sleep(0.1)
        for pid, spy in spies.items():
            print(f"# py-spy on {targets[pid][0]} pid {pid}: {finish(spy)}", flush=True)

    res = run_mode(a, mode, root, "profile", profile=marks, during=during)
    doc: dict = {"run": res, "sides": {}}
    for side in ("storage", "compute"):
        stacks: Counter = Counter()
        per_process = []
        for pid, (s, cmd) in targets.items():
            if s == side:
                mine = read_raw(marks / f"{side}_{pid}.raw")
                stacks.update(mine)
                per_process.append({"pid": pid, "cmdline": cmd, "samples": sum(mine.values())})
        summary = summarise(stacks)
        doc["sides"][side] = summary | {"processes": per_process}
        print_summary(side, summary, per_process)
    print(f"\nprofiled epoch: {res['epoch_seconds'][0]:.2f} s, {res['seeds_per_s']:,.0f} seeds/s with "
          f"py-spy attached (--rate {a.profile_rate}); raw stacks and summary.json under {marks}")
    (marks / "summary.json").write_text(json.dumps(doc, indent=1, default=str))
    return 0
