"""graphstore.io.uris on gs:// against the GCS emulator (the real google-cloud-storage client)."""

from __future__ import annotations

import hashlib
import os

import pytest

from graphstore.io import uris
from graphstore.runtime.errors import InputDataError


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_text_roundtrip_exists_and_list(bucket, gcs):
    base = f"gs://{bucket}/run"
    assert not uris.exists(f"{base}/a.txt")
    uris.write_text(f"{base}/a.txt", "alpha")
    uris.write_text(f"{base}/sub/b.txt", "beta")
    assert uris.exists(f"{base}/a.txt")
    assert uris.read_text(f"{base}/a.txt") == "alpha"
    # the emulator keeps objects as files: what the client wrote is really there
    assert (gcs.root / bucket / "run" / "sub" / "b.txt").read_text() == "beta"
    assert uris.list_names(base) == ["a.txt"]  # files directly under the prefix only
    assert uris.list_names(f"{base}/sub") == ["b.txt"]
    assert uris.list_names(f"gs://{bucket}/nothing") == []


def test_large_file_streams_both_ways(bucket, tmp_path):
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(3 << 20) * 7)  # 21 MiB: a chunked (resumable) upload
    uri = f"gs://{bucket}/big/big.bin"
    uris.put_file(str(src), uri)
    local = uris.localize(uri, str(tmp_path / "work"))
    assert local != str(src) and _sha(local) == _sha(src)


def test_trees_copy_in_order_and_remove(bucket, tmp_path):
    tree = tmp_path / "tree"
    for rel in ("_SUCCESS", "part-0.parquet", "x/part-1.parquet"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(rel)
    uri = f"gs://{bucket}/shards"
    uris.upload_tree(str(tree), uri, last=("_SUCCESS",))
    out = tmp_path / "out"
    uris.download_tree(uri, str(out))
    assert sorted(uris.iter_files(str(out))) == ["_SUCCESS", "part-0.parquet", "x/part-1.parquet"]
    assert (out / "x" / "part-1.parquet").read_text() == "x/part-1.parquet"
    uris.remove_file(f"{uri}/part-0.parquet")
    uris.remove_file(f"{uri}/part-0.parquet")  # missing is not an error
    assert uris.list_names(uri) == ["_SUCCESS"]
    uris.remove_tree(uri)
    assert uris.list_names(uri) == [] and not uris.exists(f"{uri}/x/part-1.parquet")


def test_missing_object_and_bucket_name_what_to_fix(bucket, tmp_path):
    with pytest.raises(InputDataError, match=f"gs://{bucket}/none.txt"):
        uris.read_text(f"gs://{bucket}/none.txt")
    with pytest.raises(InputDataError, match=f"gs://{bucket}/none.bin"):
        uris.localize(f"gs://{bucket}/none.bin", str(tmp_path))
    for call in (lambda: uris.read_text("gs://no-such-bucket-x/a.txt"),
                 lambda: uris.write_text("gs://no-such-bucket-x/a.txt", "a"),
                 lambda: uris.list_names("gs://no-such-bucket-x/p"),
                 lambda: uris.remove_file("gs://no-such-bucket-x/a.txt"),
                 lambda: uris.localize("gs://no-such-bucket-x/a.txt", str(tmp_path))):
        with pytest.raises(InputDataError, match="bucket no-such-bucket-x does not exist"):
            call()
    with pytest.raises(InputDataError, match="no bucket"):
        uris.read_text("gs:///a.txt")
