"""The Ray cluster of one replicated-mode stage, formed from the cluster environment.

A replicated stage is one job of C compute machines and no storage machines (graphstore.runtime.env:
``workerpool0`` the leader, ``workerpool1`` the others; locally, ``pipeline launch`` starts C
processes on 127.0.0.1 with the same variables). Each machine's process joins one Ray cluster:

- C = 1: the leader starts an embedded Ray (``ray.init``): nothing to set up, no fixed port;
- C > 1: the machines meet in a c10d ``TCPStore`` hosted by the leader at ``MASTER_ADDR:
  MASTER_PORT`` (bound to loopback in local mode, graphstore.runtime.rendezvous). The leader starts the
  head node (``ray start --head --block`` on a free port) and publishes its address and the
  job's token; every other machine starts a node that joins it (``ray start --address``) and says
  so; the leader waits (``clusterInitTimeoutS``) until Ray sees C alive nodes, then connects
  (``ray.init(address=...)``).

Every node advertises ``graphstore_worker: L`` (L compute processes per machine) and workers ask
for one each, so each machine runs exactly L of them. Nodes join with the job's own token (Ray's
token authentication; a fresh random token per job, passed in the environment, never written to
a file): Ray's services listen on every interface, and the token is what keeps others out.

Runs: the leader drives every run (one ``TorchTrainer.fit`` per stage session,
graphstore.modes.replicated.workers) and publishes each run's outcome (``run/<n>``: ``ok`` / the
error); the other machines wait for it, so every machine's process ends with its stage. Close:
the leader says ``done``; each other machine stops its node and answers ``left/<k>``; the leader
waits for those (bounded), shuts its driver down and stops the head. A node is a ``ray start
--block`` child in its own session: it and every process under it are ended by pid (SIGTERM,
then SIGKILL after a grace), never by name.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from graphstore.modes.cluster_info import ComputeProcess
from graphstore.runtime import devices
from graphstore.runtime.devices import DevicePlan
from graphstore.runtime.env import ray_node_environ, use_ray_token
from graphstore.runtime.errors import RuntimeFailure, UsageError

log = logging.getLogger(__name__)
WORKER_RESOURCE = "graphstore_worker"
"""Custom Ray resource: compute processes a node runs (L per machine)."""
STOP_GRACE_S = 10.0
_POLL_S = 0.5


@dataclass(frozen=True, kw_only=True)
class ReplicatedInfo:
    """What a replicated-mode compute worker knows (the loops' ``cluster_info``): the counts,
    the runtime settings and this worker's place. Global rank of local rank ``l`` on machine
    ``m``: ``m * L + l``, Ray Train's world rank (workers are placed L per machine)."""

    num_compute_nodes: int
    num_processes_per_compute: int
    runtime: Any  # graphstore.config.RuntimeConfig
    is_local: bool
    machine_index: int = 0
    session_index: int = 0
    num_server_sessions: int = 1
    gpus_per_compute_machine: int = 0

    num_storage_nodes: ClassVar[int] = 0

    @property
    def num_compute_processes(self) -> int:
        return self.num_compute_nodes * self.num_processes_per_compute

    def compute_rank(self, local_rank: int) -> int:
        return self.machine_index * self.num_processes_per_compute + local_rank

    def for_session(self, session_index: int) -> ReplicatedInfo:
        if not 0 <= session_index < self.num_server_sessions:
            raise UsageError(f"ReplicatedInfo: session {session_index} does not exist "
                             f"({self.num_server_sessions})")
        return replace(self, session_index=session_index)

    def for_rank(self, world_rank: int) -> tuple[int, ReplicatedInfo]:
        """``(local_rank, info)`` of the worker with Ray Train's ``world_rank``."""
        if not 0 <= world_rank < self.num_compute_processes:
            raise RuntimeFailure(f"Ray Train world rank {world_rank} is not in "
                                 f"[0, {self.num_compute_processes})")
        machine, local = divmod(world_rank, self.num_processes_per_compute)
        return local, replace(self, machine_index=machine)

    def join(self, rank: int, world: int, plan: DevicePlan) -> ComputeProcess:
        """Replicated mode's join of a compute process: Ray Train's ``TorchTrainer`` already
        built the gloo compute group of every worker (graphstore.modes.replicated.workers); no
        storage, no RPC. Checks that group is ``rank`` of ``world``, then chooses the device."""
        import torch.distributed as dist

        if not dist.is_initialized() or (dist.get_rank(), dist.get_world_size()) != (rank, world):
            raise RuntimeFailure(
                f"replicated compute rank {rank}/{world}: the process group Ray Train built is "
                + (f"rank {dist.get_rank()}/{dist.get_world_size()}" if dist.is_initialized()
                   else "missing") + " (run the worker through graphstore.modes.replicated.workers)")
        device = devices.activate(devices.agree_across_ranks(plan, self.gpus_per_compute_machine),
                                  timeout_s=self.runtime.cluster_init_timeout_s)
        return ComputeProcess(self, rank, world, None, device)

    def leave(self, process: ComputeProcess) -> float:
        """Nothing to end: the groups are Ray Train's, whose torch backend destroys them once
        every worker's function has returned (why not here:
        graphstore.modes.graph_store.compute.shutdown_compute_process); no RPC, so 0 s."""
        del process
        return 0.0


class RayNode:
    """A ``ray start --block`` child of ours (its own session) and every process under it."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: str) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as out:
            self.popen = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        self._seen: dict[int, Any] = {}

    def track(self) -> None:
        """Remember the processes under the node now (they are ended by pid at :meth:`stop`)."""
        import psutil

        try:
            for p in psutil.Process(self.popen.pid).children(recursive=True):
                self._seen.setdefault(p.pid, p)
        except psutil.NoSuchProcess:
            pass

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return "\n".join(fh.read().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the node and every process seen under it, SIGKILL what is left after
        ``grace_s`` (each by pid; a pid reused meanwhile is not touched: psutil checks)."""
        import psutil

        self.track()
        procs = list(self._seen.values())
        try:
            procs.insert(0, psutil.Process(self.popen.pid))
        except psutil.NoSuchProcess:
            pass
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=grace_s)
        self.popen.poll()


