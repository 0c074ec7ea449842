"""A stand-in inferencer for the crash-safety tests: writes one attempt of a node type's
embeddings through graphstore.formats.embeddings exactly as the inferencer's rank 0 publishes them (parts
in a new attempt folder, then ``_SUCCESS``), with values ``scale * [i, i+1, ...]`` for dense id i.

    python tests/integration/write_embeddings.py RUN_DIR NODE_TYPE COUNT DIM SCALE
"""

from __future__ import annotations

import datetime
import sys

import numpy as np

from graphstore.io import uris
from graphstore.formats.embeddings import (EmbeddingsMarker, embeddings_uri, new_attempt_name,
                                   publish_success, shard_name, write_part)


def main(run_dir: str, node_type: str, count: int, dim: int, scale: float) -> None:
    out = embeddings_uri(run_dir, node_type)
    attempt = new_attempt_name()
    ids = np.arange(count, dtype=np.int64)
    emb = scale * (ids[:, None] + np.arange(dim)[None, :]).astype(np.float32)
    files = []
    for rank, part in enumerate(np.array_split(ids, 2)):
        name = f"{attempt}/{shard_name(rank, 2)}"
        write_part(uris.join(out, name), part, emb[part])
        files.append(name)
    publish_success(out, EmbeddingsMarker(
        node_type=node_type, count=count, dim=dim, files=tuple(files), checkpoint_step=1,
        finished_at=datetime.datetime.now(datetime.timezone.utc), seconds=0.0))

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
