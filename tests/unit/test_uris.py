"""Local-path side of graphstore.io.uris (the gs:// side needs the GCS emulator: issue 5)."""

from __future__ import annotations

import pytest

from graphstore.io import uris
from graphstore.runtime.errors import InputDataError


def test_read_text_put_file_and_list_names(tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("hello")
    dest = str(tmp_path / "out" / "a.txt")
    uris.put_file(str(src), dest)
    assert uris.read_text(dest) == "hello"
    assert uris.list_names(str(tmp_path / "out")) == ["a.txt"]  # no temporary file left
    assert uris.list_names(str(tmp_path / "missing")) == []
    assert uris.basename("gs://b/runs/r1/") == "r1" and uris.basename(str(tmp_path / "r2")) == "r2"
    with pytest.raises(InputDataError, match="input file not found"):
        uris.read_text(str(tmp_path / "nope.json"))
