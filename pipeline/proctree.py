"""The processes of one local launch: start, pump output, watch, and end whole process trees.

A started process (:class:`Running`) leads its own session; its merged stdout/stderr goes to its
log file and, prefixed with its label, to an echo callback. Every process of a run gets
:data:`LAUNCH_ID_VAR` in its environment (a value unique to the run) and passes it on to what it
starts. :func:`end_all` ends every process of a run: each session (process group), every
descendant tracked while it lived (also those that left the session), and every process whose
environment carries the run's id (also an orphan that left the session and re-parented away
between two tracking samples, e.g. a double-forked daemon): SIGTERM followed by SIGCONT (a
stopped process acts on SIGTERM only once continued), then SIGKILL after a grace.
:meth:`Running.stopped_for` reports a process of the tree stopped (state T) for a while, which the
launcher treats as a failure. Used by pipeline.launch; no config knowledge here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import psutil

from pipeline import topology

log = logging.getLogger("pipeline.launch")
TERM_GRACE_S = 5.0
_PROC_FS = os.path.isdir("/proc/self")
LAUNCH_ID_VAR = "GRAPHSTORE_LAUNCH_ID"
"""Set in every process of a run to the run's id; end_all finds the run's processes by it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessSpec:
    """One process to start: a machine of the cluster and the command it runs."""

    role: topology.Role
    role_index: int
    rank: int
    label: str  # "storage 1", "compute 0/2" (machine 0 of 2)
    config_key: str  # where the command comes from, for messages
    argv: tuple[str, ...]
    env: Mapping[str, str]  # the variables set on top of the launcher's environment
    log_path: Path


@dataclass(frozen=True, kw_only=True, slots=True)
class Stall:
    """A process of a run's tree found stopped for ``seconds`` (at ``noticed_at``, monotonic),
    which is at least ``limit_s``, the longest a process of a run may stay stopped."""

    pid: int
    command: str
    seconds: float
    limit_s: float
    noticed_at: float


def _drop(_line: str) -> None:
    """An echo that discards."""


class Running:
    """One started process: its output pump, its exit watcher, and the descendants seen so far."""

    def __init__(self, spec: ProcessSpec, base_env: Mapping[str, str],
                 echo: Callable[[str], None], changed: threading.Event, launch_id: str) -> None:
        """Start the process (its own session, ``launch_id`` in its environment) and the threads
        that pump and watch it."""
        self.spec = spec
        self.exit_time: float | None = None
        self.stall: Stall | None = None  # set by the launcher when a process stopped too long
        self._stopped_since: dict[int, float] = {}
        self.popen = subprocess.Popen(
            spec.argv, env={**base_env, **spec.env, LAUNCH_ID_VAR: launch_id},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.pgid = self.popen.pid  # start_new_session: the process leads its own group
        self.tracked: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.NoSuchProcess):
            self.tracked[self.popen.pid] = psutil.Process(self.popen.pid)
        self.pump = threading.Thread(target=self._pump, args=(echo,), daemon=True,
                                     name=f"pump {spec.label}")
        self.watcher = threading.Thread(target=self._watch, args=(changed,), daemon=True,
                                        name=f"wait {spec.label}")
        self.pump.start()
        self.watcher.start()

    def _pump(self, echo: Callable[[str], None]) -> None:
        """Copy merged stdout/stderr to the log file and, prefixed, to ``echo``."""
        prefix, stdout = f"[{self.spec.label}] ", self.popen.stdout
        if stdout is None:  # not reached: Popen(stdout=PIPE)
            return
        with open(self.spec.log_path, "wb") as log_file:
            for line in iter(stdout.readline, b""):
                log_file.write(line)
                log_file.flush()
                try:
                    echo(prefix + line.decode("utf-8", errors="replace").rstrip("\r\n"))
                except OSError:  # e.g. stdout piped into `head`: keep draining into the log
                    echo = _drop
        stdout.close()

    def _watch(self, changed: threading.Event) -> None:
        self.popen.wait()
        self.exit_time = time.monotonic()
        changed.set()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode if self.exit_time is not None else None

    @property
    def failed_at(self) -> float | None:
        """When this process was seen failing (a non-zero exit, or a stall); None if it did not."""
        if self.stall is not None:
            return self.stall.noticed_at
        return self.exit_time if self.returncode not in (None, 0) else None

    def track_descendants(self, children: Mapping[int, Sequence[int]] | None = None) -> None:
        """Remember descendants now, so that those that leave the session can still be ended.
        ``children`` is :func:`children_by_parent` of this moment (one scan of the process
        table shared by every tree; read here when not given)."""
        children = children_by_parent() if children is None else children
        todo = list(self.tracked)
        while todo:
            for pid in children.get(todo.pop(), ()):
                if pid not in self.tracked:
                    with contextlib.suppress(psutil.Error):
                        self.tracked[pid] = psutil.Process(pid)
                        todo.append(pid)

    def stopped_for(self, now: float) -> tuple[psutil.Process, float] | None:
        """The process of this tree (itself or a tracked descendant) that has been stopped
        (state T: SIGSTOP, SIGTSTP, ...) the longest, with the seconds since it was first seen
        stopped (sampled: call this regularly); None when none is stopped."""
        longest: tuple[psutil.Process, float] | None = None
        for pid, proc in list(self.tracked.items()):
            try:
                stopped = proc.status() == psutil.STATUS_STOPPED
            except psutil.Error:
                stopped = False
            if not stopped:
                self._stopped_since.pop(pid, None)
                continue
            seconds = now - self._stopped_since.setdefault(pid, now)
            if longest is None or seconds > longest[1]:
                longest = (proc, seconds)
        return longest