def _node_argv(*, head: bool, ip: str, port: int | None, address: str | None, num_cpus: int,
               workers: int, object_store_bytes: int | None, temp_dir: str) -> list[str]:
    """``ray start --block`` of a head or joining node. ``temp_dir`` (the head's) keeps the
    session files, and the address file Ray writes, out of the shared ``/tmp/ray``."""
    from graphstore.runtime.ports import free_ports

    bind = "127.0.0.1" if ip.startswith("127.") else ""
    agent_port, = free_ports(1, bind)
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
            "--disable-usage-stats", f"--temp-dir={temp_dir}",
            f"--node-ip-address={ip}", f"--num-cpus={num_cpus}",
                         f"--resources={json.dumps({WORKER_RESOURCE: workers})}",
                         f"--dashboard-agent-listen-port={agent_port}"]
    if object_store_bytes:
        argv.append(f"--object-store-memory={object_store_bytes}")
    if head:
        client_port, = free_ports(1, bind)
        argv += ["--head", "--include-dashboard=false", f"--port={port}",
                 f"--ray-client-server-port={client_port}"]
    else:
        argv.append(f"--address={address}")
    return argv


def _resolve(host: str) -> str:
    import socket

    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise RuntimeFailure(f"cannot resolve compute host {host!r}: {exc}") from None


