"""Faults injected into a real graph-store training run: the run ends fast, names the culprit,
and leaves no process behind.

Each test starts ``python -m pipeline launch --stage train`` with the default trainer
(``components.train``) on the tiny generated graph: 2 storage processes and 1 compute machine with
2 compute processes on loopback, as in tests/integration/test_graph_store.py. Once training steps
are logged, one fault is injected:

  compute-kill    SIGKILL to compute process (worker) local rank 1
  storage-stop    SIGSTOP to storage 1's main process (its session process keeps running)
  storage-kill    SIGKILL to storage 1's main process only: its server session process, the
                  session's forkserver and GLT sampling workers stay alive, orphaned

Each must end every process within ``heartbeatTimeoutS`` (set with ``--set``) + :data:`MARGIN_S`,
exit 1 with the culprit named, and leave nothing behind: every pid seen in the launcher's process
tree during the run (sampled every :data:`SAMPLE_S`, grandchildren included) is checked, and
``/proc`` is scanned for any process whose environment carries the run's marker variable (the
launcher passes its environment on, so every descendant inherits it, also one that re-parented
away). Each test prints a row ``FAULT <fault> -> <s> s to failure -> <n> orphans left`` past
pytest's capture (so ``make test`` shows the table).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph
from pipeline.proctree import TERM_GRACE_S

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]

HEARTBEAT_TIMEOUT_S = 6.0
FAILURE_GRACE_S = 3.0
MARGIN_S = FAILURE_GRACE_S + TERM_GRACE_S + 8.0
"""After ``heartbeatTimeoutS``: the launcher's grace for the other processes, SIGTERM's grace,
and 8 s for detection polls and interpreters unwinding on 2 busy cores."""
SAMPLE_S = 0.2
MARKER_VAR = "GRAPHSTORE_FAULT_TEST_MARKER"
RUNTIME = {"heartbeatIntervalS": 1, "heartbeatTimeoutS": HEARTBEAT_TIMEOUT_S,
           "readinessTimeoutS": 120, "clusterInitTimeoutS": 120, "rpcTimeoutS": 60,
           "shutdownTimeoutS": 20}
TRAINER_ARGS = {"num_neighbors": [4, 3], "batch_size": 16, "num_random_negatives": 16,
                "max_steps": 100_000, "val_every_steps": 100_000, "log_every_steps": 1,
                "hidden_dim": 16, "out_dim": 16}
RESOURCES = {stage: {"local_graph_store_config": {
    "num_storage_processes": 2, "num_compute_machines": 1, "compute_cluster_local_world_size": 2}}
    for stage in ("trainer_resource_config", "inferencer_resource_config")}


def _prepare(tmp: Path, hard_negatives: bool = False) -> tuple[Path, Path, Path]:
    """The tiny graph partitioned in 2; ``hard_negatives``: with user -dislikes-> item as hard
    negatives drawn by the training loader, the one loader GLT's sampling workers serve."""
    from tests.integration.test_hard_negatives import hard_negative_task

    data = tmp / "data"
    extra = {"num_dislikes_per_user": 4} if hard_negatives else {}
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=3, **extra), str(data))
    if hard_negatives:
        task = hard_negative_task(data, {**TRAINER_ARGS, "hard_negatives_per_anchor": 2})
        task.pop("graphStoreRuntimeConfig")
    else:
        task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
        task["datasetConfig"]["dataRootUri"] = str(data)
        task["trainerConfig"]["trainerArgs"] = TRAINER_ARGS
    tp, rp, run = tmp / "task.yaml", tmp / "resources.yaml", tmp / "run"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text(yaml.safe_dump(RESOURCES))
    cfg, _ = load_config_pair(str(tp), str(rp))
    partition_graph(cfg, num_partitions=2, output_uri=str(run / "shards"))
    return tp, rp, run


