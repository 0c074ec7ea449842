"""``GraphStoreInfo``: the frozen description of a graph-store cluster, and how it is agreed on.

Call order (seed 000; the same on every machine, storage and compute):

    torch.distributed.init_process_group(backend="gloo")   # temporary global group, C + S machines
    cluster_info = get_graph_store_info()                   # collective: every machine must call it
    torch.distributed.destroy_process_group()

``get_graph_store_info`` exchanges what no single machine knows: the storage leader picks one free
RPC port per server session, the compute leader one free process-group port per session and a job
id. Hosts come from the cluster environment (graphstore.runtime.env). Readiness markers of this job live
under ``readiness_uri`` (``<run-dir>/_graphstore/<stage>/<job id>``), so a retried job never sees
an earlier attempt's markers.

Importing this module imports graphstore.runtime.rendezvous: from then on, every rendezvous store of this
process whose address is loopback (the temporary global group's, the compute group's, GLT's RPC
groups') listens on loopback only. A user module imports ``get_graph_store_info`` before its
``init_process_group``, so its global group is covered too.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import time
import uuid
from dataclasses import dataclass
from typing import Literal

import graphstore.runtime.rendezvous  # noqa: F401  (binds loopback rendezvous stores to loopback)
from graphstore.dataset import glt_adapter
from graphstore.io import uris
from graphstore.config import RuntimeConfig
from graphstore.modes.cluster_info import ComputeProcess
from graphstore.modes.graph_store.allocator import use_sampling_allocator
from graphstore.runtime import devices
from graphstore.runtime.env import ClusterTopology
from graphstore.runtime.heartbeat import Heartbeat
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.runtime.ports import PortHold, free_ports
from graphstore.config.stage import StageContext


@dataclass(frozen=True, kw_only=True)
class GraphStoreInfo:
    num_storage_nodes: int
    num_compute_nodes: int
    num_processes_per_compute: int
    storage_node_ips: tuple[str, ...]
    compute_node_ips: tuple[str, ...]
    storage_rpc_ports: tuple[int, ...]  # one per server session, on storage_cluster_master_ip
    compute_pg_ports: tuple[int, ...]  # one per session, on compute_node_ips[0]
    readiness_uri: str
    runtime: RuntimeConfig
    is_local: bool
    machine_role: Literal["compute", "storage"]
    machine_index: int  # index of the machine that built this object within its role
    session_index: int = 0
    gpus_per_compute_machine: int = 0  # > 0: compute processes use cuda:<local_rank> (devices)

    @property
    def num_server_sessions(self) -> int:
        return len(self.storage_rpc_ports)

    @property
    def num_compute_processes(self) -> int:
        return self.num_compute_nodes * self.num_processes_per_compute

    @property
    def colocated(self) -> bool:
        """No storage machines: compute machines hold the partitions (graphstore.modes.colocated.dataset)."""
        return self.num_storage_nodes == 0

    @property
    def storage_cluster_master_ip(self) -> str:
        """Where the RPC group's master listens: storage 0, or compute 0 when colocated."""
        return self.compute_node_ips[0] if self.colocated else self.storage_node_ips[0]

    @property
    def compute_cluster_master_ip(self) -> str:
        return self.compute_node_ips[0]

    @property
    def storage_rpc_port(self) -> int:
        return self.storage_rpc_ports[self.session_index]

    @property
    def compute_pg_port(self) -> int:
        return self.compute_pg_ports[self.session_index]

    def for_session(self, session_index: int) -> "GraphStoreInfo":
        """The same cluster, pointed at server session ``session_index``."""
        if not 0 <= session_index < self.num_server_sessions:
            raise UsageError(f"GraphStoreInfo: session {session_index} does not exist "
                             f"(storage serves {self.num_server_sessions})")
        return dataclasses.replace(self, session_index=session_index)

    def compute_rank(self, local_rank: int) -> int:
        """Global rank of a compute process among all compute processes."""
        if self.machine_role != "compute":
            raise UsageError("GraphStoreInfo.compute_rank: this info was built on a storage machine")
        return self.machine_index * self.num_processes_per_compute + local_rank

    def join(self, rank: int, world: int, plan: devices.DevicePlan) -> ComputeProcess:
        """Graph store and colocated's join of a compute process (:func:`_join`)."""
        return _join(self, rank, world, plan)

    def leave(self, process: ComputeProcess) -> float:
        """Graph store and colocated's leave (:func:`_leave`)."""
        return _leave(process)


