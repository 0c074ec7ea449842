"""The cluster environment: the one module that reads the variables a graph-store job runs under.

Vertex AI sets these for every replica of a CustomJob, and ``python -m pipeline launch`` sets
exactly the same ones for the processes it starts on 127.0.0.1 (see docs/runtime.md):

- ``CLUSTER_SPEC``: JSON ``{"cluster": {"workerpool0": ["host:port"], "workerpool1": [...],
  "workerpool2": [...]}, "environment": "cloud", "task": {"type": "workerpool2", "index": 1,
  "trial": ""}, "job": ...}``. Pools with 0 replicas are omitted.
- ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``.
- ``GRAPHSTORE_JOB_NAME`` (optional): the job's name, which pipeline.vertex sets on every pool to
  the CustomJob's display name. On Vertex AI the ``CLUSTER_SPEC`` "job" entry is the job spec as a
  JSON string, not a name; the local launcher puts the name itself there.

Pool order (the same as the Vertex CustomJob worker pools): ``workerpool0`` is the compute leader
(exactly 1 replica), ``workerpool1`` the other compute machines (0 or more), ``workerpool2`` the
storage machines (0 or more; 0 only for a colocated job). Global ranks: compute machines first
(``workerpool0`` -> 0, ``workerpool1[i]`` -> 1 + i), then storage (``workerpool2[j]`` -> C + j).
``WORLD_SIZE`` counts machines (C + S), not processes: each compute machine's one process later
spawns its own local workers.

Entrypoints call :meth:`ClusterTopology.from_env` once, in ``__main__``, with ``os.environ``, and
pass the frozen result down; nothing else reads these variables.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Mapping

from graphstore.runtime.errors import UsageError

CLUSTER_SPEC = "CLUSTER_SPEC"
RANK = "RANK"
WORLD_SIZE = "WORLD_SIZE"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
CLUSTER_VARIABLES = (CLUSTER_SPEC, RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
JOB_NAME = "GRAPHSTORE_JOB_NAME"

COMPUTE_LEADER_POOL = "workerpool0"
COMPUTE_POOL = "workerpool1"
STORAGE_POOL = "workerpool2"
POOL_ORDER = (COMPUTE_LEADER_POOL, COMPUTE_POOL, STORAGE_POOL)
"""Worker pools in rank order; a pool's ranks follow every rank of the pools before it."""

Role = Literal["compute", "storage"]
POOL_ROLES: Mapping[str, Role] = MappingProxyType({
    COMPUTE_LEADER_POOL: "compute", COMPUTE_POOL: "compute", STORAGE_POOL: "storage"})


