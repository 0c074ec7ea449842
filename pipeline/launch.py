"""The local launcher: one graph-store stage as processes on 127.0.0.1, with Vertex AI's variables.

``launch_stage`` runs the commands the task config names (``trainerConfig.command`` /
``inferencerConfig.command`` on each of C compute machines, the stage's
``graphStoreStorageConfig.command`` on each of S storage machines), one process per machine, each in
its own session, with ``CLUSTER_SPEC`` / ``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` /
``MASTER_PORT`` laid out by :mod:`pipeline.topology` (docs/runtime.md has the whole contract).

Order: storage processes are started first (storage 0..S-1), then compute (0..C-1). The run ends
when every process has exited 0, or at the first failure (the others get ``failure_grace_s`` to
exit by themselves, then every process tree is killed), or when ``timeout_s`` has passed, or on
SIGINT/SIGTERM. A failure is a non-zero exit, or a process of a machine's tree found stopped
(SIGSTOP, state T) for ``graphStoreRuntimeConfig.heartbeatTimeoutS``: its peers' heartbeats would
call it dead by then, but a stopped process that serves nobody (a storage machine's main process)
would otherwise hold the run until ``timeout_s``. Whatever the ending, every process of the run
(sessions, their descendants, also those that left the session or re-parented away: see
pipeline.proctree) is ended before ``launch_stage`` returns: SIGTERM and SIGCONT, then SIGKILL
after :data:`TERM_GRACE_S`.

Logs: ``<run_dir>/logs/<stage>/<role>_<i>.log``. The run folder may be ``gs://`` (every process
gets that URI and the launcher's environment, ``STORAGE_EMULATOR_HOST`` included): logs are then
written to a local temporary folder and copied to ``<run_dir>/logs/<stage>/`` at the end.

No torch import here: this module is part of ``pipeline/``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Mapping, Sequence

import psutil
import yaml

from graphstore.io import uris
from graphstore.config import ResourceConfig, TaskConfig
from graphstore.runtime.errors import GraphstoreError, RuntimeFailure, UsageError
from graphstore.runtime.ports import free_ports
from graphstore.formats.run_paths import RunPaths
from graphstore.config.stage import stage_resources
from pipeline import topology
from pipeline.proctree import TERM_GRACE_S, ProcessSpec, Running, Stall, children_by_parent, end_all

log = logging.getLogger("pipeline.launch")

Stage = Literal["train", "infer"]
"""Seconds between SIGTERM and SIGKILL when ending a run's processes."""
TAIL_LINES = 20
_POLL_S = 0.1
_TRACK_EVERY_S = 0.5
_PYTHON_NAMES = ("python", "python3")


class LaunchFailed(RuntimeFailure):
    """A process failed or the run timed out; ``result`` has every exit code. Exit 1, or 2 when
    the process that failed first exited 2 (a mistake the user must fix, already named in its
    log line), so ``pipeline launch`` keeps the exit-code contract of the command it ran."""

    result: LaunchResult


class LaunchInterrupted(GraphstoreError):
    """SIGINT/SIGTERM reached the launcher; every process was ended (exit 130)."""

    exit_code = 130
    result: LaunchResult


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessOutcome:
    """How one process ended: a negative ``exit_code`` is the signal that ended it (None: it could
    not be ended)."""

    spec: ProcessSpec
    pid: int
    exit_code: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchResult:
    """One launch: every process's outcome (in start order), the seconds it took, the run dir."""

    stage: Stage
    run_dir: Path
    job_name: str
    processes: tuple[ProcessOutcome, ...]
    seconds: float

    @property
    def exit_codes(self) -> dict[str, int | None]:
        """label -> exit code, in start order."""
        return {p.spec.label: p.exit_code for p in self.processes}


