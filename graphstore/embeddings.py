"""The embeddings format (schema_version 1): what the inferencer writes and export reads.

Per node type, under ``<run-dir>/embeddings/<node_type>/``::

    part-<rank>-of-<world>.parquet   one per compute rank: int_id INT64 (dense id),
                                     embedding LIST<FLOAT32> (all of one length, ``dim``)
    _SUCCESS                         JSON, written last and only when every node of the type
                                     appears exactly once over all parts:
                                     {schema_version, node_type, count, dim, files,
                                      checkpoint_step, finished_at (UTC ISO 8601), seconds}

A folder without ``_SUCCESS`` is incomplete (a failed or running attempt) and must not be read.
This module imports neither torch nor GLT.
"""

from __future__ import annotations

import json

from graphstore import uris
from graphstore.errors import RuntimeFailure

SCHEMA_VERSION = 1
SUCCESS = "_SUCCESS"


def embeddings_uri(run_dir: str, node_type: str) -> str:
    """Where the embeddings of ``node_type`` go: ``<run-dir>/embeddings/<node_type>``."""
    return uris.join(run_dir, "embeddings", node_type)


def shard_name(rank: int, world: int) -> str:
    """File name of compute rank ``rank``'s part (of ``world`` ranks)."""
    return f"part-{rank:05d}-of-{world:05d}.parquet"


def is_shard_name(name: str) -> bool:
    return name.startswith("part-") and name.endswith(".parquet")


def read_success(run_dir: str, node_type: str) -> dict:
    """The ``_SUCCESS`` marker of a node type's embeddings; RuntimeFailure when it is missing."""
    uri = uris.join(embeddings_uri(run_dir, node_type), SUCCESS)
    if not uris.exists(uri):
        raise RuntimeFailure(f"no complete embeddings for node type {node_type!r}: {uri} is missing "
                             "(run the infer stage; a failed or interrupted run leaves no marker)")
    marker = json.loads(uris.read_text(uri))
    if marker.get("schema_version") != SCHEMA_VERSION:
        raise RuntimeFailure(f"{uri}: schema_version {marker.get('schema_version')!r}, this version "
                             f"reads {SCHEMA_VERSION}; rerun the infer stage")
    return marker
