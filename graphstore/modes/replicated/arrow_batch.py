"""A sampled subgraph as one Arrow row, and back to PyG (``collate_to_pyg``) without copying.

Row layout (one row = one mini-batch; the columns of a dataset never change between rows):

=======================  ==========================================  =========================
column                   type                                        holds
=======================  ==========================================  =========================
``n_id/<type>``          list<int64>                                 global node ids, seeds first
``num_seeds/<type>``     int64                                       how many leading ids are seeds
``x/<type>``             list<fixed_size_list<float32, dim>>         features (types that have them)
``edge_index/<s__r__d>`` list<int64>, 2E values: row E, then col E   local indices, message types
``e_id/<s__r__d>``       list<int64>                                 stored edge ids
``y_positive``           list<int64>, 2P values: anchors, labels     link datasets: local indices
``y_negative``           list<int64>                                 link datasets: local indices
``meta``                 string (JSON)                               homogeneous, supervision type
=======================  ==========================================  =========================

``collate_to_pyg`` of a one-row batch (``iter_batches(batch_size=1, batch_format="pyarrow")``)
makes every tensor a view of the Arrow buffers (``torch.from_numpy`` of a zero-copy numpy
view): no copy. Those tensors are read-only: never modify them in place. A batch of k > 1 rows
becomes one graph, the disjoint union of the k subgraphs with every subgraph's seeds first
(that costs copies of the batch, never of the graph).

Batches are graphstore.dataset.subgraph's (the names the default trainer reads from GLT
batches); ``subgraph_to_pyg`` (re-exported here) builds the same batch without Arrow.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError
from graphstore.modes.replicated.graph_file import readonly_tensor
from graphstore.dataset.subgraph import SampledSubgraph, subgraph_to_pyg, to_pyg

EdgeTypeTuple = tuple[str, str, str]


def _list(values: np.ndarray) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), pa.array(values))


def encode(sub: SampledSubgraph, *, node_types: list[str], message_types: list[EdgeTypeTuple],
           x: dict[str, torch.Tensor], homogeneous: bool,
           link: tuple[EdgeTypeTuple, torch.Tensor, torch.Tensor] | None = None) -> pa.Table:
    """One row holding ``sub`` (features ``x`` per node type; ``link``: (supervision type,
    ``[2, P]`` positives, ``[K]`` negatives) in local indices)."""
    cols: dict[str, pa.Array] = {}
    for nt in node_types:
        ids = sub.node.get(nt, torch.empty(0, dtype=torch.long))
        cols[f"n_id/{nt}"] = _list(ids.numpy())
        cols[f"num_seeds/{nt}"] = pa.array([sub.num_seeds.get(nt, 0)], pa.int64())
        if nt in x:
            feats = x[nt].numpy()
            inner = pa.FixedSizeListArray.from_arrays(pa.array(feats.reshape(-1)), feats.shape[1])
            cols[f"x/{nt}"] = pa.ListArray.from_arrays(pa.array([0, len(feats)], pa.int32()), inner)
    for mt in message_types:
        name = str(EdgeType(src_node_type=mt[0], relation=mt[1], dst_node_type=mt[2]))
        ei = sub.edge_index.get(mt, torch.empty((2, 0), dtype=torch.long))
        cols[f"edge_index/{name}"] = _list(ei.reshape(-1).numpy())
        cols[f"e_id/{name}"] = _list(sub.edge_id.get(mt, torch.empty(0, dtype=torch.long)).numpy())
    meta: dict[str, Any] = {"homogeneous": homogeneous, "supervision_edge_type": None}
    if link is not None:
        sup, pos, neg = link
        cols["y_positive"] = _list(pos.reshape(-1).numpy())
        cols["y_negative"] = _list(neg.numpy())
        meta["supervision_edge_type"] = list(sup)
    cols["meta"] = pa.array([json.dumps(meta)], pa.string())
    return pa.table(cols)


def _flat(column: pa.ChunkedArray | pa.Array, depth: int = 1) -> np.ndarray:
    """The values of a one-row list column as a zero-copy numpy view."""
    arr = column
    if isinstance(column, pa.ChunkedArray):  # a one-row slice is one chunk: no copy
        chunks = [c for c in column.chunks if len(c)]
        arr = chunks[0] if len(chunks) == 1 else column.combine_chunks()
    for _ in range(depth):
        arr = arr.flatten()
    return arr.to_numpy(zero_copy_only=True)


def _decode_row(table: pa.Table) -> dict[str, Any]:
    """Tensors of a one-row table, every one a view of its Arrow buffers."""
    meta = json.loads(table.column("meta")[0].as_py())
    row: dict[str, Any] = {"meta": meta, "node": {}, "num_seeds": {}, "x": {}, "edge_index": {},
                           "e_id": {}}
    for name in table.column_names:
        kind, _, key = name.partition("/")
        col = table.column(name)
        if kind == "n_id":
            row["node"][key] = readonly_tensor(_flat(col))
        elif kind == "num_seeds":
            row["num_seeds"][key] = int(col[0].as_py())
        elif kind == "x":
            dim = col.type.value_type.list_size
            row["x"][key] = readonly_tensor(_flat(col, 2).reshape(-1, dim))
        elif kind in ("edge_index", "e_id"):
            et = EdgeType.parse(key).as_tuple()
            values = readonly_tensor(_flat(col))
            row[kind][et] = values.view(2, -1) if kind == "edge_index" else values
        elif kind in ("y_positive", "y_negative"):
            values = readonly_tensor(_flat(col))
            row[kind] = values.view(2, -1) if kind == "y_positive" else values
    return row


def _merge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The disjoint union of decoded rows, every row's seeds first (copies the batch)."""
    out: dict[str, Any] = {"meta": rows[0]["meta"], "node": {}, "num_seeds": {}, "x": {},
                           "edge_index": {}, "e_id": {}}
    new_index: list[dict[str, torch.Tensor]] = [{} for _ in rows]
    for nt in rows[0]["node"]:
        seeds = [r["node"][nt][:r["num_seeds"][nt]] for r in rows]
        rest = [r["node"][nt][r["num_seeds"][nt]:] for r in rows]
        total_seeds = sum(len(s) for s in seeds)
        s_off = r_off = 0
        for i, (s, rs) in enumerate(zip(seeds, rest)):
            new_index[i][nt] = torch.cat([torch.arange(s_off, s_off + len(s)),
                                          torch.arange(total_seeds + r_off, total_seeds + r_off + len(rs))])
            s_off, r_off = s_off + len(s), r_off + len(rs)
        out["node"][nt] = torch.cat(seeds + rest)
        out["num_seeds"][nt] = total_seeds
        if nt in rows[0]["x"]:
            out["x"][nt] = torch.cat([r["x"][nt][:r["num_seeds"][nt]] for r in rows]
                                     + [r["x"][nt][r["num_seeds"][nt]:] for r in rows])
    for et in rows[0]["edge_index"]:
        src, _, dst = et
        out["edge_index"][et] = torch.cat(
            [torch.stack([new_index[i][src][r["edge_index"][et][0]], new_index[i][dst][r["edge_index"][et][1]]])
             for i, r in enumerate(rows)], dim=1)
        out["e_id"][et] = torch.cat([r["e_id"][et] for r in rows])
    if "y_positive" in rows[0]:
        anchor, _, label = rows[0]["meta"]["supervision_edge_type"]
        out["y_positive"] = torch.cat([torch.stack([new_index[i][anchor][r["y_positive"][0]],
                                                    new_index[i][label][r["y_positive"][1]]])
                                       for i, r in enumerate(rows)], dim=1)
        out["y_negative"] = torch.cat([new_index[i][label][r["y_negative"]]
                                       for i, r in enumerate(rows)])
    return out


def collate_to_pyg(batch: pa.Table | pa.RecordBatch) -> Any:
    """A ``Data`` (homogeneous) or ``HeteroData`` from an Arrow batch of sampled rows (see the
    module docs: zero-copy for one row)."""
    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    if not isinstance(batch, pa.Table) or "meta" not in batch.column_names:
        raise UsageError("collate_to_pyg takes the Arrow batches of create_sampling_dataset: "
                         "dataset.iter_batches(batch_size=1, batch_format=\"pyarrow\"), got "
                         f"{type(batch).__name__}")
    if batch.num_rows == 0:
        raise UsageError("collate_to_pyg: the batch has no rows")
    rows = [_decode_row(batch.slice(i, 1)) for i in range(batch.num_rows)]
    return to_pyg(rows[0] if len(rows) == 1 else _merge(rows))


__all__ = ["collate_to_pyg", "encode", "subgraph_to_pyg"]
