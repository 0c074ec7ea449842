"""The device decision of a compute process (graphstore.runtime.devices): both branches as pure decisions
(CUDA's answers passed in), the agreement over a real gloo group, and the CPU wiring of DDP and
batches. The CUDA branch's torch calls run on a GPU machine: scripts/gpu_check.sh: the tests that
start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_devices.py: unit tests start no process."""

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

pytestmark = [pytest.mark.integration]


def _rank(rank: int, world: int, port: int, has_cuda: list[bool], out) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        plan = DevicePlan(kind="cuda", index=0) if has_cuda[rank] else DevicePlan(kind="cpu")
        agreed = agree_across_ranks(plan, gpus_per_machine=1)
        unasked = agree_across_ranks(plan, gpus_per_machine=0)  # no GPUs: nothing exchanged
        device = activate(DevicePlan(kind="cpu"), timeout_s=60)
        model = device.ddp(torch.nn.Linear(2, 1), find_unused_parameters=True)
        model(torch.ones(4, 2)).sum().backward()  # gradients all-reduced over the gloo group
        out.put((rank, agreed.kind, unasked.kind, device.plan.device,
                 float(model.module.weight.grad.sum())))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("has_cuda,expected", [([True, False], "cpu"), ([True, True], "cuda")])
def test_ranks_agree_over_the_real_group_and_cpu_ddp_works(has_cuda, expected):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_ports(1, "127.0.0.1")[0]
    procs = [ctx.Process(target=_rank, args=(r, 2, port, has_cuda, out)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:
            os.kill(p.pid, 9)
    assert codes == [0, 0], codes
    results = sorted(out.get(timeout=5) for _ in procs)
    assert [r[1] for r in results] == [expected, expected]
    assert [r[2] for r in results] == ["cuda" if c else "cpu" for c in has_cuda]
    assert [r[3] for r in results] == ["cpu", "cpu"]
    assert results[0][4] == results[1][4] == 8.0  # 4 rows of ones, 2 weights, same on both ranks
