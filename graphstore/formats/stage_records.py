"""A pipeline task's record, ``<run-dir>/_stages/<name>.json``: what ``pipeline run`` prints and
what a failed run is resumed from.

One file per task (``name``: the stage, or ``export-<node_type>`` for each export task), written
by that task only (pipeline.stages.recorded; the trainer's run report reads the others): with
status ``running`` when the task starts (a crash leaves it so), then once more with ``ok`` or
``failed``, its seconds and, when failed, the error's last 4 000 characters. Fields a stage does not produce keep their defaults and are left
out of the file, so records written before a field existed still read. A :class:`StageRecord` is
frozen: a task's outcome is built with :meth:`StageRecord.with_` and written whole.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from graphstore.formats.run_paths import RunPaths
from graphstore.io import uris

STAGES = ("partition", "train", "infer", "export")
"""The pipeline's stages, in the order they run."""
STATUSES = ("running", "ok", "failed")


@dataclass(frozen=True)
class StageRecord:
    """One pipeline task's record (module docs)."""

    stage: str
    """One of :data:`STAGES`."""
    status: str = "running"
    """One of :data:`STATUSES`."""
    node_type: str = ""
    """Export tasks: the node type exported."""
    seconds: float | None = None
    """Wall time of the task, once it ended."""
    error: str = ""
    """A failed task's error (its last 4 000 characters)."""
    custom_job: str = ""
    """Vertex AI: the CustomJob's resource name, written as soon as the job exists."""
    display_name: str = ""
    """Vertex AI: the CustomJob's display name."""
    processes: int | None = None
    """Local graph-store stages: how many processes the launcher ran."""
    partitions: int | None = None
    """Partition: the shard set's partition count."""
    edges: int | None = None
    """Partition: stored edges over every edge type."""
    graph_files: Mapping[str, Any] = field(default_factory=dict)
    """Partition in replicated mode: the graph and features files written
    (graphstore.modes.replicated.run_files.write_run_graph_files)."""
    metrics: Mapping[str, Any] = field(default_factory=dict)
    """Train: the test metrics of ``checkpoint/metrics.json``."""
    report: str = ""
    """Train: the run report's URI, when the trainer wrote one."""
    rows: int | None = None
    """Export: rows loaded."""
    table: str = ""
    """Export: the table loaded into."""
    where: str = ""
    """Export: the warehouse (a BigQuery project or the local warehouse's folder)."""

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"StageRecord: stage {self.stage!r} is not one of {STAGES}")
        if self.status not in STATUSES:
            raise ValueError(f"StageRecord: status {self.status!r} is not one of {STATUSES}")

    @property
    def name(self) -> str:
        """The record's file name without ``.json``: the stage, ``export-<node_type>`` for an
        export task."""
        return f"export-{self.node_type}" if self.stage == "export" else self.stage

    def with_(self, **changes: Any) -> StageRecord:
        """A copy with ``changes`` (TypeError for a field that does not exist)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        """The file's text: every field that differs from its default, ``stage`` and ``status``
        always."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
                else f.default
            if f.name in ("stage", "status") or value != default:
                out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return json.dumps(out, indent=1)

    @classmethod
    def from_json(cls, text: str, where: str) -> StageRecord:
        """The record in ``text`` (read from ``where``); ValueError naming ``where`` when it is not
        a record. Keys this version does not know are ignored."""
        try:
            data = json.loads(text)
            known = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in data.items() if k in known})
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"{where}: not a stage record ({exc})") from None


def write_record(run_dir: str, record: StageRecord) -> None:
    """Write ``record`` as ``_stages/<record.name>.json`` of ``run_dir`` (replacing it)."""
    uris.write_text(RunPaths(run_dir).stage_record(record.name), record.to_json())


def read_records(run_dir: str, *, skip_unreadable: bool = False) -> list[StageRecord]:
    """Every ``_stages/*.json`` record of a run, in stage order (exports by node type); none when
    the run has no records yet. A file that is not a record (one being written, on a store
    without atomic writes) raises ValueError naming it, or is left out with
    ``skip_unreadable``."""
    paths = RunPaths(run_dir)
    records = []
    for name in uris.list_names(paths.stage_records):
        if name.endswith(".json"):
            uri = uris.join(paths.stage_records, name)
            try:
                records.append(StageRecord.from_json(uris.read_text(uri), uri))
            except (ValueError, OSError):
                if not skip_unreadable:
                    raise
    return sorted(records, key=lambda r: (STAGES.index(r.stage), r.node_type))
