"""Numbering a node type in BigQuery: raw ids -> dense ids, without a single-worker sort.

The result is the rule of the shard format (graphstore.formats.shards.format, NodeRanges):
rank ``r`` is the raw id's position in ascending order (strings: by code point, which is UTF-8
byte order, as the local engine sorts), and goes to partition ``r MOD P`` as dense id
``bounds[r MOD P] + DIV(r, P)``. The same raw ids give the same dense ids as the local engine.

One global ``ROW_NUMBER() OVER (ORDER BY raw_id)`` would sort every id on one BigQuery worker.
Instead (one statement, :func:`numbering_sql`):
  1. ``APPROX_QUANTILES(raw_id, B)`` gives ``B - 1`` cut points (B = :func:`bucket_count`);
  2. ``RANGE_BUCKET`` puts each id in one of ``B`` buckets; buckets are ordered like their ids
     (every id of bucket ``k`` is below every id of bucket ``k + 1``), whatever the cuts'
     accuracy: approximate cuts make buckets uneven, never wrong;
  3. a bucket's first rank is the count of the buckets before it (a running sum over ``B``
     counts), and ``ROW_NUMBER()`` within the bucket adds the rest: each worker sorts one bucket.

Checks before numbering (:func:`number_from_table`): the table is not empty, no null id, no
duplicate id; each failure is an InputDataError naming the table, the column and an example
(BigQuery tables have no row order, so there is no row number to name). Ids numbered from edge
endpoints (a type without a node table) are the distinct non-null endpoints (a null endpoint is
the edge step's error, as in the local engine).

The output is the scratch table ``gsp_<tag>_ids_<node type>``: ``(int_id INT64, part INT64,
raw_id)``, one row per node.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Sequence

from graphstore.formats.shards.format import NodeRanges
from graphstore.partition.bigquery_jobs import BigQueryJobs, SourceColumn, quoted
from graphstore.runtime.errors import InputDataError

log = logging.getLogger(__name__)
IDS_PER_BUCKET = 4_000_000
"""Ids one BigQuery worker sorts (step 3 of the module docs): a few seconds of one slot."""
MAX_BUCKETS = 10_000
"""APPROX_QUANTILES' limit is 100 000 quantiles; 10 000 buckets of 4 M ids is 40 B ids."""


@dataclass(frozen=True)
class NumberedNodes:
    """A node type numbered in BigQuery: ``table`` (``project.dataset.table``) holds
    ``(int_id, part, raw_id)`` for its ``ranges.count`` nodes; ``sql_type`` is the raw ids'
    BigQuery type (``INT64`` or ``STRING``)."""

    node_type: str
    table: str
    ranges: NodeRanges
    sql_type: str


