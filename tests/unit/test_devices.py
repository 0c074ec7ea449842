"""The device decision of a compute process (graphstore.runtime.devices): both branches as pure decisions
(CUDA's answers passed in), the agreement over a real gloo group, and the CPU wiring of DDP and
batches. The CUDA branch's torch calls run on a GPU machine: scripts/gpu_check.sh."""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from graphstore.config import load_resource_config
from graphstore.runtime.devices import (
    ComputeDevice, DevicePlan, activate, agree, agree_across_ranks, choose_device, move_batch,
)
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.runtime.ports import free_ports

REPO = Path(__file__).resolve().parents[2]


def _choose(local_rank=0, gpus=0, procs=1, available=False, count=0) -> DevicePlan:
    return choose_device(local_rank=local_rank, gpus_per_machine=gpus, procs_per_machine=procs,
                         cuda_available=available, cuda_device_count=count)


def test_no_gpus_in_the_config_is_the_cpu_even_where_cuda_is_available():
    for available, count in ((False, 0), (True, 8)):
        plan = _choose(local_rank=1, gpus=0, procs=2, available=available, count=count)
        assert plan == DevicePlan(kind="cpu")
        assert (plan.device, plan.ddp_backend, plan.ddp_device_ids, plan.reason) == \
            ("cpu", "gloo", None, "")


def test_gpus_in_the_config_and_cuda_give_one_gpu_per_local_rank():
    plans = [_choose(local_rank=r, gpus=2, procs=2, available=True, count=2) for r in range(2)]
    assert [p.device for p in plans] == ["cuda:0", "cuda:1"]
    assert [p.ddp_device_ids for p in plans] == [[0], [1]]
    assert {p.ddp_backend for p in plans} == {"nccl"}
    # more GPUs than processes: process r still takes cuda:r
    assert _choose(local_rank=0, gpus=4, procs=1, available=True, count=4).device == "cuda:0"


def test_gpus_in_the_config_without_cuda_fall_back_to_the_cpu_saying_why():
    plan = _choose(local_rank=0, gpus=2, procs=2, available=False, count=0)
    assert plan.kind == "cpu" and plan.ddp_device_ids is None and plan.ddp_backend == "gloo"
    assert "gives 2 GPU(s) per compute machine (compute_pool.gpu_limit)" in plan.reason
    assert "CUDA is not available" in plan.reason


def test_more_processes_than_configured_gpus_is_a_config_error_naming_both_keys():
    with pytest.raises(UsageError) as err:
        _choose(local_rank=0, gpus=2, procs=4, available=True, count=4)
    text = str(err.value)
    assert "compute_cluster_local_world_size is 4" in text and "compute_pool.gpu_limit is 2" in text
    assert "\n" not in text


def test_a_machine_showing_fewer_gpus_than_configured_is_a_runtime_failure():
    assert _choose(local_rank=0, gpus=2, procs=2, available=True, count=1).device == "cuda:0"
    with pytest.raises(RuntimeFailure, match=r"compute local rank 1 has no GPU: CUDA shows 1 "):
        _choose(local_rank=1, gpus=2, procs=2, available=True, count=1)


def test_bad_arguments_and_plans_are_refused():
    with pytest.raises(ValueError):
        _choose(local_rank=2, procs=2)
    with pytest.raises(ValueError):
        _choose(gpus=-1)
    with pytest.raises(ValueError):
        DevicePlan(kind="cuda")
    with pytest.raises(ValueError):
        DevicePlan(kind="cpu", index=0)


def test_one_rank_without_cuda_puts_every_rank_on_the_cpu():
    cuda = DevicePlan(kind="cuda", index=1)
    assert agree(cuda, every_rank_has_cuda=True) is cuda
    fallback = agree(cuda, every_rank_has_cuda=False)
    assert fallback.kind == "cpu" and "another compute process" in fallback.reason
    cpu = DevicePlan(kind="cpu")
    assert agree(cpu, every_rank_has_cuda=True) is cpu


def test_the_resource_config_is_what_gives_gpus():
    vertex = load_resource_config(str(REPO / "configs" / "resource_vertex.yaml"))
    assert vertex.trainer.gpus_per_compute_machine == 2  # compute_pool: 2x NVIDIA_TESLA_T4
    assert vertex.inferencer.gpus_per_compute_machine == 2
    for name in ("resource_local.yaml", "resource_local_colocated.yaml"):
        local = load_resource_config(str(REPO / "configs" / name))
        assert local.trainer.gpus_per_compute_machine == 0  # local: no GPUs, the CPU
        assert local.inferencer.gpus_per_compute_machine == 0


def test_ddp_arguments_of_each_branch():
    assert ComputeDevice(DevicePlan(kind="cpu")).ddp_kwargs() == {}
    group = object()  # stands for the NCCL group activate() builds on a GPU machine
    cuda = ComputeDevice(DevicePlan(kind="cuda", index=3), group)
    assert cuda.torch_device == torch.device("cuda", 3)
    assert cuda.ddp_kwargs() == {"device_ids": [3], "output_device": 3, "process_group": group}
    with pytest.raises(ValueError):
        ComputeDevice(DevicePlan(kind="cuda", index=0))  # CUDA without its NCCL group
    with pytest.raises(ValueError):
        ComputeDevice(DevicePlan(kind="cpu"), group)


def test_cpu_batches_are_not_copied():
    from torch_geometric.data import HeteroData

    batch = HeteroData()
    batch["user"].x = torch.ones(3, 2)
    assert move_batch(batch, torch.device("cpu")) is batch
    assert move_batch(batch, "cpu")["user"].x.data_ptr() == batch["user"].x.data_ptr()
    assert ComputeDevice(DevicePlan(kind="cpu")).batch(batch) is batch
    # another device ("meta" stands for a GPU here): every tensor of the batch moves
    batch["user", "buys", "item"].edge_index = torch.zeros(2, 4, dtype=torch.long)
    batch.y_positive = torch.zeros(2, 1, dtype=torch.long)
    moved = move_batch(batch, "meta")
    assert {t.device.type for t in (moved["user"].x, moved["user", "buys", "item"].edge_index,
                                    moved.y_positive)} == {"meta"}