class RayCluster:
    """This machine's part of the stage's Ray cluster (module docs). Build it with
    :meth:`form`; ``leader`` machines drive runs, the others wait for them."""

    def __init__(self, *, leader: bool, machine_index: int, num_machines: int, timeout_s: float,
                 store: Any = None, node: RayNode | None = None, work_dir: str = "") -> None:
        self.leader, self.machine_index, self.num_machines = leader, machine_index, num_machines
        self.timeout_s, self.store, self.node, self.work_dir = timeout_s, store, node, work_dir
        self.runs = 0

    @classmethod
    def form(cls, topology: Any, *, procs_per_machine: int, timeout_s: float,
             object_store_bytes: int | None = None) -> RayCluster:
        """Join (or start) the cluster of ``topology``'s job (a graphstore.runtime.env.ClusterTopology
        of compute machines only)."""
        if topology.num_storage_machines:
            raise UsageError("replicated mode runs compute machines only; the job has "
                             f"{topology.num_storage_machines} storage machines")
        leader = topology.machine_index == 0
        num_cpus = max(os.cpu_count() or 1, procs_per_machine)
        if topology.num_compute_machines == 1:
            _init_embedded(num_cpus, procs_per_machine, object_store_bytes, topology.is_local)
            return cls(leader=True, machine_index=0, num_machines=1, timeout_s=timeout_s)
        store = _store(topology, timeout_s)
        work_dir = tempfile.mkdtemp(prefix="graphstore-ray-")
        ip = _resolve(topology.compute_hosts[topology.machine_index])
        if leader:
            from graphstore.runtime.ports import free_ports

            token = secrets.token_hex(32)
            port, = free_ports(1, "127.0.0.1" if topology.is_local else "")
            env = ray_node_environ(token)
            node = RayNode(_node_argv(head=True, ip=ip, port=port, address=None, num_cpus=num_cpus,
                                      workers=procs_per_machine,
                                      object_store_bytes=object_store_bytes,
                                      temp_dir=os.path.join(work_dir, "ray")),
                           env, os.path.join(work_dir, "ray-head.log"))
            address = f"{ip}:{port}"
            store.set("ray/address", address)
            store.set("ray/token", token)
            cluster = cls(leader=True, machine_index=0, num_machines=topology.num_compute_machines,
                          timeout_s=timeout_s, store=store, node=node, work_dir=work_dir)
            cluster._connect(address, token)
            return cluster
        address = store.get("ray/address").decode()
        token = store.get("ray/token").decode()
        node = RayNode(_node_argv(head=False, ip=ip, port=None, address=address,
                                  num_cpus=num_cpus, workers=procs_per_machine,
                                  object_store_bytes=object_store_bytes,
                                  temp_dir=os.path.join(work_dir, "ray")),
                       ray_node_environ(token),
                       os.path.join(work_dir, f"ray-node-{topology.machine_index}.log"))
        log.info("ray node of machine %d joining %s (pid %d)", topology.machine_index, address,
                 node.popen.pid)
        return cls(leader=False, machine_index=topology.machine_index,
                   num_machines=topology.num_compute_machines, timeout_s=timeout_s, store=store,
                   node=node, work_dir=work_dir)

    def _connect(self, address: str, token: str) -> None:
        """Leader: connect the driver once every machine's node is alive (bounded)."""
        use_ray_token(token)  # before ray is imported: Ray reads its auth mode at import
        import ray

        deadline = time.monotonic() + self.timeout_s
        while True:  # the head may take a while to listen
            if not self.node.alive():
                raise RuntimeFailure(f"the Ray head node exited ({self.node.popen.returncode}):\n"
                                     + self.node.tail())
            try:
                _keeping_our_logging(ray.init, address=address, logging_config=_quiet_logging(),
                                     runtime_env=_runtime_env())
                break
            except (ConnectionError, RuntimeError) as exc:
                if time.monotonic() > deadline:
                    raise RuntimeFailure(f"cannot connect to the Ray head at {address}: {exc}") \
                        from None
                time.sleep(1.0)
        while True:
            self.node.track()
            alive = sum(1 for n in ray.nodes() if n.get("Alive"))
            if alive >= self.num_machines:
                break
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"only {alive} of {self.num_machines} Ray nodes joined within "
                                     f"{self.timeout_s:.0f}s (graphStoreRuntimeConfig."
                                     "clusterInitTimeoutS); see the other machines' logs")
            time.sleep(_POLL_S)
        log.info("ray cluster of %d nodes ready at %s", alive, address)

    # -- runs ----------------------------------------------------------------------------------
    def finish_run(self, error: str | None) -> None:
        """Leader: publish the outcome of the run just finished (None: ok)."""
        if self.store is not None:
            self.store.set(f"run/{self.runs}", "ok" if error is None else f"failed: {error}")
        self.runs += 1

    def wait_run(self) -> None:
        """Other machines: wait (while this node lives) for the leader's next run to end;
        RuntimeFailure when it failed, or when the leader or this node is gone."""
        outcome = self._wait_key(f"run/{self.runs}", forever=True)
        self.runs += 1
        if outcome != "ok":
            raise RuntimeFailure(f"the leader machine's run failed ({outcome[:300]}); see its log")

    def _wait_key(self, key: str, *, forever: bool) -> str:
        """The value of ``key`` once the leader set it (polled: ``check`` does not block)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                if self.store.check([key]):
                    return self.store.get(key).decode()
            except RuntimeError as exc:  # the leader's store is gone
                raise RuntimeFailure(f"lost the leader machine (its store at rank 0: {exc})") \
                    from None
            if self.node is not None and not self.node.alive():
                raise RuntimeFailure(f"this machine's Ray node exited "
                                     f"({self.node.popen.returncode}):\n{self.node.tail()}")
            if not forever and time.monotonic() > deadline:
                raise RuntimeFailure(f"no {key!r} from the other machines within "
                                     f"{self.timeout_s:.0f}s")
            if self.node is not None:
                self.node.track()
            time.sleep(_POLL_S)

    # -- close ---------------------------------------------------------------------------------
    def close(self) -> None:
        """End this machine's part (module docs); every process it started is ended."""
        import ray

        try:
            if self.leader and self.store is not None:
                self.store.set("done", "1")
                for k in range(1, self.num_machines):
                    try:
                        self._wait_key(f"left/{k}", forever=False)
                    except RuntimeFailure as exc:
                        log.warning("machine %d did not say it left: %s", k, exc)
            elif self.store is not None:
                self._wait_key("done", forever=True)
        finally:
            if self.leader and ray.is_initialized():
                _shutdown_embedded_or_driver()
            if self.node is not None:
                self.node.stop()
            if not self.leader and self.store is not None:
                self.store.set(f"left/{self.machine_index}", "1")
            if self.work_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)