def _join(info: GraphStoreInfo, rank: int, world: int, plan: devices.DevicePlan) -> ComputeProcess:
    """Graph store and colocated's join (``GraphStoreInfo.join``; the steps of
    graphstore.modes.graph_store.compute's docs): storage ready, the RPC client (colocated: the
    worker group's RPC agent), the compute group, the device, heartbeats to storage."""
    import graphlearn_torch as glt
    import torch.distributed as dist

    from graphstore.dataset.protocol import CLIENT_GROUP, SERVER_GROUP

    use_sampling_allocator()  # its loaders sample (allocator module docs)
    if info.colocated:  # every compute process holds (a share of) its machine's partition
        glt.distributed.init_worker_group(world_size=world, rank=rank, group_name="gs_worker")
        glt.distributed.init_rpc(master_addr=info.storage_cluster_master_ip,
                                 master_port=info.storage_rpc_port, num_rpc_threads=4,
                                 rpc_timeout=info.runtime.rpc_timeout_s)
    else:
        wait_ready(info, info.session_index)
        glt.distributed.init_client(
            num_servers=info.num_storage_nodes, num_clients=world, client_rank=rank,
            master_addr=info.storage_cluster_master_ip, master_port=info.storage_rpc_port,
            num_rpc_threads=4, client_group_name=CLIENT_GROUP)
        glt_adapter.set_client_rpc_timeout(info.runtime.rpc_timeout_s)
    dist.init_process_group(  # gloo: CPU-side collectives; CUDA tensors go on the DDP group
        "gloo", init_method=f"tcp://{info.compute_cluster_master_ip}:{info.compute_pg_port}",
        rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=info.runtime.cluster_init_timeout_s))
    device = devices.activate(devices.agree_across_ranks(plan, info.gpus_per_compute_machine),
                              timeout_s=info.runtime.cluster_init_timeout_s)
    peers = {f"storage rank {i} ({host})": f"{SERVER_GROUP}_{i}"
             for i, host in enumerate(info.storage_node_ips)}
    beat = None if info.colocated else Heartbeat(
        peers, interval_s=info.runtime.heartbeat_interval_s,
        timeout_s=info.runtime.heartbeat_timeout_s).start()
    return ComputeProcess(info, rank, world, beat, device)


def _leave(proc: ComputeProcess) -> float:
    """Graph store and colocated's leave (``GraphStoreInfo.leave``): the RPC client or agent,
    then the compute group (graphstore.modes.graph_store.compute.shutdown_compute_process); returns the RPC shutdown's
    seconds."""
    import graphlearn_torch as glt
    import torch.distributed as dist

    t0 = time.perf_counter()
    if proc.heartbeat is None:  # colocated: this process's RPC agent of the worker group
        glt.distributed.shutdown_rpc()
    else:
        proc.heartbeat.stop()
        glt.distributed.shutdown_client()
    rpc_s = time.perf_counter() - t0
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return rpc_s


def bind_host(topology: ClusterTopology) -> str:
    """Loopback in local mode; all interfaces of the job's private network otherwise."""
    return "127.0.0.1" if topology.is_local else ""


def _exchange(topology: ClusterTopology, sessions: int, timeout_s: float,
              port_hold: PortHold | None) -> dict:
    """Leaders publish ports and a job id in the group's key-value store; everyone reads them.
    A leader's ports stay reserved in ``port_hold`` (graphstore.runtime.ports) until their session binds
    them, minutes later for a late session.

    The store, not a gloo collective: destroying a gloo group right after an object collective
    deadlocked here in torch 2.3 (~ProcessGroupGloo joins a worker thread that waits for the GIL
    to free the collective's tensors), even with a barrier in between.
    """
    store = glt_adapter.default_store()
    store.set_timeout(datetime.timedelta(seconds=timeout_s))
    rank = topology.rank
    pick = port_hold.ports if port_hold is not None else free_ports
    if topology.role == "storage" and topology.machine_index == 0:
        store.set("graphstore/storage_rpc_ports",
                  ",".join(map(str, pick(sessions, bind_host(topology)))))
    if topology.num_storage_machines == 0 and topology.role == "compute" and topology.machine_index == 0:
        # colocated: the GLT worker group's RPC master lives on the compute leader
        store.set("graphstore/storage_rpc_ports",
                  ",".join(map(str, pick(sessions, bind_host(topology)))))
    if topology.role == "compute" and topology.machine_index == 0:
        store.set("graphstore/compute_pg_ports",
                  ",".join(map(str, pick(sessions, bind_host(topology)))))
        store.set("graphstore/job_id", time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8])
    merged = {
        "storage_rpc_ports": tuple(int(p) for p in store.get("graphstore/storage_rpc_ports").decode().split(",")),
        "compute_pg_ports": tuple(int(p) for p in store.get("graphstore/compute_pg_ports").decode().split(",")),
        "job_id": store.get("graphstore/job_id").decode(),
    }
    # two steps through the store before anyone destroys the group. 1: every rank waits until
    # everyone has read: a rank that destroyed its gloo pairs while a slower one was still
    # connecting the mesh made that one fail in init_process_group ("connectFullMesh ...
    # Connection closed by peer": seen in a loaded test run, always the last storage rank).
    # 2: rank 0 hosts the store, so it waits until every rank is done with the store
    deadline = time.monotonic() + timeout_s
    for key, ranks_waiting in (("graphstore/read", True), ("graphstore/left", rank == 0)):
        store.add(key, 1)
        while ranks_waiting and store.add(key, 0) < topology.world_size:
            if time.monotonic() > deadline:
                raise RuntimeFailure("get_graph_store_info: not every machine read the cluster "
                                     f"info within {timeout_s:.0f}s (clusterInitTimeoutS)")
            time.sleep(0.05)
    return merged


