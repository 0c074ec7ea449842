"""The partition stage's library side: raw tables -> shard set. The local engine is
:mod:`.engine`, the BigQuery engine :mod:`.bigquery_engine`; :func:`partition_task` runs the one
the config picks."""

from graphstore.partition.configured import partition_task
from graphstore.partition.engine import partition_graph
from graphstore.partition.tuning import PartitionTuning

__all__ = ["PartitionTuning", "partition_graph", "partition_task"]
