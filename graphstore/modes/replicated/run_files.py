"""The graph files of a pipeline run in replicated mode: written after partitioning, then copied
to every compute machine's local disk.

Writing (the partition task, pipeline.stages): ``<run>/graph/graph.bin`` and
``<run>/graph/features.bin`` (graphstore.formats.run_paths) from the run's shard set, with the trainer's
storage arguments (its splitter makes the ``train`` view; its ``sample_edge_direction`` is the
shards'). A local run folder gets the files in place (each built beside its path and renamed, so
a reader sees none or a complete one); a ``gs://`` run folder gets them through a local
temporary folder, each uploaded whole (one object upload).

Reading (each compute machine, graphstore.modes.replicated.machine): a local run folder's files are
used where they are (the same path for every process of this machine). From ``gs://``, each file
is downloaded to ``<tmp>/graphstore-graph/<key>/`` (``tmp``: the system's temporary folder, the
same path on every machine of the job, as Ray Data's read tasks need; ``key``: a hash of the run
folder), renamed into place complete and then read back against its section checksums
(``GraphFile.verify``): a damaged copy fails the stage naming the file. The copies are removed
when the machine's stage ends.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from dataclasses import dataclass

from graphstore.io import uris
from graphstore.runtime.errors import UsageError
from graphstore.formats.run_paths import RunPaths

log = logging.getLogger(__name__)
LOCAL_COPY_DIR = "graphstore-graph"


@dataclass(frozen=True)
class LocalGraphFiles:
    """Local paths of a run's graph file and features file (None: the run has none), and
    whether they are copies this machine made (removed by :meth:`remove_copies`)."""

    graph: str
    features: str | None
    copied: bool = False

    def remove_copies(self) -> None:
        if not self.copied:
            return
        for path in (self.graph, self.features):
            if path is not None:
                try:
                    os.remove(path)
                except FileNotFoundError:
                    pass


def write_run_graph_files(task, run_dir: str) -> dict:
    """Write the run's graph and features files from its shards (module docs); returns a
    summary for the stage record: ``graph_file``, ``graph_file_bytes``, ``features_file_bytes``,
    ``graph_file_seconds``."""
    from graphstore.modes.replicated.writer import write_features_file, write_graph_file
    from graphstore.formats.shards.reader import ShardSet

    paths = RunPaths(run_dir)
    t0 = time.perf_counter()
    with ShardSet.open(paths.shards) as shards, tempfile.TemporaryDirectory(prefix="graph-") as tmp:
        remote = uris.is_gcs(run_dir)
        graph = os.path.join(tmp, "graph.bin") if remote else paths.graph_file
        features = os.path.join(tmp, "features.bin") if remote else paths.features_file
        write_graph_file(shards, graph, storage_args=task.trainer.storage.storage_args)
        write_features_file(shards, features)
        sizes = os.path.getsize(graph), os.path.getsize(features)
        if remote:
            uris.put_file(graph, paths.graph_file)
            uris.put_file(features, paths.features_file)
    seconds = time.perf_counter() - t0
    log.info("graph file: %s bytes=%d features_bytes=%d seconds=%.1f", paths.graph_file, sizes[0],
             sizes[1], seconds)
    return {"graph_file": paths.graph_file, "graph_file_bytes": sizes[0],
            "features_file_bytes": sizes[1], "graph_file_seconds": round(seconds, 1)}


def local_copy_dir(run_dir: str) -> str:
    """Where this machine keeps its copies of a ``gs://`` run's graph files (module docs)."""
    key = hashlib.sha256(run_dir.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), LOCAL_COPY_DIR, key)


def local_graph_files(run_dir: str) -> LocalGraphFiles:
    """The run's graph files on this machine's disk (module docs); UsageError naming the file
    when the run has no graph file."""
    from graphstore.modes.replicated.graph_file import FeatureFile, GraphFile

    paths = RunPaths(run_dir)
    if not uris.exists(paths.graph_file):
        raise UsageError(f"no graph file at {paths.graph_file}: the partition stage writes it "
                         "when the resource config's mode is replicated (rerun the run from "
                         "--start-at partition), or write it with `python -m components.graph_file`")
    has_features = uris.exists(paths.features_file)
    if not uris.is_gcs(run_dir):
        return LocalGraphFiles(paths.graph_file, paths.features_file if has_features else None)
    folder = local_copy_dir(run_dir)
    t0 = time.perf_counter()
    files = LocalGraphFiles(os.path.join(folder, "graph.bin"),
                            os.path.join(folder, "features.bin") if has_features else None,
                            copied=True)
    try:
        uris.get_file(paths.graph_file, files.graph)
        GraphFile.open(files.graph, verify=True)
        if files.features is not None:
            uris.get_file(paths.features_file, files.features)
            FeatureFile.open(files.features, verify=True)
    except BaseException:
        files.remove_copies()  # a damaged or partial copy never stays behind
        raise
    log.info("graph file copied to %s and verified in %.1f s", folder, time.perf_counter() - t0)
    return files


__all__ = ["LocalGraphFiles", "write_run_graph_files", "local_graph_files", "local_copy_dir"]