def loopback_interface() -> str:
    """The name of the interface holding 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS)."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addresses):
            return name
    return "lo"


def local_env(base_env: Mapping[str, str], loopback: str) -> dict[str, str]:
    """Variables every local process gets besides the cluster ones (docs/runtime.md)."""
    env = {"GLOO_SOCKET_IFNAME": loopback, "TP_SOCKET_IFNAME": loopback}
    # GLT's own sampling subprocesses never run our logging set-up; torch 2.3 warns there for
    # every gloo group (graphstore.runtime.cli.setup_logging silences it in our processes)
    quiet = "ignore:You are using a Backend:UserWarning"
    for name, value in (("OMP_NUM_THREADS", "1"), ("PYTHONUNBUFFERED", "1"),
                        ("PYTHONWARNINGS", quiet)):
        if name not in base_env:
            env[name] = value
    return env


def plan_stage(task: TaskConfig, resources: ResourceConfig, *, stage: Stage, run_dir: Path,
               contract: Sequence[str], ports: Sequence[int], job_name: str,
               extra_env: Mapping[str, str]) -> list[ProcessSpec]:
    """Every process of the stage in start order: storage 0..S-1, then compute 0..C-1.

    ``contract``: the arguments appended to every command (:func:`topology.contract_args`).
    ``ports``: C + S + 1 free ports: one per machine's CLUSTER_SPEC address (rank order), then
    MASTER_PORT.
    """
    stage_res = stage_resources(resources, stage)
    res_attr = "trainer" if stage == "train" else "inferencer"  # for the message only
    if stage_res.kind != "local":
        raise UsageError(f"{resources.source_path or 'resource config'}: the {res_attr} stage is "
                         f"{stage_res.kind!r}; use `python -m pipeline submit` for Vertex AI "
                         "(launch runs local_graph_store_config only)")
    layout = topology.pool_layout(stage_res.num_compute_machines, stage_res.num_storage)
    all_machines = topology.machines(layout)
    if len(ports) != len(all_machines) + 1:
        raise ValueError(f"need {len(all_machines) + 1} ports, got {len(ports)}")
    hosts: dict[str, list[str]] = {pool.name: [] for pool in layout}
    for machine, port in zip(all_machines, ports):
        hosts[machine.pool].append(f"127.0.0.1:{port}")
    commands = topology.role_commands(task, stage)
    specs = []
    for machine in sorted(all_machines, key=lambda m: (m.role != "storage", m.rank)):
        key, command = commands[machine.role]
        argv = topology.split_command(command, key)
        if argv[0] in _PYTHON_NAMES:
            argv[0] = sys.executable
        label = (f"compute {machine.role_index}/{stage_res.num_compute_machines}"
                 if machine.role == "compute" else f"storage {machine.role_index}")
        env = topology.cluster_environ(layout, hosts, machine.pool, machine.pool_index, job_name,
                                       ports[-1])
        specs.append(ProcessSpec(
            role=machine.role, role_index=machine.role_index, rank=machine.rank, label=label,
            config_key=key, argv=(*argv, *contract), env={**env, **extra_env},
            log_path=Path(RunPaths(str(run_dir)).logs(stage)) / f"{machine.role}_{machine.role_index}.log"))
    return specs


def freeze_configs(task: TaskConfig, resources: ResourceConfig, folder: Path) -> tuple[Path, Path]:
    """Write the resolved configs as ``folder/task.yaml`` and ``folder/resource.yaml``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "task.yaml", folder / "resource.yaml"
    for path, config in zip(paths, (task, resources)):
        path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    return paths


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _code_text(code: int | None) -> str:
    """``exit code 1``, or ``signal SIGKILL (exit code -9)``."""
    names = {-sig.value: sig.name for sig in signal.Signals}
    return f"signal {names[code]} (exit code {code})" if code in names else f"exit code {code}"


def _tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a log (reads at most its last 64 KiB)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            text = f.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return [f"(cannot read the log: {exc})"]
    return text.splitlines()[-lines:]


_OUR_WARNING = re.compile(r"^\d\d:\d\d:\d\d \S+ (WARNING|ERROR|CRITICAL) graphstore\.")
"""A warning or error our own loggers wrote (graphstore.runtime.cli's format: time, role, level, name)."""