def get_graph_store_info(ctx: StageContext | None = None,
                         topology: ClusterTopology | None = None, *,
                         port_hold: PortHold | None = None) -> GraphStoreInfo:
    """Collective over the initialised global process group (all C + S machines).

    ``port_hold``: keeps the session ports this machine picks (as the storage or compute leader)
    reserved until they are bound; it must outlive the sessions (graphstore.runtime.ports). None: the
    ports are only checked free when picked."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise UsageError("get_graph_store_info: call torch.distributed.init_process_group(...) "
                         "first (the temporary global group of all compute and storage machines)")
    ctx = ctx or StageContext.from_argv()
    topology = topology or ClusterTopology.from_env(os.environ)
    if dist.get_world_size() != topology.world_size:
        raise UsageError(f"get_graph_store_info: process group has {dist.get_world_size()} "
                         f"members but the cluster has {topology.world_size} machines")
    res = ctx.stage_resources
    if (res.num_storage, res.num_compute_machines) != (topology.num_storage_machines,
                                                       topology.num_compute_machines):
        raise UsageError(
            f"resource config says {res.num_storage} storage x {res.num_compute_machines} compute "
            f"machines for stage {ctx.stage}, the cluster has {topology.num_storage_machines} x "
            f"{topology.num_compute_machines}")
    sessions = ctx.storage.storage_args.num_server_sessions
    merged = _exchange(topology, sessions, ctx.task.runtime.cluster_init_timeout_s, port_hold)
    return GraphStoreInfo(
        num_storage_nodes=topology.num_storage_machines,
        num_compute_nodes=topology.num_compute_machines,
        num_processes_per_compute=res.procs_per_compute,
        storage_node_ips=topology.storage_hosts, compute_node_ips=topology.compute_hosts,
        storage_rpc_ports=merged["storage_rpc_ports"],
        compute_pg_ports=merged["compute_pg_ports"],
        readiness_uri=ctx.paths.readiness(ctx.stage, merged["job_id"]),
        runtime=ctx.task.runtime, is_local=topology.is_local, machine_role=topology.role,
        machine_index=topology.machine_index, gpus_per_compute_machine=res.gpus_per_compute_machine)


def agree_on_cluster(ctx: StageContext, topology: ClusterTopology,
                     port_hold: PortHold | None = None) -> GraphStoreInfo:
    """The seed-000 sequence in one call: temporary global gloo group (explicit address, rank and
    ``clusterInitTimeoutS``), ``get_graph_store_info``, destroy the group. ``port_hold``: see
    :func:`get_graph_store_info`; the caller keeps it for the stage (the stage's processes
    do: graphstore.modes.graph_store.server, graphstore.modes.machine)."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://{topology.master_addr}:{topology.master_port}",
        rank=topology.rank, world_size=topology.world_size,
        timeout=datetime.timedelta(seconds=ctx.task.runtime.cluster_init_timeout_s))
    try:
        return get_graph_store_info(ctx, topology, port_hold=port_hold)
    finally:
        dist.destroy_process_group()


# -- readiness ------------------------------------------------------------------------------------
def _marker(info: GraphStoreInfo, session: int, storage_index: int) -> str:
    return uris.join(info.readiness_uri, f"session_{session}", f"storage_{storage_index}.ready")


def mark_ready(info: GraphStoreInfo, session: int, storage_index: int) -> None:
    """Storage: announce that this server session is about to accept clients."""
    uris.write_text(_marker(info, session, storage_index), "ready")


def wait_ready(info: GraphStoreInfo, session: int, poll_s: float = 0.2) -> None:
    """Compute: block until every storage process marked ``session`` ready (bounded)."""
    deadline = time.monotonic() + info.runtime.readiness_timeout_s
    pending = set(range(info.num_storage_nodes))
    while pending:
        pending = {i for i in pending if not uris.exists(_marker(info, session, i))}
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RuntimeFailure(
                f"storage rank(s) {sorted(pending)} not ready for session {session} after "
                f"{info.runtime.readiness_timeout_s:.0f}s (graphStoreRuntimeConfig.readinessTimeoutS); "
                "see their logs")
        time.sleep(poll_s)
