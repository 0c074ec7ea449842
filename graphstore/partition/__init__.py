"""The partition stage's library side: raw tables -> shard set. See :mod:`.engine`."""

from graphstore.partition.engine import partition_graph

__all__ = ["partition_graph"]
