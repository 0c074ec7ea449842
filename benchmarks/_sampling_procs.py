"""Process-side helpers of benchmarks/sampling.py: peak memory of a process tree, py-spy profiles.

:class:`TreeMemory` polls every process under a root pid (the mode's subprocess: the launcher
with its storage and compute processes, an embedded Ray with its workers, a PyG process with its
DataLoader workers) from a thread of the driver, which does no other work meanwhile. Per process:
peak RSS (``VmHWM``, the kernel's own high-water mark, read at every poll) and the peak of
``RssAnon`` (anonymous memory: the RSS without mapped file pages, so a memory-mapped graph file's
page cache is not counted; sampled, so a peak shorter than the poll interval can be missed), and
its CPU seconds as last seen. A process that lives less than a rescan interval can be missed.
:func:`label` names each process's role (consumer, sampler, storage, machine, system).

py-spy (:func:`record`, :func:`summarise`): ``py-spy record --format raw --subprocesses
--nonblocking`` on a process and its children; the samples are grouped by the innermost frame
that a rule of :data:`CATEGORIES` matches (else ``other``). py-spy leaves idle threads out.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

_STATUS_KEYS = {"VmHWM": "hwm", "VmRSS": "rss", "RssAnon": "anon"}
SYSTEM_MARKS = ("raylet", "gcs_server", "ray/_private", "ray/dashboard", "log_monitor",
                "pipeline launch", "-m pipeline", "resource_tracker", "semaphore_tracker",
                "ray/autoscaler", "runtime_env")
"""Command-line fragments of processes that are plumbing, not a mode's workers."""


@dataclass
class ProcPeak:
    """One process of the tree: its peaks in MiB (see the module docs)."""

    pid: int
    ppid: int
    cmdline: str
    peak_rss_mb: float = 0.0
    peak_anon_mb: float = 0.0
    cpu_s: float = 0.0  # user + system CPU seconds, as last seen
    role: str = "other"


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15 of stat)


def _status_mb(pid: int) -> dict[str, float]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key = line.split(":", 1)[0]
                if key in _STATUS_KEYS:
                    out[_STATUS_KEYS[key]] = int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return out


@dataclass
class TreeMemory:
    """Peak memory of every process under ``root`` (module docs); ``start()`` then ``stop()``."""

    root: int
    interval_s: float = 0.25
    rescan_s: float = 0.5
    procs: dict[int, ProcPeak] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TreeMemory:
        self._thread.start()
        return self

    def _scan(self) -> None:
        try:
            root = psutil.Process(self.root)
            found = [root] + root.children(recursive=True)
        except psutil.Error:
            return
        for p in found:
            if p.pid not in self.procs:
                try:
                    cmd = " ".join(p.cmdline()) or p.name()
                    self.procs[p.pid] = ProcPeak(p.pid, p.ppid(), cmd)
                except psutil.Error:
                    continue

    def _poll(self) -> None:
        for peak in self.procs.values():
            s = _status_mb(peak.pid)
            peak.peak_rss_mb = max(peak.peak_rss_mb, s.get("hwm", 0.0), s.get("rss", 0.0))
            peak.peak_anon_mb = max(peak.peak_anon_mb, s.get("anon", 0.0))
            cpu = _cpu_s(peak.pid)
            if cpu is not None:
                peak.cpu_s = cpu

    def _run(self) -> None:
        last_scan = 0.0
        while not self._stop.is_set():
            if time.monotonic() - last_scan >= self.rescan_s:
                self._scan()
                last_scan = time.monotonic()
            self._poll()
            self._stop.wait(self.interval_s)

    def stop(self) -> list[ProcPeak]:
        self._stop.set()
        self._thread.join()
        return list(self.procs.values())


def label(procs: list[ProcPeak], consumers: set[int]) -> list[ProcPeak]:
    """Set each process's ``role``: ``consumer`` (iterates the loader and writes a result),
    ``sampler`` (a Ray worker, or any descendant of a consumer: DataLoader / GLT sampling
    processes), ``storage`` (a storage process and its descendants), ``system`` (launcher, Ray's
    own processes, trackers), ``machine`` (a compute machine's parent), else ``other``."""
    by_pid = {p.pid: p for p in procs}

    def ancestors(p: ProcPeak):
        seen = set()
        while p.ppid in by_pid and p.ppid not in seen:
            seen.add(p.ppid)
            p = by_pid[p.ppid]
            yield p

    for p in procs:
        up = list(ancestors(p))
        if p.pid in consumers:
            p.role = "consumer"
        elif p.cmdline.startswith("ray::"):
            p.role = "sampler"
        elif any(m in p.cmdline for m in SYSTEM_MARKS):
            p.role = "system"
        elif "components.storage" in p.cmdline or any("components.storage" in a.cmdline for a in up):
            p.role = "storage"
        elif any(a.pid in consumers for a in up):
            p.role = "sampler"
        elif "_sampling_modes.py graph_store" in p.cmdline:
            p.role = "machine"
    return procs


