"""Which device a compute process computes on, and how its model and batches get there.

One decision, :func:`choose_device`, pure (CUDA's answers are passed in, never read inside):

- the resource config gives no GPUs (every local config; a Vertex AI ``compute_pool`` with
  ``gpu_limit: 0``) -> ``cpu``: DDP without ``device_ids``, over the compute process group;
- it gives GPUs and CUDA is available -> ``cuda:<local_rank>``, one GPU per compute process
  (Vertex AI gives each machine its own GPUs, numbered from 0): DDP with
  ``device_ids=[local_rank]`` over an NCCL group of the compute processes;
- it gives GPUs but CUDA is not available in this process (a CPU build of torch, no driver) ->
  ``cpu``, as without GPUs; the reason is kept in :attr:`DevicePlan.reason` and logged as a warning;
- it gives fewer GPUs per machine than compute processes per machine (UsageError naming both
  keys), or CUDA shows fewer devices than the local rank needs (RuntimeFailure) -> an error.

Backends: the compute process group (graphstore.modes.graph_store.compute) is gloo in every case, so every CPU-side
collective of the loops (counts, evaluation sums, candidate gathers, object broadcasts, barriers)
runs on it with CPU tensors, the same with or without GPUs. NCCL carries CUDA tensors only: DDP's
gradients, on the group :func:`activate` builds. Ordering: the ranks agree on the device
(:func:`agree_across_ranks`, a collective on the compute group; one rank without CUDA puts every
rank on the CPU) before the NCCL group exists, so no rank ever waits on a group another rank did
not build.

Loaders sample on the CPU (GLT's loaders get ``to_device=cpu`` in every mode); a batch moves to
the device just before the forward pass (:meth:`ComputeDevice.batch`). What leaves a compute
process (embeddings, evaluation results, the run report) is moved back to the CPU by its writer.
This module imports no torch until a function needs it.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from graphstore.runtime.errors import RuntimeFailure, UsageError

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch.nn.parallel import DistributedDataParallel

log = logging.getLogger(__name__)

DeviceKind = Literal["cpu", "cuda"]
GPU_KEYS = "compute_pool.gpu_limit"
PROCS_KEY = "compute_cluster_local_world_size"


@dataclass(frozen=True, kw_only=True, slots=True)
class DevicePlan:
    """Where one compute process computes. Invariant: ``index`` is the CUDA ordinal when
    ``kind == "cuda"`` and None on the CPU; ``reason`` says why the CPU was chosen although the
    resource config gives GPUs (empty otherwise)."""

    kind: DeviceKind
    index: int | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.kind == "cuda" and (self.index is None or self.index < 0):
            raise ValueError(f"DevicePlan: a cuda plan needs a device index >= 0, got {self.index}")
        if self.kind == "cpu" and self.index is not None:
            raise ValueError(f"DevicePlan: a cpu plan has no device index, got {self.index}")

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda:<index>"`` (what ``torch.device`` takes)."""
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    @property
    def ddp_backend(self) -> Literal["gloo", "nccl"]:
        """The backend DDP's gradients travel on: nccl for CUDA tensors, else the gloo group."""
        return "nccl" if self.kind == "cuda" else "gloo"

    @property
    def ddp_device_ids(self) -> list[int] | None:
        """DDP's ``device_ids``: ``[index]`` on CUDA, None on the CPU (DDP's rule for CPU modules)."""
        return None if self.kind == "cpu" else [self.index]


def choose_device(*, local_rank: int, gpus_per_machine: int, procs_per_machine: int,
                  cuda_available: bool, cuda_device_count: int) -> DevicePlan:
    """The device of compute process ``local_rank`` of a machine (see the module docs).

    ``gpus_per_machine``: GPUs the resource config gives each compute machine (0: none);
    ``procs_per_machine``: compute processes per machine; ``cuda_available`` /
    ``cuda_device_count``: what CUDA answers in this process (:func:`probe_cuda`).

    Raises:
        UsageError: GPUs are given, but fewer than the compute processes of a machine.
        RuntimeFailure: GPUs are given and CUDA is available, but it shows no device
            ``local_rank`` (fewer GPUs than the resource config says).
    """
    if not 0 <= local_rank < procs_per_machine:
        raise ValueError(f"choose_device: local_rank {local_rank} not in [0, {procs_per_machine})")
    if gpus_per_machine < 0:
        raise ValueError(f"choose_device: gpus_per_machine must be >= 0, got {gpus_per_machine}")
    if gpus_per_machine == 0:
        return DevicePlan(kind="cpu")
    if procs_per_machine > gpus_per_machine:
        raise UsageError(f"{PROCS_KEY} is {procs_per_machine}, but {GPU_KEYS} is "
                         f"{gpus_per_machine}: each compute process takes one GPU "
                         f"(cuda:<local_rank>); set {PROCS_KEY} to at most {gpus_per_machine}")
    if not cuda_available:
        return DevicePlan(kind="cpu", reason=(
            f"the resource config gives {gpus_per_machine} GPU(s) per compute machine "
            f"({GPU_KEYS}) but CUDA is not available in this process (no driver, or a CPU "
            "build of torch)"))
    if local_rank >= cuda_device_count:
        raise RuntimeFailure(f"compute local rank {local_rank} has no GPU: CUDA shows "
                             f"{cuda_device_count} device(s) on this machine, the resource config "
                             f"gives {gpus_per_machine} ({GPU_KEYS})")
    return DevicePlan(kind="cuda", index=local_rank)


