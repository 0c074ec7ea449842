"""Collectives of the compute process group the evaluation needs: rows of different lengths
gathered from every rank, and a tensor sent from one rank to all.

Every function is a collective: call it on every rank of the group, in the same order. Tensors
travel on the CPU (gloo) and come back on the device they were given on.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_gather_rows(t: torch.Tensor, fill: float | int = 0) -> list[torch.Tensor]:
    """Every rank's ``t`` (same shape but for dim 0, same dtype), in rank order.

    Ranks may hold different row counts (none too); each tensor is padded to the longest with
    ``fill`` for the transfer and cut back after."""
    device = t.device
    t = t.cpu()
    world = dist.get_world_size()
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([t.size(0)], dtype=torch.long))
    most = max(int(s) for s in sizes)
    padded = torch.full((most, *t.shape[1:]), fill, dtype=t.dtype)
    padded[:t.size(0)] = t
    out = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(out, padded)
    return [o[:int(s)].to(device) for o, s in zip(out, sizes)]


def broadcast_from(t: torch.Tensor, src: int) -> torch.Tensor:
    """``src``'s ``t`` on every rank (the others pass a tensor of the same shape and dtype)."""
    device = t.device
    cpu = t.detach().cpu().contiguous()
    dist.broadcast(cpu, src=src)
    return cpu.to(device)