def split_address(address: str) -> tuple[str, int | None]:
    """``"host:port"`` / ``"[::1]:port"`` / ``"host"`` -> (host, port or None)."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif address.count(":") == 1:
        host, _, port = address.partition(":")
    else:
        host, port = address, ""
    if not host:
        raise ValueError(f"no host in address {address!r}")
    if port and not port.isdigit():
        raise ValueError(f"port of address {address!r} is not a number")
    return host, (int(port) if port else None)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterTopology:
    """Where this process sits in a graph-store job. Built by :meth:`from_env`.

    ``compute_hosts`` / ``storage_hosts`` list hosts (no ports) in rank order: compute machine ``i``
    has rank ``i``, storage machine ``j`` has rank ``num_compute_machines + j``.
    ``machine_index`` is the index within the role (compute 0..C-1, storage 0..S-1).
    """

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    role: Role
    machine_index: int
    compute_hosts: tuple[str, ...]
    storage_hosts: tuple[str, ...]
    job_name: str

    def __post_init__(self) -> None:
        c, s = len(self.compute_hosts), len(self.storage_hosts)
        if c < 1:
            raise ValueError("ClusterTopology: needs at least one compute host")
        if self.world_size != c + s:
            raise ValueError(f"ClusterTopology: world_size {self.world_size} != {c} compute + "
                             f"{s} storage hosts")
        expected = self.machine_index + (0 if self.role == "compute" else c)
        count = c if self.role == "compute" else s
        if not 0 <= self.machine_index < count or self.rank != expected:
            raise ValueError(f"ClusterTopology: {self.role} machine {self.machine_index} of "
                             f"{count} cannot have rank {self.rank} (compute ranks first, then "
                             "storage)")

    @property
    def num_compute_machines(self) -> int:
        return len(self.compute_hosts)

    @property
    def num_storage_machines(self) -> int:
        return len(self.storage_hosts)

    @property
    def is_local(self) -> bool:
        """True when the master is a loopback address (the local launcher)."""
        return is_loopback(self.master_addr)

    def storage_rank(self, storage_index: int) -> int:
        """Global rank of storage machine ``storage_index`` (storage ranks follow compute ranks)."""
        if not 0 <= storage_index < self.num_storage_machines:
            raise ValueError(f"storage index {storage_index} not in "
                             f"0..{self.num_storage_machines - 1}")
        return self.num_compute_machines + storage_index

    def describe(self) -> str:
        """One key=value line for logs."""
        return (f"role={self.role} machine={self.machine_index} rank={self.rank}/{self.world_size} "
                f"compute={self.num_compute_machines} storage={self.num_storage_machines} "
                f"master={self.master_addr}:{self.master_port} job={self.job_name or '-'}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ClusterTopology:
        """Read and cross-check the cluster variables.

        Raises:
            UsageError: naming the variable and its value: a variable missing or empty, a number
                that is not one, ``CLUSTER_SPEC`` not JSON or missing ``workerpool0`` / the task /
                an unknown pool, ``RANK`` not the rank of the ``CLUSTER_SPEC`` task,
                ``WORLD_SIZE`` not the total replica count.
        """
        missing = [name for name in CLUSTER_VARIABLES if not environ.get(name, "").strip()]
        if missing:
            raise UsageError(f"cluster environment: {', '.join(missing)} not set; these are set by "
                             "Vertex AI or by `python -m pipeline launch` (see docs/runtime.md)")
        rank = _int_var(environ, RANK, minimum=0)
        world_size = _int_var(environ, WORLD_SIZE, minimum=1)
        master_port = _int_var(environ, MASTER_PORT, minimum=1, maximum=65535)
        spec = _parse_spec(environ[CLUSTER_SPEC])
        hosts = {pool: _pool_hosts(spec["cluster"], pool) for pool in POOL_ORDER}
        task_pool, task_index = _task(spec["task"], hosts, environ[CLUSTER_SPEC])
        compute_hosts = hosts[COMPUTE_LEADER_POOL] + hosts[COMPUTE_POOL]
        storage_hosts = hosts[STORAGE_POOL]
        total = len(compute_hosts) + len(storage_hosts)
        if world_size != total:
            raise UsageError(f"cluster environment: {WORLD_SIZE}={world_size} but {CLUSTER_SPEC} "
                             f"lists {total} replicas ({len(compute_hosts)} compute + "
                             f"{len(storage_hosts)} storage)")
        role = POOL_ROLES[task_pool]
        machine_index = task_index + (1 if task_pool == COMPUTE_POOL else 0)
        expected = machine_index + (len(compute_hosts) if role == "storage" else 0)
        if rank != expected:
            raise UsageError(f"cluster environment: {RANK}={rank} but the {CLUSTER_SPEC} task is "
                             f"{task_pool}[{task_index}], which is rank {expected} (pools "
                             f"{', '.join(POOL_ORDER)} in that order, compute first)")
        return cls(rank=rank, world_size=world_size, master_addr=environ[MASTER_ADDR].strip(),
                   master_port=master_port, role=role, machine_index=machine_index,
                   compute_hosts=compute_hosts, storage_hosts=storage_hosts,
                   job_name=environ.get(JOB_NAME, "").strip() or _job_name(spec.get("job")))


def _int_var(environ: Mapping[str, str], name: str, *, minimum: int,
             maximum: int | None = None) -> int:
    raw = environ[name].strip()
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"cluster environment: {name}={raw!r} is not an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise UsageError(f"cluster environment: {name}={value} must be {bound}")
    return value


def _spec_error(raw: str, why: str) -> UsageError:
    shown = raw if len(raw) <= 300 else raw[:300] + "..."
    return UsageError(f"cluster environment: {CLUSTER_SPEC} {why}; got {shown!r}")


def _parse_spec(raw: str) -> dict[str, Any]:
    """JSON-decode ``CLUSTER_SPEC`` and check its top-level shape."""
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _spec_error(raw, f"is not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(spec, dict):
        raise _spec_error(raw, "must be a JSON object")
    cluster = spec.get("cluster")
    if not isinstance(cluster, dict):
        raise _spec_error(raw, 'has no "cluster" object')
    unknown = sorted(set(cluster) - set(POOL_ORDER))
    if unknown:
        raise _spec_error(raw, f"names pools {unknown} that graph-store jobs do not use "
                               f"(expected {', '.join(POOL_ORDER)})")
    if not cluster.get(COMPUTE_LEADER_POOL):
        raise _spec_error(raw, f'has no "cluster.{COMPUTE_LEADER_POOL}" (the compute leader)')
    if not isinstance(spec.get("task"), dict):
        raise _spec_error(raw, 'has no "task" object')
    return spec


def _pool_hosts(cluster: Mapping[str, Any], pool: str) -> tuple[str, ...]:
    """Hosts of one pool in index order; an omitted pool has none."""
    entries = cluster.get(pool, [])
    where = f"{CLUSTER_SPEC} cluster.{pool}"
    if not isinstance(entries, list) or not all(isinstance(e, str) and e for e in entries):
        raise UsageError(f"cluster environment: {where} must be a list of \"host:port\" strings, "
                         f"got {entries!r}")
    if pool == COMPUTE_LEADER_POOL and len(entries) != 1:
        raise UsageError(f"cluster environment: {where} must hold exactly 1 replica (the compute "
                         f"leader), got {entries!r}")
    hosts = []
    for entry in entries:
        try:
            hosts.append(split_address(entry)[0])
        except ValueError as exc:
            raise UsageError(f"cluster environment: {where}: {exc}") from None
    return tuple(hosts)


def _task(task: Mapping[str, Any], hosts: Mapping[str, tuple[str, ...]],
          raw: str) -> tuple[str, int]:
    """The ``task`` entry as (pool, index), checked against the pools' replica counts."""
    pool, index = task.get("type"), task.get("index")
    if pool not in POOL_ORDER or not hosts[pool]:
        raise _spec_error(raw, f"task.type {pool!r} is not a pool of this cluster "
                                        f"({', '.join(p for p in POOL_ORDER if hosts[p])})")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(hosts[pool]):
        raise _spec_error(raw, f"task.index {index!r} is not in 0..{len(hosts[pool]) - 1} "
                                        f"(pool {pool} has {len(hosts[pool])} replicas)")
    return pool, index