def agree(plan: DevicePlan, every_rank_has_cuda: bool) -> DevicePlan:
    """``plan``, or the CPU when some compute rank cannot use CUDA (every rank must take the same
    branch: only then do they build the same groups)."""
    if plan.kind == "cuda" and not every_rank_has_cuda:
        return DevicePlan(kind="cpu", reason="another compute process has no CUDA device")
    return plan


def probe_cuda() -> tuple[bool, int]:
    """``(torch.cuda.is_available(), torch.cuda.device_count())``: the only CUDA query."""
    import torch

    available = torch.cuda.is_available()
    return available, (torch.cuda.device_count() if available else 0)


def agree_across_ranks(plan: DevicePlan, gpus_per_machine: int) -> DevicePlan:
    """:func:`agree` over the initialised (gloo) compute process group. A collective when
    ``gpus_per_machine > 0`` (the same on every rank: it comes from the config); without GPUs no
    rank can differ, so nothing is exchanged."""
    if gpus_per_machine == 0:
        return plan
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1 if plan.kind == "cuda" else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return agree(plan, bool(flag.item()))


class ComputeDevice:
    """A compute process's device once chosen and agreed: the torch device, and the NCCL group
    DDP uses on CUDA (None on the CPU: DDP then uses the compute process group)."""

    def __init__(self, plan: DevicePlan, ddp_group: Any = None) -> None:
        import torch

        if (plan.kind == "cuda") != (ddp_group is not None):
            raise ValueError("ComputeDevice: a CUDA device needs its NCCL group, a CPU one none")
        self.plan, self.ddp_group = plan, ddp_group
        self.torch_device: torch.device = torch.device(plan.device)

    def __repr__(self) -> str:
        return f"ComputeDevice({self.plan.device}, ddp={self.plan.ddp_backend})"

    def ddp_kwargs(self) -> dict[str, Any]:
        """``DistributedDataParallel`` keyword arguments of this device: none on the CPU;
        ``device_ids``, ``output_device`` and the NCCL ``process_group`` on CUDA."""
        if self.plan.kind == "cpu":
            return {}
        return {"device_ids": self.plan.ddp_device_ids, "output_device": self.plan.index,
                "process_group": self.ddp_group}

    def ddp(self, module: "torch.nn.Module", **kwargs: Any) -> "DistributedDataParallel":
        """``module`` (already on this device) wrapped in DDP on this device's group."""
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(module, **self.ddp_kwargs(), **kwargs)

    def batch(self, batch: Any) -> Any:
        """A sampled batch on this device (:func:`move_batch`)."""
        return move_batch(batch, self.torch_device)


def move_batch(batch: Any, device: "torch.device | str") -> Any:
    """``batch`` (a PyG ``Data`` / ``HeteroData`` or a tensor) on ``device``: the same object
    when that is the CPU (loaders deliver CPU batches; no copy), ``batch.to(device)`` otherwise."""
    import torch

    if torch.device(device).type == "cpu":
        return batch
    return batch.to(device, non_blocking=True)


def activate(plan: DevicePlan, *, timeout_s: float) -> ComputeDevice:
    """Make ``plan`` current in this process: ``torch.cuda.set_device`` and the NCCL group of
    the compute processes on CUDA (a collective over the compute process group: call it on
    every rank, after :func:`agree_across_ranks`); nothing on the CPU."""
    if plan.kind == "cpu":
        if plan.reason:
            log.warning("computing on the CPU: %s", plan.reason)
        return ComputeDevice(plan)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(plan.index)
    group = dist.new_group(backend="nccl", timeout=datetime.timedelta(seconds=timeout_s))
    return ComputeDevice(plan, group)