def _run_members(pgids: set[int], launch_id: str) -> list[psutil.Process]:
    """Every process in one of ``pgids`` or with ``LAUNCH_ID_VAR=launch_id`` in its environment
    (this process excluded)."""
    members, own = [], os.getpid()
    marker = f"{LAUNCH_ID_VAR}={launch_id}\0".encode()
    for proc in psutil.process_iter():
        if proc.pid == own:
            continue
        try:
            if os.getpgid(proc.pid) in pgids or marker in _environ_bytes(proc):
                members.append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def _environ_bytes(proc: psutil.Process) -> bytes:
    """The environment block of ``proc`` (NUL-terminated ``NAME=value`` entries), read from /proc
    on Linux, else through psutil; empty when it cannot be read (gone, a zombie, another user)."""
    if _PROC_FS:
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                return f.read()
        except OSError:
            return b""
    try:
        return b"".join(f"{k}={v}\0".encode() for k, v in proc.environ().items())
    except psutil.Error:
        return b""


def _signal_all(pgids: set[int], procs: Sequence[psutil.Process], sig: int) -> None:
    """``sig`` to each process group and each process; after SIGTERM also SIGCONT, so that a
    stopped process runs its SIGTERM handler now instead of waiting for SIGKILL."""
    for s in (sig, signal.SIGCONT) if sig == signal.SIGTERM else (sig,):
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, s)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(s)  # psutil checks the pid still names the same process


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (an orphan's zombie may never be reaped in a container)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def children_by_parent() -> dict[int, list[int]]:
    """Parent pid -> its children's pids, from one scan of the process table (psutil's
    ``children(recursive=True)`` scans all of it per call: the launcher spent ~14% of a 2-core
    machine's samples there, tracking every process of a run every 0.5 s)."""
    out: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None:
            out.setdefault(ppid, []).append(proc.pid)
    return out


def _wait_gone(procs: Sequence[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for ``procs`` to end; returns those still alive."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in procs if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive


def end_all(running: Sequence[Running], launch_id: str,
            term_grace_s: float = TERM_GRACE_S) -> int:
    """End every process of the run (see the module docs): SIGTERM (+ SIGCONT), then SIGKILL to
    what is left after ``term_grace_s``. Returns how many processes were still alive."""
    children = children_by_parent()
    for r in running:
        r.track_descendants(children)
    pgids = {r.pgid for r in running}
    targets = {p.pid: p for r in running for p in r.tracked.values()}
    targets.update({p.pid: p for p in _run_members(pgids, launch_id)})
    alive = [p for p in targets.values() if _alive(p)]
    if not alive:
        return 0
    _signal_all(pgids, alive, signal.SIGTERM)
    still = _wait_gone(alive, term_grace_s)
    known = {p.pid for p in alive}  # and whatever they started meanwhile
    still += [p for p in _run_members(pgids, launch_id) if p.pid not in known and _alive(p)]
    if still:
        log.warning("pids=%s ignored SIGTERM for %.0f s; sending SIGKILL",
                    [p.pid for p in still], term_grace_s)
        _signal_all(pgids, still, signal.SIGKILL)
        still = _wait_gone(still, term_grace_s)
        if still:
            log.error("pids=%s survived SIGKILL", [p.pid for p in still])
    return len(alive)
