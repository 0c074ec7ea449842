"""The embeddings ``_SUCCESS`` marker (graphstore.formats.embeddings.EmbeddingsMarker): what the inferencer
writes is what export reads back, and a marker that is not ours is refused with the fix."""

from __future__ import annotations

import datetime
import json

import pytest

from graphstore.formats.embeddings import (SUCCESS, EmbeddingsMarker, embeddings_uri, publish_success,
                                   read_success)
from graphstore.runtime.errors import RuntimeFailure

WHEN = datetime.datetime(2026, 12, 2, 17, 30, 5, tzinfo=datetime.timezone.utc)


def _marker(**over) -> EmbeddingsMarker:
    fields = dict(node_type="user", count=7, dim=4, checkpoint_step=12, finished_at=WHEN,
                  seconds=3.5, files=("attempt-20261202T173005Z-0a1b2c3d/part-00000-of-00001.parquet",))
    fields.update(over)
    return EmbeddingsMarker(**fields)


def test_a_published_marker_reads_back_equal_and_removes_other_attempts(tmp_path):
    run = str(tmp_path)
    folder = tmp_path / "embeddings" / "user"
    stale = folder / "attempt-20261201T000000Z-ffffffff"
    stale.mkdir(parents=True)
    (stale / "part-00000-of-00001.parquet").write_bytes(b"old")
    marker = _marker()
    publish_success(embeddings_uri(run, "user"), marker)
    assert read_success(run, "user") == marker
    assert not stale.exists()
    raw = json.loads((folder / SUCCESS).read_text())
    assert raw["finished_at"] == "2026-12-02T17:30:05+00:00" and raw["schema_version"] == 2


@pytest.mark.parametrize("edit, says", [
    (lambda m: m.update(files=["../../shards/part_0/nodes.parquet"]), "is not an embeddings part file"),
    (lambda m: m.update(schema_version=9), "schema_version 9"),
    (lambda m: m.pop("count"), "lacks count"),
    (lambda m: m.update(count="many"), "invalid literal"),
    (None, "not a JSON embeddings marker"),
])
def test_a_marker_that_is_not_ours_is_refused(tmp_path, edit, says):
    folder = tmp_path / "embeddings" / "user"
    folder.mkdir(parents=True)
    if edit is None:  # not text at all
        (folder / SUCCESS).write_bytes(b"\xff\xfe")
    else:
        raw = json.loads(_marker().to_json())
        edit(raw)
        (folder / SUCCESS).write_text(json.dumps(raw))
    with pytest.raises(RuntimeFailure, match=says) as err:
        read_success(str(tmp_path), "user")
    assert "rerun the infer stage" in str(err.value)


def test_a_missing_marker_says_to_run_the_infer_stage(tmp_path):
    with pytest.raises(RuntimeFailure, match="run the infer stage"):
        read_success(str(tmp_path), "item")