class Run:
    """The launcher as a subprocess, plus a thread recording its whole process tree."""

    def __init__(self, tmp: Path, capsys: pytest.CaptureFixture[str],
                 runtime: dict | None = None, hard_negatives: bool = False) -> None:
        """Prepare the data and start the launcher; ``capsys`` lets the report past capture;
        ``runtime``: graphStoreRuntimeConfig (default :data:`RUNTIME`); ``hard_negatives``: see
        :func:`_prepare`."""
        self.capsys = capsys
        tp, rp, self.run_dir = _prepare(tmp, hard_negatives)
        self.marker = f"fault-{uuid.uuid4().hex}"
        self.out_path = tmp / "launch.out"
        sets = [arg for key, value in (runtime or RUNTIME).items()
                for arg in ("--set", f"graphStoreRuntimeConfig.{key}={value}")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp),
             "--resource-config", str(rp), "--stage", "train", "--run-dir", str(self.run_dir),
             "--timeout-s", "200", "--failure-grace-s", str(FAILURE_GRACE_S), *sets],
            cwd=REPO, env={**os.environ, MARKER_VAR: self.marker},
            stdout=self.out_path.open("w"), stderr=subprocess.STDOUT)
        self.launcher = psutil.Process(self.proc.pid)
        self.seen: dict[int, tuple[float, str]] = {}  # pid -> (create time, command line)
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                tree = self.launcher.children(recursive=True)
            except psutil.Error:
                return
            for p in tree:
                if p.pid not in self.seen:
                    try:
                        self.seen[p.pid] = (p.create_time(), " ".join(p.cmdline())[:160])
                    except psutil.Error:
                        continue
            self._stop.wait(SAMPLE_S)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_for_training_steps(self, steps: int = 3, timeout_s: float = 150) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.output().count(" step=") >= steps:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"the launcher exited early:\n{self.output()[-4000:]}")
            time.sleep(0.2)
        raise AssertionError(f"no {steps} training steps in {timeout_s} s:\n{self.output()[-4000:]}")

    def machine(self, rank: int) -> psutil.Process:
        """The launcher's child with global rank ``rank`` (compute first: docs/runtime.md)."""
        return next(c for c in self.launcher.children() if c.environ().get("RANK") == str(rank))

    def finish(self, timeout_s: float) -> tuple[int | None, float]:
        """Wait for the launcher; returns (exit code or None if it hung, seconds waited)."""
        t0 = time.monotonic()
        try:
            code: int | None = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        waited = time.monotonic() - t0
        self._stop.set()
        self._sampler.join(timeout=5)
        return code, waited

    def leftovers(self) -> list[str]:
        """Live processes of this run: any pid seen in its tree (same create time, not a
        zombie), or any process whose environment or command line carries the marker / run dir."""
        alive = []
        for pid, (created, cmd) in self.seen.items():
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - created) < 0.05 and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"pid {pid} ({p.status()}): {cmd}")
            except psutil.NoSuchProcess:
                continue
        for p in psutil.process_iter(["cmdline", "status"]):
            if p.pid in self.seen or p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            try:
                env = Path(f"/proc/{p.pid}/environ").read_bytes()
            except OSError:
                env = b""
            if (self.marker.encode() in env
                    or any(str(self.run_dir) in arg for arg in p.info["cmdline"] or ())):
                alive.append(f"pid {p.pid} ({p.info['status']}) by marker: "
                             f"{' '.join(p.info['cmdline'] or ())[:160]}")
        return alive

    def cleanup(self) -> None:
        """Kill whatever a failed test left, so the next test starts on a clean machine."""
        self._stop.set()
        for pid, (created, _) in self.seen.items():
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - created) < 0.05:
                    p.kill()
            except psutil.Error:
                continue
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def run(tmp_path, capsys):
    r = Run(tmp_path, capsys)
    yield r
    r.cleanup()


def _check_ended(run: Run, fault: str, injected_at: float) -> str:
    """The launcher exited 1 in time and nothing is left; returns its output."""
    code, _ = run.finish(timeout_s=HEARTBEAT_TIMEOUT_S + MARGIN_S + 60)
    seconds = time.monotonic() - injected_at
    leftovers = run.leftovers()
    with run.capsys.disabled():
        print(f"\nFAULT {fault:<14} -> {seconds:5.1f} s to failure -> {len(leftovers)} orphans "
              f"left (limit {HEARTBEAT_TIMEOUT_S + MARGIN_S:.0f} s)", flush=True)
    out = run.output()
    assert code is not None, f"{fault}: the launcher hung:\n{out[-4000:]}"
    assert code == 1, f"{fault}: exit code {code}:\n{out[-4000:]}"
    assert seconds < HEARTBEAT_TIMEOUT_S + MARGIN_S, (
        f"{fault}: {seconds:.1f} s to failure (limit {HEARTBEAT_TIMEOUT_S + MARGIN_S:.0f} s):\n"
        f"{out[-4000:]}")
    assert not leftovers, f"{fault}: processes left behind:\n" + "\n".join(leftovers)
    assert len(run.seen) >= 9, run.seen  # the tree was really recorded (mains, workers, sessions)
    message = out.rsplit("\nlaunch: ", 1)[-1]
    assert "Traceback" not in message and '  File "' not in message, message
    return out


