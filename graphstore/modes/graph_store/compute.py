"""Compute side of graph-store mode: join the storage servers, then the compute process group.

Order in every compute worker (docs/runtime.md, "Graph-store sessions"; seed 000):

    device = init_compute_process(local_rank, cluster_info)
                                                     # 1. wait until every storage process is ready
                                                     #    (bounded: readinessTimeoutS)
                                                     # 2. start the GLT RPC client (all servers)
                                                     # 3. then the compute process group (gloo,
                                                     #    CPU tensors), the device (cuda:<local_rank>
                                                     #    when the resource config gives GPUs, with
                                                     #    an NCCL group for DDP; graphstore.runtime.devices)
                                                     # 4. start heartbeats to every server
    ... RemoteDistDataset, loaders, model.to(device.torch_device), device.ddp(model) ...
    loader.shutdown()                                # loaders first: frees server-side producers
    shutdown_compute_process()                       # heartbeats, RPC client, process group

A storage server that stops answering ends this process within ``heartbeatTimeoutS`` with exit
code 1 and a message naming the storage rank and host (graphstore.runtime.heartbeat). The session a
worker joins is ``cluster_info.session_index`` (use ``cluster_info.for_session(k)`` for the k-th,
e.g. one per node type in inference).

Each mode supplies its own join and leave through its ``cluster_info``
(graphstore.modes.cluster_info): graph store and colocated, ``GraphStoreInfo.join`` / ``leave``
(graphstore.modes.graph_store.info); replicated mode, ``ReplicatedInfo``'s
(graphstore.modes.replicated.cluster): Ray
Train built the gloo process group of every worker before the worker runs; there is no storage
and no RPC, so steps 1, 2 and 4 do not exist and only the device is chosen; leaving destroys
nothing (the groups are Ray Train's).
"""

from __future__ import annotations

import logging
import time

from graphstore.runtime import devices
from graphstore.dataset import glt_adapter
from graphstore.runtime.errors import UsageError
from graphstore.modes.cluster_info import ClusterInfo, ComputeProcess

log = logging.getLogger(__name__)


_CURRENT: ComputeProcess | None = None  # one per process; GLT's client context is global too


def current() -> ComputeProcess:
    if _CURRENT is None:
        raise UsageError("call init_compute_process(local_rank, cluster_info) first")
    return _CURRENT


def compute_device() -> devices.ComputeDevice:
    """This compute process's device (chosen by :func:`init_compute_process`)."""
    return current().device


def init_compute_process(local_rank: int, cluster_info: ClusterInfo) -> devices.ComputeDevice:
    """Join this compute worker to its cluster by the mode's ``join`` (graph store: the storage
    servers, then the compute group; graphstore.modes.cluster_info); returns the device it
    computes on (graphstore.runtime.devices: the CPU, or ``cuda:<local_rank>`` when the resource
    config gives GPUs and CUDA is available on every compute rank)."""
    global _CURRENT
    if _CURRENT is not None:
        raise UsageError("init_compute_process was already called in this process")
    info = cluster_info
    if not 0 <= local_rank < info.num_processes_per_compute:
        raise UsageError(f"local_rank {local_rank} not in [0, {info.num_processes_per_compute})")
    rank, world = info.compute_rank(local_rank), info.num_compute_processes
    glt_adapter.check_glt_version()
    gpus = info.gpus_per_compute_machine
    cuda_available, cuda_count = devices.probe_cuda()
    plan = devices.choose_device(  # before anything starts: a config error fails every rank alike
        local_rank=local_rank, gpus_per_machine=gpus,
        procs_per_machine=info.num_processes_per_compute, cuda_available=cuda_available,
        cuda_device_count=cuda_count)
    t0 = time.perf_counter()
    _CURRENT = info.join(rank, world, plan)  # the mode's join (GraphStoreInfo / ReplicatedInfo)
    device = _CURRENT.device
    log.info("compute rank=%d/%d joined session=%d (%s) backend=gloo device=%s ddp=%s "
             "seconds=%.2f", rank, world, info.session_index, type(info).__name__,
             device.plan.device, device.plan.ddp_backend, time.perf_counter() - t0)
    return device


def shared_port(proc: ComputeProcess) -> int:
    """A port every compute rank agrees on for the next loader (colocated sampling workers).

    Rank 0 picks a free port on the compute leader and publishes it in the compute group's store
    under the loader's creation index; ranks create loaders in the same order, so indices match.
    """
    key = f"graphstore/loader_port/{proc.loaders_created}"
    proc.loaders_created += 1
    store = glt_adapter.default_store()
    if proc.rank == 0:
        store.set(key, str(proc.port_hold.ports(1, "127.0.0.1" if proc.info.is_local else "")[0]))
    return int(store.get(key).decode())


def shutdown_compute_process() -> None:
    """Stop heartbeats, shut the RPC client down (ends the session), wait for every compute rank
    to have done so (a barrier of the compute group: a worker forked from the machine's worker
    server leaves without interpreter shutdown, graphstore.runtime.workers, and a rank that left while a
    peer was still in its graceful RPC shutdown failed that peer's with "Connection reset by
    peer"), destroy the groups (the compute process group and, on CUDA, the NCCL group of DDP).

    Replicated mode destroys nothing: the groups belong to Ray Train, whose torch backend
    destroys them once every worker's function has returned. Destroying a gloo group right
    after a collective can deadlock in torch 2.3: ``~ProcessGroupGloo`` runs with the GIL held
    (it is a Python object's dealloc) and joins its worker threads, while a worker thread that
    still holds the last reference to a collective's tensor waits for the GIL to free that
    tensor's Python object. Seen in CI as a replicated worker that stopped answering Ray Train's
    health check for 600 s just after it logged "shut down" (its DDP model, freed when the
    function returned, held the group's last reference); reproduced with gdb by starving the
    group's threads (main thread in ``~ProcessGroupGloo`` / ``thread::join``, worker in
    ``take_gil`` from ``PyObjectSlot::maybe_destroy_pyobj``). In the other modes the RPC
    shutdown before the destroy gives the threads seconds to finish."""
    global _CURRENT
    proc = current()
    t0 = time.perf_counter()
    rpc_s = proc.info.leave(proc)  # the mode's leave (GraphStoreInfo / ReplicatedInfo)
    _CURRENT = None
    log.info("compute rank=%d shut down rpc_s=%.2f seconds=%.2f", proc.rank, rpc_s,
             time.perf_counter() - t0)