def _job_name(job: Any) -> str:
    """``CLUSTER_SPEC``'s "job": a name (local launcher), or Vertex AI's job spec, as a JSON
    string or a dict: its display name when it has one, else ``""`` (never the JSON itself)."""
    if isinstance(job, str) and job.lstrip().startswith("{"):
        try:
            job = json.loads(job)
        except json.JSONDecodeError:
            return ""
    if isinstance(job, str):
        return job
    if isinstance(job, dict):
        name = job.get("displayName", job.get("display_name", ""))
        return name if isinstance(name, str) else ""
    return ""


STORAGE_EMULATOR_HOST = "STORAGE_EMULATOR_HOST"
BIGQUERY_EMULATOR_HOST = "BIGQUERY_EMULATOR_HOST"


def emulator_hosts(environ: Mapping[str, str]) -> dict[str, str]:
    """The local stand-ins to use instead of Google Cloud, by service (``"storage"``,
    ``"bigquery"``): ``STORAGE_EMULATOR_HOST`` (also read by google-cloud-storage itself) and
    ``BIGQUERY_EMULATOR_HOST`` (``http://host:port`` of a BigQuery REST emulator). Unset or empty
    variables are left out; production runs set neither."""
    hosts = {"storage": environ.get(STORAGE_EMULATOR_HOST, "").strip(),
             "bigquery": environ.get(BIGQUERY_EMULATOR_HOST, "").strip()}
    return {k: v if "://" in v else f"http://{v}" for k, v in hosts.items() if v}


PAUSE_AT = "GRAPHSTORE_TEST_PAUSE_AT"
"""Test-only: ``<point name>=<flag file>``; see :mod:`graphstore.runtime.pause_points`."""


def pause_request(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The pause point a fault test asked for: ``(point name, flag file)``, or None (the normal
    case). Malformed values are ignored: the variable is a test hook, never user configuration."""
    raw = environ.get(PAUSE_AT, "")
    name, sep, flag = raw.partition("=")
    return (name, flag) if sep and name and flag else None


RAY_AUTH_TOKEN = "RAY_AUTH_TOKEN"
RAY_AUTH_MODE = "RAY_AUTH_MODE"
"""Ray's own variables: the token of the Ray cluster a process starts or joins, and Ray's
authentication mode (``token``) (replicated mode, graphstore.modes.replicated.cluster). Ray reads the
mode when it is imported (measured, ray 2.60: set later, a driver connects without its token and
is refused), the token when it connects."""


def ray_node_environ(token: str) -> dict[str, str]:
    """This process's environment plus token authentication with ``token``: the environment of
    a ``ray start`` node process (which passes it on to every Ray process it starts)."""
    import os

    return {**os.environ, RAY_AUTH_MODE: "token", RAY_AUTH_TOKEN: token}


def use_ray_token(token: str, *, keep_existing: bool = False) -> str:
    """Make ``token`` the Ray token of this process, with token authentication on; call it
    before this process first imports ``ray``. With ``keep_existing``, a token the environment
    already has wins. Returns the token in force."""
    import os
    import sys

    if "ray" in sys.modules and os.environ.get(RAY_AUTH_MODE) != "token":
        from graphstore.runtime.errors import RuntimeFailure

        raise RuntimeFailure("ray was imported before its token was set: replicated mode starts "
                             "Ray itself (import nothing of ray before the stage runs)")
    if not (keep_existing and os.environ.get(RAY_AUTH_TOKEN)):
        os.environ[RAY_AUTH_TOKEN] = token
    os.environ[RAY_AUTH_MODE] = "token"
    return os.environ[RAY_AUTH_TOKEN]
