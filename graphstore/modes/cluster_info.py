"""What a compute worker gets from its machine's parent, the same in every mode: ``ClusterInfo``
(its cluster) and a ``DatasetSource`` (what it opens its dataset from).

Each mode's cluster description implements it: graph store and colocated,
graphstore.modes.graph_store.info.GraphStoreInfo (colocated: no storage machines); replicated,
graphstore.modes.replicated.cluster.ReplicatedInfo. A compute machine's parent
(graphstore.modes.machine) hands one to every worker it runs, pointed at the session the worker
serves (``for_session``); the worker joins with ``init_compute_process(local_rank, info)``, which
runs the mode's own ``join`` (and ``shutdown_compute_process`` its ``leave``), so the trainer and
the inferencer never ask which mode they run in.

Invariants: ranks are ``machine_index * num_processes_per_compute + local_rank`` in every mode;
``session_index`` < ``num_server_sessions``; the description is frozen (``for_session`` returns a
new one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from graphstore.runtime.devices import ComputeDevice, DevicePlan
from graphstore.runtime.heartbeat import Heartbeat
from graphstore.runtime.ports import PortHold

if TYPE_CHECKING:
    from graphstore.config import RuntimeConfig
    from graphstore.dataset.graph_dataset import GraphDataset


class ClusterInfo(Protocol):
    """See the module docs. Read-only: every member is a property of a frozen record."""

    @property
    def num_compute_nodes(self) -> int: ...

    @property
    def num_processes_per_compute(self) -> int: ...

    @property
    def num_compute_processes(self) -> int: ...

    @property
    def num_server_sessions(self) -> int: ...

    @property
    def session_index(self) -> int: ...

    @property
    def machine_index(self) -> int:
        """This compute machine's index among the compute machines."""

    @property
    def gpus_per_compute_machine(self) -> int: ...

    @property
    def is_local(self) -> bool: ...

    @property
    def runtime(self) -> RuntimeConfig: ...

    def compute_rank(self, local_rank: int) -> int:
        """Global rank of ``local_rank`` on this machine among every compute process."""

    def for_session(self, session_index: int) -> ClusterInfo:
        """The same cluster, pointed at session ``session_index``."""

    def join(self, rank: int, world: int, plan: DevicePlan) -> ComputeProcess:
        """The mode's join of compute process ``rank`` of ``world`` (its groups, its device, its
        peers' heartbeats). Called by ``init_compute_process`` only."""

    def leave(self, process: ComputeProcess) -> float:
        """The mode's leave of ``process`` (what ``join`` returned); returns the seconds its RPC
        shutdown took. Called by ``shutdown_compute_process`` only."""


class DatasetSource(Protocol):
    """Picklable; handed to every worker a machine's parent spawns (graphstore.modes.machine),
    which opens its dataset with it after joining: graph store, a handle that opens a
    ``RemoteDistDataset`` per worker; colocated, the machine's partition, built once; replicated,
    the ``ReplicatedDataset`` over the graph file."""

    def open(self, info: ClusterInfo, local_rank: int) -> GraphDataset: ...


@dataclass
class ComputeProcess:
    """A joined compute process (one per process, graphstore.modes.graph_store.compute): what its
    mode's ``join`` built. ``heartbeat``: the storage servers' (graph store only)."""

    info: ClusterInfo
    rank: int
    world_size: int
    heartbeat: Heartbeat | None
    device: ComputeDevice
    loaders_created: int = 0  # colocated loaders agree on ports by creation order
    port_hold: PortHold = field(default_factory=PortHold)  # the loader ports rank 0 handed out


__all__ = ["ClusterInfo", "ComputeProcess", "DatasetSource"]