# -- py-spy --------------------------------------------------------------------------------------
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("collation", ("collate", "to_data", "to_hetero_data", "_to_pyg", "finish_batch",
                   "torch_geometric/", "graphstore/loaders.py")),
    ("serialisation", ("pickle", "serializ", "reductions.py", "dumps", "loads", "_rebuild",
                       "shm", "channel", "SampleMessage", "to_msg", "message")),
    ("RPC", ("distributed/rpc", "rpc_", "_rpc", "rpc.py", "request_server", "async_request",
             "dist_client", "dist_server", "futures", "concurrent/", "asyncio")),
    ("storage sampling", ("graphlearn_torch/sampler", "sample_from", "sample_one_hop", "_sample",
                          "neighbor_sampler", "dist_neighbor_sampler", "graphlearn_torch/data",
                          "dist_feature", "feature.py", "torch_sparse", "graphstore/storage")),
]
"""Rules, tried on every frame of a stack from the innermost outwards; the first frame that
one rule's fragment matches decides the sample's category. Within a frame the rules are tried
in this order."""


def find_py_spy(given: str | None) -> str | None:
    """``given`` (a path or a name on PATH), else ``py-spy`` on PATH; None when not found."""
    if given:
        return given if Path(given).is_file() else shutil.which(given)
    return shutil.which("py-spy")


def record(py_spy: str, pid: int, out: Path, rate: int = 100) -> subprocess.Popen:
    """Start py-spy on ``pid`` and its subprocesses (raw collapsed stacks to ``out``); end it
    with :func:`finish`."""
    return subprocess.Popen([py_spy, "record", "--pid", str(pid), "--subprocesses", "--nonblocking",
                             "--rate", str(rate), "--format", "raw", "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout_s: float = 60.0) -> str:
    """Stop a py-spy started by :func:`record` (SIGINT: it writes its output) and return its
    messages."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out or ""


_PROCESS = re.compile(r'process \d+:"[^"]*";', re.S)
_RECORD = re.compile(r"^(.*) (\d+)$")


def read_raw(path: Path) -> Counter:
    """``{stack (outermost first, frames as 'func (file:line)'): samples}`` of a raw py-spy file
    (process prefixes removed: their command lines may hold newlines and ';')."""
    stacks: Counter = Counter()
    if not path.exists():
        return stacks
    text = _PROCESS.sub("", path.read_text(errors="replace"))
    for line in text.splitlines():
        m = _RECORD.match(line.strip())
        if m:
            stacks[tuple(f for f in m.group(1).split(";") if f)] += int(m.group(2))
    return stacks


def category(stack: tuple[str, ...]) -> str:
    """The category of one stack (:data:`CATEGORIES`)."""
    for frame in reversed(stack):
        for name, marks in CATEGORIES:
            if any(m in frame for m in marks):
                return name
    return "other"


def summarise(stacks: Counter, top: int = 3) -> dict:
    """Samples per category with their top leaf frames, and the top leaf frames overall."""
    total = sum(stacks.values())
    cats: dict[str, Counter] = {name: Counter() for name, _ in CATEGORIES + [("other", ())]}
    leaves: Counter = Counter()
    for stack, n in stacks.items():
        leaf = stack[-1] if stack else "?"
        cats[category(stack)][leaf] += n
        leaves[(leaf, category(stack))] += n
    return {"samples": total,
            "categories": {name: {"samples": sum(c.values()),
                                  "share": round(sum(c.values()) / total, 3) if total else 0.0,
                                  "top": [[f, n] for f, n in c.most_common(top)]}
                           for name, c in cats.items()},
            "top_frames": [[f, cat, n] for (f, cat), n in leaves.most_common(12)]}


def print_summary(name: str, s: dict) -> None:
    """One process group's profile (:func:`summarise`) as text."""
    print(f"\n## {name}: {s['samples']} samples (active threads only)")
    for cat, c in sorted(s["categories"].items(), key=lambda kv: -kv[1]["samples"]):
        print(f"  {cat:<17} {c['share'] * 100:5.1f}%  {c['samples']:>7}")
        for frame, n in c["top"]:
            print(f"      {n:>7}  {frame}")
    print("  top frames:")
    for frame, cat, n in s["top_frames"]:
        print(f"    {n:>7}  [{cat}] {frame}")
