"""Run a worker function on every compute process of a replicated stage: Ray Train's TorchTrainer.

The loops' workers (``graphstore.training.trainer._worker``, ``graphstore.inference.inferencer._worker``)
take ``(local_rank, cluster_info, *args)``, as ``spawn_workers`` calls them in the other modes.
Here one ``TorchTrainer.fit`` runs them on C x L Ray Train workers (DDP), L per machine (each
worker asks for one ``graphstore_worker`` resource, graphstore.modes.replicated.cluster): Ray Train
builds the gloo process group of all of them (its world rank is the compute rank;
``init_compute_process`` then only picks the device and, on CUDA, the NCCL group of DDP,
graphstore.runtime.devices) and each calls the function with its ``(local_rank, info)``
(:meth:`ReplicatedInfo.for_rank`).

Errors, as ``spawn_workers`` maps them: a ``GraphstoreError`` raised in a worker becomes
``UsageError`` / ``RuntimeFailure`` (exit 2 / 1) with the worker named; any other failure
(a bug, a killed worker) a ``RuntimeFailure`` naming the worker and the exception. Ray Train
does not retry (``max_failures`` 0). Its run folder (results it keeps per run) is a temporary
folder of ours, removed afterwards, never ``~/ray_results``.
"""

from __future__ import annotations

import faulthandler
import logging
import shutil
import tempfile
from typing import Any, Callable, Sequence

from graphstore.runtime.errors import GraphstoreError, RuntimeFailure, UsageError
from graphstore.modes.replicated.cluster import WORKER_RESOURCE, ReplicatedInfo

log = logging.getLogger(__name__)
TEARDOWN_WATCHDOG_S = 300.0
"""Seconds after a worker's function returned before it prints its threads' stacks (_train_loop)."""


def _train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: its place from Ray Train's world rank, then the function."""
    import ray.train

    from graphstore.modes.replicated.loading import quiet_ray_data

    quiet_ray_data()
    info: ReplicatedInfo = config["info"]
    rank = ray.train.get_context().get_world_rank()
    local_rank, mine = info.for_rank(rank)
    print(f"ray worker rank={rank} machine={mine.machine_index} local_rank={local_rank} "
          f"ray_node={ray.get_runtime_context().get_node_id()}", flush=True)
    # A worker still running at sessionTimeoutS prints every thread's stack to its stderr (which
    # Ray forwards to the leader's log): faulthandler's watchdog is a C thread, so it reports a
    # hang even while a C call holds the GIL (when Ray Train's own health check only sees a
    # worker that stopped answering, and kills it after RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S).
    faulthandler.dump_traceback_later(info.runtime.session_timeout_s, exit=False)
    try:
        config["fn"](local_rank, mine, *config["args"])
    finally:
        # The same for teardown (what the function's objects free when it returns, Ray Train's
        # shutdown of the torch group): a worker still alive TEARDOWN_WATCHDOG_S after its
        # function returned prints its stacks, before Ray Train's health check (600 s) kills it.
        # A worker that waits that long for slower ranks prints them too (harmless).
        faulthandler.dump_traceback_later(
            min(info.runtime.session_timeout_s, TEARDOWN_WATCHDOG_S), exit=False)


def run_ray_workers(fn: Callable[..., None], args: Sequence[Any], info: ReplicatedInfo, *,
                    name: str) -> None:
    """``fn(local_rank, info_of_that_worker, *args)`` on every compute process of the job (one
    ``TorchTrainer.fit``, on the Ray cluster this process is connected to). Returns when every
    worker returned; raises as the module docs say otherwise."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    use_gpu = info.gpus_per_compute_machine > 0
    resources = {WORKER_RESOURCE: 1, "CPU": 0}
    if use_gpu:
        resources["GPU"] = 1
    results = tempfile.mkdtemp(prefix="graphstore-raytrain-")
    try:
        trainer = TorchTrainer(
            _train_loop, train_loop_config={"fn": fn, "args": tuple(args), "info": info},
            torch_config=TorchConfig(backend="gloo",
                                     timeout_s=int(info.runtime.cluster_init_timeout_s)),
            scaling_config=ScalingConfig(num_workers=info.num_compute_processes, use_gpu=use_gpu,
                                         resources_per_worker=resources),
            run_config=RunConfig(name=name, storage_path=results,
                                 failure_config=FailureConfig(max_failures=0)))
        try:
            trainer.fit()
        except Exception as exc:  # noqa: BLE001 (mapped onto the error contract below)
            raise _contract_error(exc) from None
    finally:
        shutil.rmtree(results, ignore_errors=True)


def _contract_error(exc: Exception) -> GraphstoreError:
    """The error of the error contract for a failed ``fit`` (module docs)."""
    failures = dict(getattr(exc, "worker_failures", None) or {})
    if not failures:
        return RuntimeFailure(f"Ray Train failed: {type(exc).__name__}: {_first_line(exc)}")
    rank, error = min(failures.items())
    who = f"compute process rank {rank}"
    if isinstance(error, GraphstoreError):
        cls = UsageError if isinstance(error, UsageError) else RuntimeFailure
        return cls(f"{who}: {error}")
    return RuntimeFailure(f"{who}: {type(error).__name__}: {_first_line(error)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


__all__ = ["run_ray_workers"]
