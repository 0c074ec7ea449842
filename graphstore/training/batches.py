"""Turn a sampled GLT batch (``Data`` or ``HeteroData``) into the model's dict inputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

EdgeTypeTuple = tuple[str, str, str]


@dataclass(frozen=True)
class BatchView:
    x: dict[str, torch.Tensor]
    edge_index: dict[EdgeTypeTuple, torch.Tensor]
    num_nodes: dict[str, int]
    node_ids: dict[str, torch.Tensor]  # global (dense) id of each local node, per type


def view(batch, homo_types: tuple[str, EdgeTypeTuple] | None) -> BatchView:
    """``homo_types`` is ``(node_type, edge_type)`` for a homogeneous graph, else None."""
    if homo_types is not None:
        nt, et = homo_types
        x = {nt: batch.x} if getattr(batch, "x", None) is not None else {}
        return BatchView(x, {et: batch.edge_index}, {nt: int(batch.node.numel())}, {nt: batch.node})
    x, ei, n, ids = {}, {}, {}, {}
    for nt in batch.node_types:
        store = batch[nt]
        if "node" not in store:
            continue
        ids[nt] = store.node
        n[nt] = int(store.node.numel())
        if "x" in store and store.x is not None:
            x[nt] = store.x
    for et in batch.edge_types:
        if "edge_index" in batch[et]:
            ei[et] = batch[et].edge_index
    return BatchView(x, ei, n, ids)


def without_pair_edges(edge_index: dict[EdgeTypeTuple, torch.Tensor], anchor_type: str,
                       label_type: str, pairs: torch.Tensor,
                       num_nodes: dict[str, int]) -> dict[EdgeTypeTuple, torch.Tensor]:
    """``edge_index`` without any edge joining a pair of ``pairs`` (``[2, P]`` local indices:
    row 0 into ``anchor_type``'s nodes, row 1 into ``label_type``'s), in either direction and in
    every edge type between the two node types (the supervision type and its reverse)."""
    out = {}
    for et, ei in edge_index.items():
        src, _, dst = et
        keys = []
        n_dst = max(1, num_nodes.get(dst, 0))
        if (src, dst) == (anchor_type, label_type):
            keys.append(pairs[0] * n_dst + pairs[1])
        if (src, dst) == (label_type, anchor_type):
            keys.append(pairs[1] * n_dst + pairs[0])
        if not keys or ei.numel() == 0:
            out[et] = ei
            continue
        drop = torch.isin(ei[0] * n_dst + ei[1], torch.cat(keys))
        out[et] = ei[:, ~drop]
    return out


def seed_count(batch, node_type: str, homo: bool) -> int:
    """How many leading nodes of ``node_type`` are the loader's seeds."""
    return int(batch.batch_size if homo else batch[node_type].batch_size)


def finish_epoch(loader) -> int:
    """Consume the rest of the current epoch of a GLT loader; returns how many batches that took.

    Never ``for _ in loader``: ``iter()`` on a GLT loader *starts a new epoch* on every server,
    so the unread rest of the current one stays in the server's sample buffer; a few such epochs
    fill it, the sampling workers block, and the next epoch start hangs the server (seen here as a
    300 s RPC timeout in ``iter(train)``). Only ``next()`` reads the current epoch.
    """
    count = 0
    while True:
        try:
            next(loader)
        except StopIteration:
            return count
        count += 1


class EpochStream:
    """Endless batches from a GLT loader, epoch after epoch, at most ``per_epoch`` of each.

    ``per_epoch`` caps an epoch at the batch count every rank has (DDP steps in lockstep); the
    unread rest of a capped epoch is read with :func:`finish_epoch` before the next one starts.
    None: every batch of every epoch (random negatives). ``close()`` shuts the loader down.
    """

    def __init__(self, loader, per_epoch: int | None = None) -> None:
        self.loader, self.per_epoch = loader, per_epoch
        self._taken: int | None = None  # batches read from the current epoch; None: no epoch
        self.epochs_done = 0  # epochs read to their end (or to the cap)

    def epoch_full(self) -> bool:
        """True when the current epoch has given all it will give (the next ``next`` starts a
        new one) under the cap; epochs without a cap end only when their loader says so."""
        return self._taken is not None and self.per_epoch is not None and self._taken >= self.per_epoch

    def next(self):
        for _ in range(2):
            if self.epoch_full():
                finish_epoch(self.loader)
                self._taken = None
                self.epochs_done += 1
            if self._taken is None:
                iter(self.loader)  # starts one epoch (the only iter() call per epoch)
                self._taken = 0
            try:
                batch = next(self.loader)
            except StopIteration:
                empty = self._taken == 0
                self._taken = None
                self.epochs_done += 0 if empty else 1
                if empty:
                    break
                continue
            self._taken += 1
            return batch
        from graphstore.runtime.errors import RuntimeFailure

        raise RuntimeFailure(f"{type(self.loader).__name__} yields no batches: its input is empty "
                             "or smaller than one batch on every storage rank")

    def close(self) -> None:
        """Shut the loader down without reading the rest of the epoch (that could be most of an
        epoch of a large graph): the server stops its sampling workers (GLT joins each for up to
        5 s, then terminates it) and drops the unread samples."""
        self._taken = None
        self.loader.shutdown()
