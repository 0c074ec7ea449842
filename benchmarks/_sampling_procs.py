"""Peak memory of a process tree, for benchmarks/sampling.py.

:class:`TreeMemory` polls every process under a root pid (the mode's subprocess: the launcher
with its storage and compute processes, an embedded Ray with its workers, a PyG process with its
DataLoader workers) from a thread of the driver, which does no other work meanwhile. Per process:
peak RSS (``VmHWM``, the kernel's own high-water mark, read at every poll) and the peak of
``RssAnon`` (anonymous memory: the RSS without mapped file pages, so a memory-mapped graph file's
page cache is not counted; sampled, so a peak shorter than the poll interval can be missed), and
its CPU seconds as last seen. A process that lives less than a rescan interval can be missed.
:func:`label` names each process's role (consumer, sampler, storage, machine, system).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

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
        """Find new processes; re-read every command line (a Ray worker renames itself
        ``ray::...`` after it starts)."""
        try:
            root = psutil.Process(self.root)
            found = [root] + root.children(recursive=True)
        except psutil.Error:
            return
        for p in found:
            try:
                cmd = " ".join(p.cmdline()) or p.name()
                if p.pid not in self.procs:
                    self.procs[p.pid] = ProcPeak(p.pid, p.ppid(), cmd)
                else:
                    self.procs[p.pid].cmdline = cmd
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


def _ray_worker(cmdline: str) -> bool:
    """A Ray worker process that runs tasks (``ray::IDLE``, ``ray::ReadGraphSampling...``, or
    one not yet renamed), not one of Ray's own agents and actors (``ray::DashboardAgent``,
    ``ray::_StatsActor``, ...)."""
    if cmdline.startswith("ray::"):
        name = cmdline[5:].split()[0] if cmdline[5:].split() else ""
        return not (name.startswith("_") or name.endswith("Agent"))
    return any(arg.endswith("workers/default_worker.py") for arg in cmdline.split()[:2])


def label(procs: list[ProcPeak], consumers: set[int]) -> list[ProcPeak]:
    """Set each process's ``role``, the first that applies: ``consumer`` (iterates the loader
    and writes a result), ``sampler`` (a Ray worker process that runs tasks), ``system`` (launcher, Ray's own
    processes, trackers), ``storage`` (a storage process and its descendants), ``sampler`` (a
    descendant of a consumer: DataLoader / GLT sampling processes), ``machine`` (an ancestor of a
    consumer: a compute machine's parent), else ``other``."""
    by_pid = {p.pid: p for p in procs}

    def ancestors(p: ProcPeak) -> list[ProcPeak]:
        out, seen = [], set()
        while p.ppid in by_pid and p.ppid not in seen:
            seen.add(p.ppid)
            p = by_pid[p.ppid]
            out.append(p)
        return out

    above_consumers = {a.pid for c in consumers if c in by_pid for a in ancestors(by_pid[c])}
    for p in procs:
        up = ancestors(p)
        if p.pid in consumers:
            p.role = "consumer"
        elif _ray_worker(p.cmdline):
            p.role = "sampler"
        elif p.cmdline.startswith("ray::") or any(m in p.cmdline for m in SYSTEM_MARKS):
            p.role = "system"  # Ray's own agents and actors, Ray's daemons, launcher, trackers
        elif "components.storage" in p.cmdline or any("components.storage" in a.cmdline for a in up):
            p.role = "storage"
        elif any(a.pid in consumers for a in up):
            p.role = "sampler"
        elif p.pid in above_consumers:
            p.role = "machine"
        else:
            p.role = "other"
    return procs
