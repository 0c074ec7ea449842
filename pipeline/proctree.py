"""The processes of one local launch: start, pump output, watch, and end whole process trees.

A started process (:class:`Running`) leads its own session; its merged stdout/stderr goes to its
log file and, prefixed with its label, to an echo callback. :func:`end_all` ends every process of
a run, including descendants that left the session (tracked while they lived): SIGTERM, then
SIGKILL after a grace. Used by pipeline.launch; no config knowledge here.
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


def _drop(_line: str) -> None:
    """An echo that discards."""


class Running:
    """One started process: its output pump, its exit watcher, and the descendants seen so far."""

    def __init__(self, spec: ProcessSpec, base_env: Mapping[str, str],
                 echo: Callable[[str], None], changed: threading.Event) -> None:
        """Start the process (its own session) and the threads that pump and watch it."""
        self.spec = spec
        self.exit_time: float | None = None
        self.popen = subprocess.Popen(
            spec.argv, env={**base_env, **spec.env}, stdin=subprocess.DEVNULL,
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

    def track_descendants(self) -> None:
        """Remember descendants now, so that those that leave the session can still be ended."""
        for proc in list(self.tracked.values()):
            try:
                for child in proc.children(recursive=True):
                    self.tracked.setdefault(child.pid, child)
            except psutil.Error:
                continue


def _group_members(pgids: set[int]) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) in pgids:
                members.append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def _signal_all(pgids: set[int], procs: Sequence[psutil.Process], sig: int) -> None:
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)  # psutil checks the pid still names the same process


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (an orphan's zombie may never be reaped in a container)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(procs: Sequence[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for ``procs`` to end; returns those still alive."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in procs if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive


def end_all(running: Sequence[Running], term_grace_s: float = TERM_GRACE_S) -> int:
    """End every process of the run: SIGTERM to each session and every tracked descendant, then
    SIGKILL to what is left after ``term_grace_s``. Returns how many processes were still alive."""
    for r in running:
        r.track_descendants()
    pgids = {r.pgid for r in running}
    targets = {p.pid: p for r in running for p in r.tracked.values()}
    targets.update({p.pid: p for p in _group_members(pgids)})
    alive = [p for p in targets.values() if _alive(p)]
    if not alive:
        return 0
    _signal_all(pgids, alive, signal.SIGTERM)
    still = _wait_gone(alive, term_grace_s)
    if still:
        log.warning("pids=%s ignored SIGTERM for %.0f s; sending SIGKILL",
                    [p.pid for p in still], term_grace_s)
        _signal_all(pgids, still, signal.SIGKILL)
        still = _wait_gone(still, term_grace_s)
        if still:
            log.error("pids=%s survived SIGKILL", [p.pid for p in still])
    return len(alive)
