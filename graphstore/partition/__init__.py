"""The partition stage's library side: raw tables -> shard set. See :mod:`.engine`."""

from graphstore.partition.engine import partition_graph
from graphstore.partition.tuning import PartitionTuning

__all__ = ["PartitionTuning", "partition_graph"]