def bucket_count(count: int, ids_per_bucket: int = IDS_PER_BUCKET) -> int:
    """Buckets for ``count`` ids: ``ceil(count / ids_per_bucket)``, at least 1, at most
    :data:`MAX_BUCKETS`."""
    return max(1, min(MAX_BUCKETS, -(-count // ids_per_bucket)))


def dense_of_rank_sql(ranges: NodeRanges, rank: str) -> str:
    """BigQuery SQL of ``NodeRanges.dense_of_rank`` over the INT64 expression ``rank``."""
    a, c = divmod(ranges.count, ranges.num_partitions)
    p = f"MOD(({rank}), {ranges.num_partitions})"
    return f"({p} * {a} + LEAST({p}, {c}) + DIV(({rank}), {ranges.num_partitions}))"


def numbering_sql(ids_sql: str, ranges: NodeRanges, buckets: int) -> str:
    """The query of ``(int_id, part, raw_id)`` for the ids of the query ``ids_sql`` (one
    column ``raw_id``, no null, no duplicate) by the module docs' steps."""
    P = ranges.num_partitions
    return f"""
WITH ids AS ({ids_sql}),
cuts AS (
  SELECT ARRAY(SELECT q FROM UNNEST(APPROX_QUANTILES(raw_id, {buckets})) AS q WITH OFFSET o
               WHERE o BETWEEN 1 AND {buckets - 1} ORDER BY o) AS c
  FROM ids),
bucketed AS (SELECT raw_id, RANGE_BUCKET(raw_id, (SELECT c FROM cuts)) AS bucket FROM ids),
sizes AS (SELECT bucket, COUNT(*) AS n FROM bucketed GROUP BY bucket),
starts AS (SELECT bucket, SUM(n) OVER (ORDER BY bucket) - n AS start FROM sizes),
ranked AS (
  SELECT b.raw_id,
         s.start + ROW_NUMBER() OVER (PARTITION BY b.bucket ORDER BY b.raw_id) - 1 AS r
  FROM bucketed AS b JOIN starts AS s ON b.bucket = s.bucket)
SELECT {dense_of_rank_sql(ranges, 'r')} AS int_id, MOD(r, {P}) AS part, raw_id FROM ranked"""


def id_check_sql(ref: str, column: str) -> str:
    """The first statement on a node table ``ref`` (``project.dataset.table``): its rows, null
    ids and distinct ids of ``column``. It reads only the source table, so ``pipeline plan`` can
    dry-run it before the run (pipeline/bigquery_dry_run.py)."""
    col = quoted(column)
    return f"SELECT COUNT(*), COUNTIF({col} IS NULL), COUNT(DISTINCT {col}) FROM {quoted(ref)}"


def number_from_table(jobs: BigQueryJobs, node_type: str, source: SourceColumn,
                      num_partitions: int, ids_per_bucket: int = IDS_PER_BUCKET
                      ) -> NumberedNodes:
    """Check and number the ids of a node table (module docs)."""
    t0 = time.perf_counter()
    col, ref = quoted(source.column), quoted(source.ref)
    ((n, nulls, distinct),) = jobs.run(f"checking the ids of node type {node_type!r}",
                                       id_check_sql(source.ref, source.column))
    if n == 0:
        raise InputDataError(f"{source.uri}: node table for {node_type!r} is empty")
    if nulls:
        raise InputDataError(f"{source.uri}: column {source.column!r}: null id ({nulls} null(s) "
                             "in total)")
    if distinct != n:
        ((raw, times),) = jobs.run(
            f"finding a duplicate id of node type {node_type!r}",
            f"SELECT {col}, COUNT(*) AS c FROM {ref} GROUP BY {col} HAVING c > 1 "
            f"ORDER BY {col} LIMIT 1")
        raise InputDataError(f"{source.uri}: column {source.column!r}: duplicate node id "
                             f"{str(raw)!r} ({times} rows; {n - distinct} duplicate row(s) in "
                             "total)")
    out = _number(jobs, node_type, f"SELECT {col} AS raw_id FROM {ref}", int(n), num_partitions,
                  source.sql_type, ids_per_bucket)
    log.info("numbered %d %s nodes in BigQuery in %.1f s", n, node_type, time.perf_counter() - t0)
    return out


def number_from_edges(jobs: BigQueryJobs, node_type: str, endpoints: Sequence[SourceColumn],
                      num_partitions: int, ids_per_bucket: int = IDS_PER_BUCKET
                      ) -> NumberedNodes:
    """Number the distinct non-null ids of the edge columns ``endpoints`` (module docs); they
    must share one type."""
    kinds = {e.sql_type for e in endpoints}
    if len(kinds) != 1:
        raise InputDataError(f"node type {node_type!r}: its edge columns disagree on the id type: "
                             + ", ".join(f"{e.uri} {e.column!r} {e.sql_type}" for e in endpoints))
    union = " UNION ALL ".join(f"SELECT {quoted(e.column)} AS raw_id FROM {quoted(e.ref)}"
                               for e in endpoints)
    ids_sql = f"SELECT DISTINCT raw_id FROM ({union}) WHERE raw_id IS NOT NULL"
    ((n,),) = jobs.run(f"counting the ids of node type {node_type!r} in its edges",
                       f"SELECT COUNT(*) FROM ({ids_sql})")
    return _number(jobs, node_type, ids_sql, int(n), num_partitions, kinds.pop(), ids_per_bucket)


def _number(jobs: BigQueryJobs, node_type: str, ids_sql: str, count: int, num_partitions: int,
            sql_type: str, ids_per_bucket: int) -> NumberedNodes:
    ranges = NodeRanges(count, num_partitions)
    table = jobs.create_scratch(f"numbering node type {node_type!r}", f"ids_{node_type}",
                                numbering_sql(ids_sql, ranges, bucket_count(count, ids_per_bucket)),
                                partitions=num_partitions)
    return NumberedNodes(node_type=node_type, table=table, ranges=ranges, sql_type=sql_type)