@pytest.mark.timeout(240)
def test_killed_compute_process_ends_the_run_and_is_named(run: Run) -> None:
    run.wait_for_training_steps()
    compute = run.machine(0)
    # the workers are forked from the machine's worker server (graphstore.runtime.workers)
    (server,) = [c for c in compute.children() if "forkserver" in " ".join(c.cmdline())]
    workers = sorted(server.children(), key=lambda c: (c.create_time(), c.pid))
    assert len(workers) == 2, [c.cmdline() for c in workers]
    victim = workers[1]  # torch.multiprocessing starts local rank 0, then 1
    victim.kill()
    out = _check_ended(run, "compute-kill", time.monotonic())
    assert "launch: compute 0/1 (rank 0) failed first with exit code 1" in out, out[-4000:]
    assert (f"error: compute process rank 1 (local rank 1, pid {victim.pid}) was killed by "
            "signal SIGKILL" in out), out[-4000:]


@pytest.mark.timeout(240)
def test_stopped_storage_process_ends_the_run_and_is_named(run: Run) -> None:
    run.wait_for_training_steps()
    victim = run.machine(2)  # storage 1
    assert "components.storage" in " ".join(victim.cmdline())
    victim.send_signal(signal.SIGSTOP)
    out = _check_ended(run, "storage-stop", time.monotonic())
    stopped = re.search(
        rf"\nlaunch: storage 1 \(rank 2, pid {victim.pid}\) was stopped \(SIGSTOP or another stop "
        r"signal\) for (\d+\.\d) s, graphStoreRuntimeConfig.heartbeatTimeoutS is 6 s; ended with "
        r"signal SIGTERM", out)
    assert stopped and float(stopped.group(1)) >= HEARTBEAT_TIMEOUT_S, out[-4000:]


@pytest.mark.timeout(240)
def test_killed_storage_main_process_leaves_no_orphaned_session(run: Run) -> None:
    run.wait_for_training_steps()
    victim = run.machine(2)  # storage 1
    orphans = victim.children(recursive=True)
    assert any("spawn_main" in " ".join(p.cmdline()) for p in orphans), orphans  # the session
    victim.kill()
    out = _check_ended(run, "storage-kill", time.monotonic())
    assert "launch: storage 1 (rank 2) failed first with signal SIGKILL (exit code -9)" in out, \
        out[-4000:]


FETCH_RUNTIME = {**RUNTIME, "heartbeatTimeoutS": 120, "rpcTimeoutS": 15}
"""A heartbeat slower than the RPC timeout: a batch fetch that gets no answer fails on its own."""