def _exceptions_in(path: Path, limit: int = 3) -> list[str]:
    """The last ``limit`` distinct exception lines (the line that ends a Python traceback) or
    warnings of graphstore's loggers in the last 1 MiB of a log: what a process that did not
    fail first, or a child of it, raised or saw (a storage session's stalled fetch, say)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - (1 << 20)))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found: list[str] = []
    in_traceback = False
    for line in lines:
        if line.startswith("Traceback (most recent call last):"):
            in_traceback = True
            continue
        ours = _OUR_WARNING.match(line) is not None
        if ours or (in_traceback and line.strip() and not line[0].isspace()):
            in_traceback = False
            line = line[:400]
            if line in found:
                found.remove(line)
            found.append(line)
    return found[-limit:]


def _who(r: Running) -> str:
    return f"{r.spec.label} (rank {r.spec.rank})"


def _failure_text(r: Running, code: str) -> str:
    """How the first failed process failed: its exit, or the stall that made it a failure."""
    stall = r.stall
    if stall is None:
        return f"{_who(r)} failed first with {code}"
    which = (f"{r.spec.label} (rank {r.spec.rank}, pid {stall.pid})" if stall.pid == r.popen.pid
             else f"{_who(r)}: its process pid {stall.pid} ({stall.command[:120]})")
    return (f"{which} was stopped (SIGSTOP or another stop signal) for {stall.seconds:.1f} s, "
            f"graphStoreRuntimeConfig.heartbeatTimeoutS is {stall.limit_s:g} s; ended with {code}")


def _install_signal_handlers(stop: threading.Event, received: list[str]) -> Callable[[], None]:
    """SIGINT/SIGTERM set ``stop`` (main thread only); returns a function restoring the old ones."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return restore


Ending = Literal["ok", "failed", "timeout", "interrupted"]


def _check_stalls(running: Sequence[Running], now: float, stall_s: float) -> None:
    """Mark each running machine whose tree holds a process stopped for ``stall_s`` or more."""
    for r in running:
        if r.returncode is not None or r.stall is not None:
            continue
        found = r.stopped_for(now)
        if found is None or found[1] < stall_s:
            continue
        proc, seconds = found
        try:
            command = " ".join(proc.cmdline())
        except psutil.Error:  # gone meanwhile; the pid still names it
            command = "?"
        r.stall = Stall(pid=proc.pid, command=command, seconds=seconds, limit_s=stall_s,
                        noticed_at=now)
        log.error("process=%r rank=%d pid=%d stopped for %.0f s (heartbeatTimeoutS %.0f s)",
                  r.spec.label, r.spec.rank, proc.pid, seconds, stall_s)


def _supervise(running: Sequence[Running], *, deadline: float, failure_grace_s: float,
               stall_s: float, stop: threading.Event, changed: threading.Event
               ) -> tuple[Ending, Running | None]:
    """Wait for the run to end; returns how it ended and the first failed process, if any.

    The first failure is the process whose non-zero exit (or stall: stopped for ``stall_s``) was
    observed first; after it the others get ``failure_grace_s`` to exit by themselves (compute
    fails fast on a dead storage server).
    """
    grace_end: float | None = None
    next_track = 0.0
    while True:
        now = time.monotonic()
        failed = sorted((r for r in running if r.failed_at is not None),
                        key=lambda r: r.failed_at or 0.0)
        first = failed[0] if failed else None
        if stop.is_set():
            return "interrupted", first
        if first is not None and grace_end is None:
            grace_end = now + failure_grace_s
            log.error("process=%r rank=%d %s failed first; others get %.0f s to exit",
                      first.spec.label, first.spec.rank,
                      "stopped" if first.stall else f"exit_code={first.returncode}",
                      failure_grace_s)
        if all(r.returncode is not None for r in running):
            return ("failed" if first else "ok"), first
        if grace_end is not None and now >= grace_end:
            return "failed", first
        if now >= deadline:
            return ("failed" if first else "timeout"), first
        if now >= next_track:
            children = children_by_parent()
            for r in running:
                r.track_descendants(children)
            _check_stalls(running, now, stall_s)
            next_track = now + _TRACK_EVERY_S
        changed.wait(_POLL_S)
        changed.clear()


