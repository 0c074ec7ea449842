"""Where the dataset mode is chosen between graph store and colocated: one :class:`DatasetSource`
per compute machine (replicated mode is chosen a step above, in graphstore.modes.machine, and
its source is a graphstore.modes.replicated.dataset.ReplicatedDataset).

A compute machine's parent calls :func:`dataset_source` once, before it spawns its workers, and
hands the source to every worker, which opens its :class:`~graphstore.dataset.graph_dataset.GraphDataset`
with it (after ``init_compute_process``). This module sits above both modes (graph store:
graphstore.modes.graph_store.remote_dataset; colocated: graphstore.modes.colocated.dataset), which only implement the contract
of graphstore.dataset.graph_dataset; nothing below the trainer and the inferencer picks a mode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from graphstore.dataset.graph_dataset import GraphDataset

if TYPE_CHECKING:
    from graphstore.modes.cluster_info import ClusterInfo
    from graphstore.modes.graph_store.info import GraphStoreInfo


class DatasetSource(Protocol):
    """Picklable; handed to every worker a machine spawns, which opens its dataset with it."""

    def open(self, info: ClusterInfo, local_rank: int) -> GraphDataset: ...


def dataset_source(info: GraphStoreInfo, shards_uri: str, storage_args: Any) -> DatasetSource:
    """The one place the mode is chosen, in a compute machine's parent before it spawns workers:
    colocated (``info.colocated``), this machine's partition, built once and shared by its
    workers; graph store, a handle that opens a ``RemoteDistDataset`` in each worker."""
    if info.colocated:
        from graphstore.modes.colocated.dataset import DistDataset

        return DistDataset.from_shards(shards_uri, info.machine_index, storage_args)
    from graphstore.modes.graph_store.remote_dataset import RemoteSource

    return RemoteSource()
