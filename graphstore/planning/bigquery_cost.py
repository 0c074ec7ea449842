"""What the BigQuery partition engine's statements read, before they run (``pipeline plan``).

BigQuery bills an on-demand query by the logical bytes of the columns it reads: 8 per INT64 or
FLOAT64 value, 2 + the UTF-8 length per STRING (exports themselves are free). The scratch tables
do not exist before the run, so a dry run cannot price most statements; instead each statement
of graphstore.partition.bigquery_engine is priced here from the source tables' row counts and
column widths (:class:`TableShape`, from each table's metadata), by what it reads:

- node type with a table of N rows: the ids checked (1 scan of the id column) and numbered
  (about 3: quantiles, buckets, ranks); features checked (1 scan) and, when there are some,
  joined to the dense ids once (ids, features, and the numbering's int_id, part, raw_id); the id
  map exported (int_id, raw_id) and the node files (int_id, part, features);
- node type from edges: its endpoint columns read twice (count, then numbering);
- edge type of E rows: the endpoints checked for nulls, weights and features checked, the edges
  mapped (endpoints, values, and both types' int_id, raw_id), counted per partition (part), the
  reverse type written from them (src, dst, values) and counted, labels placed by source (src,
  dst) and counted, every folder exported (src, dst, values, part); a hard-negative type is
  checked, mapped and exported as labels.
Dangling edges cost one more query each when there are some (not counted). These are the same
counts as docs/vertex.md's worked example; an estimate of the statements, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import TaskConfig

PRICE_PER_TIB_USD = 6.25
"""BigQuery's on-demand price per TiB read, US multi-region (Google's pricing page, as of
2026-12; the first TiB each month is free; other regions differ)."""
TIB = 1 << 40
INT = 8


@dataclass(frozen=True)
class TableShape:
    """A source table as its metadata gives it: ``rows`` and the logical bytes per value of each
    column (:func:`column_bytes`)."""

    rows: int
    widths: dict[str, float]

    def width(self, columns: tuple[str, ...]) -> float:
        return sum(self.widths[c] for c in columns)


@dataclass(frozen=True)
class StatementCost:
    """Logical bytes one group of statements reads."""

    purpose: str
    bytes: float


def column_bytes(fields: list[tuple[str, str, bool]], rows: int, table_bytes: int
                 ) -> dict[str, float]:
    """Bytes per value of each column ``(name, GoogleSQL type, repeated)``: 8 for INT64 and
    FLOAT64 (an array: its table's share, below), 1 for BOOL; STRING and arrays share what the
    table's logical size leaves once the fixed-width columns are taken out, evenly."""
    fixed = {n: {"INT64": INT, "FLOAT64": INT, "NUMERIC": 16, "BOOL": 1}.get(t)
             for n, t, repeated in fields if not repeated}
    fixed = {n: w for n, w in fixed.items() if w is not None}
    rest = [n for n, _, _ in fields if n not in fixed]
    left = max(0.0, table_bytes / max(rows, 1) - sum(fixed.values()))
    return {**fixed, **{n: left / len(rest) for n in rest}}


def engine_costs(task: "TaskConfig", shapes: dict[str, TableShape]) -> list[StatementCost]:
    """The engine's statements for ``task``, grouped by node and edge type (module docs);
    ``shapes``: every source table by its ``bq://`` uri."""
    direction = task.trainer.storage.storage_args.sample_edge_direction
    supervision = {str(et) for et in task.supervision_edge_types}
    negatives = {str(neg) for neg in task.hard_negative_edge_types.values()}
    node_tables = {ns.node_type: ns for ns in task.dataset.node_sources}
    id_width: dict[str, float] = {}
    counts: dict[str, float] = {}
    out = []
    for nt in task.graph_metadata.node_types:
        ns = node_tables.get(nt)
        if ns is not None:
            shape = shapes[ns.uri]
            n, w = shape.rows, shape.widths[ns.id_column]
            features = shape.width(ns.feature_columns)
            read = n * (4 * w + features)  # ids checked, numbered; features checked
            if features:
                read += n * (w + features) + n * (2 * INT + w)  # joined once
            read += n * (INT + w) + n * (2 * INT + features)  # id map, node files
        else:
            ends = [(shapes[es.uri], col) for es in task.dataset.edge_sources
                    for col, end in ((es.src_column, es.edge_type.src_node_type),
                                     (es.dst_column, es.edge_type.dst_node_type)) if end == nt]
            n = sum(s.rows for s, _ in ends)  # at most: the distinct ids are fewer
            w = max(s.widths[c] for s, c in ends)
            read = 2 * sum(s.rows * s.widths[c] for s, c in ends) + n * (INT + w) + n * 2 * INT
        id_width[nt], counts[nt] = w, n
        out.append(StatementCost(f"node type {nt!r}: ids numbered, features, id map and node "
                                 "files exported", read))
    for es in task.dataset.edge_sources:
        key, et = str(es.edge_type), es.edge_type
        shape = shapes[es.uri]
        e = shape.rows
        ends = shape.width((es.src_column, es.dst_column))
        values = shape.width(((es.weight_column,) if es.weight_column else ())
                             + es.feature_columns)
        lookups = sum(counts[t] * (INT + id_width[t]) for t in (et.src_node_type,
                                                                   et.dst_node_type))
        if key in negatives:
            read = e * ends * 2 + lookups + e * INT + e * 3 * INT  # checked, mapped, exported
            out.append(StatementCost(f"edge type {key}: hard negatives mapped and exported",
                                     read))
            continue
        stored = 2 * INT + values  # a dense edge as the format stores it
        read = e * ends + e * values + e * (ends + values) + lookups + e * INT  # checked, mapped
        read += e * (stored + INT)  # exported
        reverse = task.dataset.partition.add_reverse_edges and et.src_node_type != et.dst_node_type
        if reverse:
            read += e * stored + e * INT + e * (stored + INT)  # written, counted, exported
        if key in supervision and not (reverse and direction == "in"):
            read += e * 2 * INT + e * INT + e * 3 * INT  # labels placed, counted, exported
        out.append(StatementCost(f"edge type {key}: mapped" + ", reversed" * reverse
                                 + ", exported", read))
    return out


def uses_bigquery_engine(task: "TaskConfig") -> bool:
    """True when a run on Vertex AI (a gs:// run folder) partitions ``task`` in BigQuery."""
    from graphstore.config import partition_engine

    return partition_engine(task.dataset, "gs://run/shards") == "bigquery"


def source_shapes(task: "TaskConfig", client=None) -> dict[str, TableShape]:
    """Every source table's :class:`TableShape` from its metadata (no query runs)."""
    from google.api_core import exceptions as gexc

    from graphstore.io.bigquery_source import parse
    from graphstore.runtime.errors import InputDataError

    out = {}
    for src in (*task.dataset.node_sources, *task.dataset.edge_sources):
        project, dataset, table = parse(src.uri)
        if client is None:
            from graphstore.io.gcp import bigquery_client

            client = bigquery_client(project)
        try:
            meta = client.get_table(f"{project}.{dataset}.{table}")
        except gexc.NotFound:
            raise InputDataError(f"BigQuery table {src.uri} not found") from None
        legacy = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL"}
        fields = [(f.name, legacy.get(f.field_type, f.field_type), f.mode == "REPEATED")
                  for f in meta.schema]
        rows = int(meta.num_rows or 0)
        out[src.uri] = TableShape(rows, column_bytes(fields, rows, int(meta.num_bytes or 0)))
    return out


def _size(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def cost_lines(costs: list[StatementCost]) -> list[str]:
    """The report's lines: each group's bytes, the total and its on-demand price."""
    total = sum(c.bytes for c in costs)
    lines = ["BigQuery engine: logical bytes its statements read (estimated from the source "
             "tables' metadata; graphstore/planning/bigquery_cost.py):"]
    lines += [f"  {_size(c.bytes):>10}  {c.purpose}" for c in costs]
    lines.append(f"  {_size(total):>10}  total = {total / TIB:.6f} TiB, about "
                 f"${total / TIB * PRICE_PER_TIB_USD:.2f} at ${PRICE_PER_TIB_USD} per TiB "
                 "on-demand (US; the first TiB each month is free)")
    return lines