@pytest.mark.timeout(300)
def test_a_batch_fetch_without_answer_fails_the_run_naming_the_server(tmp_path, capsys) -> None:
    """A request the storage never answers fails at rpcTimeoutS naming the storage rank (the
    partitioned sampler's requests: graphstore.modes.graph_store.remote_dataset; GLT's receiving
    channel once logged a failed fetch and waited forever, a medium run hung so). Storage 1's
    server session process is stopped: fetches time out at rpcTimeoutS (15 s), long before the
    heartbeat (120 s) would notice."""
    run = Run(tmp_path, capsys, runtime=FETCH_RUNTIME)
    try:
        run.wait_for_training_steps()
        storage = run.machine(2)  # storage 1
        session = next(c for c in storage.children() if "spawn_main" in " ".join(c.cmdline()))
        session.send_signal(signal.SIGSTOP)
        injected = time.monotonic()
        code, _ = run.finish(timeout_s=FETCH_RUNTIME["heartbeatTimeoutS"] + 60)
        seconds = time.monotonic() - injected
        out = run.output()
        with capsys.disabled():
            print(f"\nFAULT {'fetch-timeout':<14} -> {seconds:5.1f} s to failure "
                  f"(rpcTimeoutS {FETCH_RUNTIME['rpcTimeoutS']:.0f} s, heartbeat "
                  f"{FETCH_RUNTIME['heartbeatTimeoutS']:.0f} s)", flush=True)
        assert code == 1, f"exit code {code}:\n{out[-4000:]}"
        # one fetch's timeout, then the loaders' shutdowns skip the failed server (each used to
        # wait rpcTimeoutS more and raise in __del__: 51 s in all)
        assert seconds < 2 * FETCH_RUNTIME["rpcTimeoutS"] + 10, f"{seconds:.1f} s:\n{out[-4000:]}"
        assert "Exception ignored in" not in out, out[-4000:]
        # the stop lands in a batch fetch, or in the next epoch's start (a synchronous request)
        assert re.search(r"graph-store loader: \w+Request to storage rank 1 failed: RuntimeError: "
                         r"RPCErr", out), out[-4000:]
        assert not run.leftovers(), run.leftovers()
    finally:
        run.cleanup()


@pytest.mark.timeout(240)
def test_a_killed_sampling_worker_fails_the_fetch_naming_it(tmp_path, capsys) -> None:
    """(GLT's sampling workers serve the loaders that draw hard negatives, so the run draws
    them.) A sampling worker that dies never counts its epoch as done: GLT's fetch waited for it
    until the client's rpcTimeoutS (60 s here) with no word on the server. The storage session
    now fails the fetch naming the worker (graphstore.dataset.glt_adapter._fetch_one_sampled_message).

    Which storage reports first is a race: the victim's own session (its worker killed, -9), or
    the other storage's, whose sampling worker was fetching features from the victim over RPC and
    ends itself on the broken connection (code 1; its log names ECONNRESET or EPIPE, whichever
    way TensorPipe met the dead peer: both seen). Either way the fetch fails fast naming a
    sampling worker that died."""
    run = Run(tmp_path, capsys, hard_negatives=True)
    try:
        _kill_a_sampling_worker(run)
    finally:
        run.cleanup()


def _kill_a_sampling_worker(run: Run) -> None:
    run.wait_for_training_steps()
    storage = run.machine(2)  # storage 1
    session = next(c for c in storage.children() if "spawn_main" in " ".join(c.cmdline()))
    (forkserver,) = [c for c in session.children() if "forkserver" in " ".join(c.cmdline())]
    victim = sorted(forkserver.children(), key=lambda c: (c.create_time(), c.pid))[0]
    victim.kill()
    injected = time.monotonic()
    code, _ = run.finish(timeout_s=RUNTIME["rpcTimeoutS"] + 60)
    seconds = time.monotonic() - injected
    out = run.output()
    with run.capsys.disabled():
        print(f"\nFAULT {'sampler-kill':<14} -> {seconds:5.1f} s to failure (rpcTimeoutS "
              f"{RUNTIME['rpcTimeoutS']:.0f} s)", flush=True)
    assert code == 1, f"exit code {code}:\n{out[-4000:]}"
    assert seconds < RUNTIME["rpcTimeoutS"] / 2, f"{seconds:.1f} s:\n{out[-4000:]}"
    named = re.search(r"storage rank (\d) \(producer \d+\) failed: .*sampling worker \d+ \(pid "
                      r"(\d+)\) exited with code (-?\d+)", out)
    assert named, out[-4000:]
    rank, pid, exit_code = int(named[1]), int(named[2]), int(named[3])
    if rank == 1:  # the victim's session saw its own worker die
        assert (pid, exit_code) == (victim.pid, -9), out[-4000:]
    else:  # the peer whose RPC the kill reset
        assert exit_code == 1 and pid != victim.pid, out[-4000:]
        peer_log = (run.run_dir / "logs" / "train" / f"storage_{rank}.log").read_text()
        assert re.search(r"ECONNRESET|EPIPE", peer_log), peer_log[-4000:]
    assert not run.leftovers(), run.leftovers()