def _shutdown_embedded_or_driver(grace_s: float = STOP_GRACE_S) -> None:
    """``ray.shutdown()``, then wait for the processes this process started under it (an
    embedded Ray's: GCS, raylet, workers) to be gone; what is left after ``grace_s`` is killed,
    by pid."""
    import psutil
    import ray

    ours = psutil.Process().children(recursive=True)
    ray.shutdown()
    _, alive = psutil.wait_procs(ours, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def _keeping_our_logging(init: Any, **kwargs: Any) -> Any:
    """``init(**kwargs)`` (``ray.init``) with this process's root logger as it was: Ray's
    logging config is for Ray's processes, not for ours."""
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    try:
        return init(**kwargs)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def _store(topology: Any, timeout_s: float) -> Any:
    """The job's TCPStore at ``MASTER_ADDR:MASTER_PORT``, hosted by the leader (loopback in
    local mode)."""
    import torch.distributed as dist

    from graphstore.runtime.rendezvous import loopback_listener

    leader = topology.machine_index == 0
    kwargs: dict[str, Any] = {}
    if leader and topology.is_local:
        sock = loopback_listener(topology.master_addr, topology.master_port)
        if sock is None:
            raise RuntimeFailure(f"port {topology.master_port} (MASTER_PORT) is taken")
        kwargs["master_listen_fd"] = sock.detach()  # the store owns the socket from here
    return dist.TCPStore(topology.master_addr, topology.master_port, topology.num_compute_machines,
                         leader, datetime.timedelta(seconds=timeout_s), wait_for_workers=False,
                         **kwargs)


def _quiet_logging() -> Any:
    """Ray's own loggers in every Ray process at ERROR (our workers set up their own logging):
    without the dashboard, Ray Train's placement-group watcher warns every few seconds that the
    state API is unavailable."""
    import ray

    return ray.LoggingConfig(encoding="TEXT", log_level="ERROR")


def _runtime_env() -> dict[str, Any]:
    """Every Ray worker process imports graphstore.runtime.rendezvous first: its loopback stores (the
    Ray Train process group's, in local mode) listen on loopback only."""
    return {"worker_process_setup_hook": "graphstore.runtime.rendezvous.bind_loopback_stores"}


def _init_embedded(num_cpus: int, workers: int, object_store_bytes: int | None,
                   local: bool) -> None:
    """One machine: an embedded Ray (``ray.init``), with a fresh token of its own."""
    use_ray_token(secrets.token_hex(32), keep_existing=True)  # else Ray writes ~/.ray/auth_token
    import ray

    # address "local": always a new cluster, never one a stale /tmp/ray/ray_current_cluster names
    _keeping_our_logging(ray.init, address="local", num_cpus=num_cpus, include_dashboard=False,
                         resources={WORKER_RESOURCE: workers},
                         object_store_memory=object_store_bytes, logging_config=_quiet_logging(),
                         runtime_env=_runtime_env())
    log.info("embedded ray started: cpus=%d workers=%d", num_cpus, workers)


__all__ = ["ReplicatedInfo", "RayCluster", "RayNode", "WORKER_RESOURCE"]