def _locked(echo: Callable[[str], None] | None) -> Callable[[str], None]:
    lock, out = threading.Lock(), echo or (lambda line: print(line, flush=True))

    def write(line: str) -> None:
        with lock:
            out(line)
    return write


def _start_all(specs: Sequence[ProcessSpec], running: list[Running], echo: Callable[[str], None],
               changed: threading.Event, stop: threading.Event, launch_id: str) -> None:
    base_env = dict(os.environ)
    for spec in specs:
        if stop.is_set():
            return
        try:
            running.append(Running(spec, base_env, echo, changed, launch_id))
        except OSError as exc:
            raise UsageError(f"{spec.config_key}: cannot start {spec.argv[0]!r} for {spec.label}: "
                             f"{exc.strerror or exc}") from None
        log.info("started process=%r rank=%d pid=%d log=%s", spec.label, spec.rank,
                 running[-1].popen.pid, _shown(spec.log_path))


def _plan(task: TaskConfig, resources: ResourceConfig, stage: Stage,
          run_dir: str | os.PathLike[str], task_config_path: str | os.PathLike[str],
          resource_config_path: str | os.PathLike[str], overrides: Sequence[str]
          ) -> tuple[str, Path, list[ProcessSpec]]:
    """The run folder's URI, the local folder the processes' logs (and frozen configs) go to,
    and every process of the stage. A gs:// run folder: the processes read and write it; logs
    and frozen configs go to a local temporary folder, copied to ``<run_dir>/logs/<stage>/``
    when the stage ends."""
    gcs_run = uris.is_gcs(str(run_dir))
    run_uri = str(run_dir) if gcs_run else str(Path(run_dir).resolve())
    run_path = Path(tempfile.mkdtemp(prefix=f"launch-{uris.basename(run_uri)}-")) if gcs_run \
        else Path(run_uri)
    stage_res = stage_resources(resources, stage)
    task_path, res_path = (str(p) if uris.is_gcs(str(p)) else str(Path(p).resolve())
                           for p in (task_config_path, resource_config_path))
    if overrides:
        task_path, res_path = map(str, freeze_configs(task, resources, run_path / "launch" / stage))
    contract = topology.contract_args(task_config_path=task_path, stage=stage,
                                      resource_config_path=res_path, run_dir=run_uri)
    specs = plan_stage(
        task, resources, stage=stage, run_dir=run_path, contract=contract,
        ports=free_ports(stage_res.num_compute_machines + stage_res.num_storage + 1),
        job_name=f"{uris.basename(run_uri)}-{stage}",
        extra_env=local_env(os.environ, loopback_interface()))
    return run_uri, run_path, specs


