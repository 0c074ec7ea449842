"""The worker-pool layout of a graph-store job: pure functions, no environment reads.

Shared by the local launcher (:mod:`pipeline.launch`) and the Vertex AI CustomJob builder, so both
produce the cluster that :meth:`graphstore.runtime.env.ClusterTopology.from_env` reads.

Ordering rules (docs/runtime.md):

- pools in this order: ``workerpool0`` = compute leader (1 replica), ``workerpool1`` = the other
  compute machines (C - 1 replicas, may be 0), ``workerpool2`` = storage machines (S replicas);
- global ranks follow the pools: ``workerpool0`` -> 0, ``workerpool1[i]`` -> 1 + i,
  ``workerpool2[j]`` -> C + j; ``WORLD_SIZE`` = C + S machines;
- ``CLUSTER_SPEC`` omits pools with 0 replicas, as Vertex AI does;
- every command gets ``--task-config T --resource-config R --stage S --run-dir D`` appended
  (:func:`contract_args`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from graphstore.config import TaskConfig

from graphstore.runtime.env import (
    CLUSTER_SPEC, COMPUTE_LEADER_POOL, COMPUTE_POOL, MASTER_ADDR, MASTER_PORT, RANK,
    STORAGE_POOL, WORLD_SIZE, Role, split_address,
)
from graphstore.runtime.errors import UsageError
from graphstore.config.stage import stage_section

Layout = tuple["Pool", "Pool", "Pool"]


@dataclass(frozen=True)
class Pool:
    """One worker pool: its ranks are ``first_rank .. first_rank + replicas - 1``."""

    name: str
    role: Role
    replicas: int
    first_rank: int

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.replicas)


@dataclass(frozen=True)
class Machine:
    """One replica: its pool and index there, its global rank, and its index within its role."""

    pool: str
    pool_index: int
    rank: int
    role: Role
    role_index: int


def pool_layout(num_compute_machines: int, num_storage_machines: int) -> Layout:
    """The three pools, in rank order, for C compute and S storage machines (C >= 1, S >= 0)."""
    if num_compute_machines < 1:
        raise ValueError(f"num_compute_machines must be >= 1, got {num_compute_machines}")
    if num_storage_machines < 0:
        raise ValueError(f"num_storage_machines must be >= 0, got {num_storage_machines}")
    return (Pool(COMPUTE_LEADER_POOL, "compute", 1, 0),
            Pool(COMPUTE_POOL, "compute", num_compute_machines - 1, 1),
            Pool(STORAGE_POOL, "storage", num_storage_machines, num_compute_machines))


def _pool(layout: Layout, pool_name: str) -> Pool:
    for pool in layout:
        if pool.name == pool_name:
            return pool
    raise ValueError(f"unknown pool {pool_name!r}; pools are {[p.name for p in layout]}")


def world_size(layout: Layout) -> int:
    """Machines in the job (C + S)."""
    return sum(pool.replicas for pool in layout)


def rank_of(layout: Layout, pool_name: str, index: int) -> int:
    """Global rank of replica ``index`` of pool ``pool_name``."""
    pool = _pool(layout, pool_name)
    if not 0 <= index < pool.replicas:
        raise ValueError(f"{pool_name} has {pool.replicas} replicas; index {index} is out of range")
    return pool.first_rank + index


def machines(layout: Layout) -> tuple[Machine, ...]:
    """Every replica in rank order (compute machines 0..C-1, then storage machines 0..S-1)."""
    out = []
    for pool in layout:
        for index in range(pool.replicas):
            rank = pool.first_rank + index
            role_index = index if pool.role == "storage" else rank
            out.append(Machine(pool.name, index, rank, pool.role, role_index))
    return tuple(out)


def cluster_spec(layout: Layout, hosts_by_pool: Mapping[str, Sequence[str]], task_pool: str,
                 task_index: int, job_name: str) -> dict[str, Any]:
    """The ``CLUSTER_SPEC`` of replica ``task_index`` of ``task_pool``.

    ``hosts_by_pool`` maps each pool with replicas to its ``"host:port"`` addresses in index order;
    pools with 0 replicas are left out of ``"cluster"``.
    """
    rank_of(layout, task_pool, task_index)  # validates the task
    cluster: dict[str, list[str]] = {}
    for pool in layout:
        addresses = list(hosts_by_pool.get(pool.name, ()))
        if len(addresses) != pool.replicas:
            raise ValueError(f"{pool.name} has {pool.replicas} replicas but {len(addresses)} "
                             f"addresses were given: {addresses}")
        if pool.replicas:
            cluster[pool.name] = addresses
    return {"cluster": cluster, "environment": "cloud",
            "task": {"type": task_pool, "index": task_index, "trial": ""}, "job": job_name}


def cluster_environ(layout: Layout, hosts_by_pool: Mapping[str, Sequence[str]], task_pool: str,
                    task_index: int, job_name: str, master_port: int) -> dict[str, str]:
    """The five variables Vertex AI sets for one replica; ``MASTER_ADDR`` is the pool0 host."""
    spec = cluster_spec(layout, hosts_by_pool, task_pool, task_index, job_name)
    master_addr, _ = split_address(spec["cluster"][COMPUTE_LEADER_POOL][0])
    return {CLUSTER_SPEC: json.dumps(spec), RANK: str(rank_of(layout, task_pool, task_index)),
            WORLD_SIZE: str(world_size(layout)), MASTER_ADDR: master_addr,
            MASTER_PORT: str(master_port)}


# --- the command-line contract (the same for the local launcher and Vertex AI) -----------------

STAGE_CONFIG_KEYS: Mapping[str, str] = MappingProxyType({"train": "trainerConfig",
                                                         "infer": "inferencerConfig"})
"""``--stage`` value -> the task-config section whose commands run."""


def role_commands(task: TaskConfig, stage: str) -> dict[Role, tuple[str, str]]:
    """role -> (dotted config key, command) of ``stage``: the stage's ``command`` runs on compute
    machines, its ``graphStoreStorageConfig.command`` on storage machines."""
    key = STAGE_CONFIG_KEYS[stage]
    section = stage_section(task, stage)
    return {"storage": (f"{key}.graphStoreStorageConfig.command", section.storage.command),
            "compute": (f"{key}.command", section.command)}


def split_command(command: str, config_key: str) -> list[str]:
    """shlex-split a configured command; errors name ``config_key``."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"{config_key}: cannot split {command!r}: {exc}") from None
    if not argv:
        raise UsageError(f"{config_key}: the command is empty")
    return argv


def contract_args(*, task_config_path: str, resource_config_path: str, stage: str,
                  run_dir: str) -> list[str]:
    """The arguments appended to every user command, in this order."""
    return ["--task-config", task_config_path, "--resource-config", resource_config_path,
            "--stage", stage, "--run-dir", run_dir]