def launch_stage(task: TaskConfig, resources: ResourceConfig, *, stage: Stage,
                 run_dir: str | os.PathLike[str], task_config_path: str | os.PathLike[str],
                 resource_config_path: str | os.PathLike[str], timeout_s: float = 3600.0,
                 failure_grace_s: float = 30.0, overrides: Sequence[str] = (),
                 echo: Callable[[str], None] | None = None) -> LaunchResult:
    """Run one stage locally (see the module docstring); returns when every process exited 0.

    ``overrides``: the ``--set`` values ``task`` / ``resources`` were loaded with; when given, the
    resolved configs are frozen into ``<run_dir>/launch/<stage>/{task,resource}.yaml`` and the
    commands get those paths instead of ``task_config_path`` / ``resource_config_path``.
    ``echo`` receives each prefixed output line (default: print to stdout).

    Raises:
        UsageError: the stage is not local, or a command cannot be split or started (exit 2).
        LaunchFailed: a process exited non-zero, or ``timeout_s`` passed (exit 1).
        LaunchInterrupted: SIGINT/SIGTERM (exit 130).
    """
    if stage not in topology.STAGE_CONFIG_KEYS:
        raise UsageError(f"--stage must be train or infer, got {stage!r}")
    if timeout_s <= 0 or failure_grace_s < 0:
        raise UsageError(f"timeout_s must be > 0 and failure_grace_s >= 0, got {timeout_s}, "
                         f"{failure_grace_s}")
    gcs_run = uris.is_gcs(str(run_dir))
    run_uri, run_path, specs = _plan(task, resources, stage, run_dir, task_config_path,
                                     resource_config_path, overrides)
    log_dir = Path(RunPaths(str(run_path)).logs(stage))
    log_dir.mkdir(parents=True, exist_ok=True)
    for stale in log_dir.glob("*.log"):
        stale.unlink()
    stop, changed, received = threading.Event(), threading.Event(), []
    restore = _install_signal_handlers(stop, received)
    running: list[Running] = []
    launch_id = f"{uris.basename(run_uri)}-{stage}-{uuid.uuid4().hex}"
    start = time.monotonic()
    try:
        _start_all(specs, running, _locked(echo), changed, stop, launch_id)
        ending, first = _supervise(running, deadline=start + timeout_s,
                                   failure_grace_s=failure_grace_s,
                                   stall_s=task.runtime.heartbeat_timeout_s, stop=stop,
                                   changed=changed)
        pending = [r for r in running if r.returncode is None]
    finally:
        leftover = end_all(running, launch_id)
        for r in running:
            r.watcher.join(timeout=TERM_GRACE_S)
            r.pump.join(timeout=TERM_GRACE_S)
        restore()
        if gcs_run:
            try:
                uris.upload_tree(str(log_dir), RunPaths(run_uri).logs(stage))
            except GraphstoreError as exc:  # the stage's own outcome matters more
                log.warning("logs stay in %s: %s", log_dir, exc)
    return _finish(stage, run_path, specs, running, time.monotonic() - start,
                   ending=ending, first=first, pending=pending, leftover=leftover,
                   timeout_s=timeout_s, signal_name=received[0] if received else "a signal")


def _finish(stage: Stage, run_dir: Path, specs: Sequence[ProcessSpec], running: Sequence[Running],
            seconds: float, *, ending: Ending, first: Running | None, pending: list[Running],
            leftover: int, timeout_s: float, signal_name: str) -> LaunchResult:
    """Build the result; raise the error that ``ending`` calls for."""
    result = LaunchResult(stage=stage, run_dir=run_dir, job_name=f"{run_dir.name}-{stage}",
                          seconds=seconds, processes=tuple(
        ProcessOutcome(spec=r.spec, pid=r.popen.pid, exit_code=r.popen.returncode)
        for r in running))
    logs = _shown(Path(RunPaths(str(run_dir)).logs(stage)))
    error: LaunchFailed | LaunchInterrupted | None = None
    if ending == "interrupted":
        error = LaunchInterrupted(f"interrupted by {signal_name}; ended {len(pending)} running "
                                  f"processes of {len(specs)}; logs in {logs}")
    elif ending == "timeout":
        error = LaunchFailed(f"timed out after {timeout_s:g} s (--timeout-s); still running: "
                             f"{', '.join(_who(r) for r in pending)}; every process was ended; "
                             f"logs in {logs}")
    elif first is not None:
        tail = _tail(first.spec.log_path)
        code = _code_text(first.popen.returncode)
        elsewhere = [f"  {_shown(r.spec.log_path)}: {line}" for r in running if r is not first
                     for line in _exceptions_in(r.spec.log_path)]
        error = LaunchFailed(f"{_failure_text(first, code)}; last {len(tail)} lines of "
                             f"{_shown(first.spec.log_path)}:\n" + "\n".join(tail)
                             + ("\nexceptions and warnings in the other logs (a cause may be among them):\n"
                                + "\n".join(elsewhere) if elsewhere else ""))
    if isinstance(error, LaunchFailed) and first is not None and first.stall is None \
            and first.popen.returncode == UsageError.exit_code:
        error.exit_code = UsageError.exit_code
    if error is not None:
        error.result = result
        raise error
    if leftover:
        log.warning("ended %d processes left behind by the run's commands", leftover)
    return result
