"""Partition stage: how input paths are read and how unreadable input is reported.

Paths are literal (a folder named ``data*`` reads only itself), and a file that cannot be read
(corrupt pages, ragged CSV rows, a truncated gzip, an empty file, a value float32 cannot hold)
is one line naming the file and what is wrong with it; running out of memory is named as such.
Every case runs on both partition paths (in memory and DuckDB) where both can read the input.
"""

from __future__ import annotations

import gzip
import resource
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from graphstore.runtime.errors import InputDataError
from graphstore.formats.shards.reader import ShardSet
from tests.unit.test_partition import (
    ITEM_IDS,
    N_ITEMS,
    N_USERS,
    USER_IDS,
    make_raw,
    raw_edges,
    run_partition,
    task_dict,
    write_configs,
)
from tests.unit.test_partition import path  # noqa: F401  (fixture: both partition paths)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
@pytest.mark.parametrize("folder,neighbour", [("data*", "data_old"), ("d[a]ta", "data"),
                                              ("dat?", "data")])
def test_glob_characters_in_a_data_path_are_literal(tmp_path, path, fmt, folder, neighbour):
    """A data folder whose name is a glob pattern reads its own files, never its neighbour's."""
    raw = make_raw(tmp_path / folder, fmt=fmt)
    make_raw(tmp_path / neighbour, fmt=fmt)  # other edges, the same node ids
    ext = "csv" if fmt == "csv" else "parquet"
    m = run_partition(tmp_path, task_dict(tmp_path / folder, ext=ext), tmp_path / "shards",
                      tuning=path)
    shards = ShardSet.open(str(tmp_path / "shards"))
    assert m.node_types["user"].count == N_USERS
    assert m.edge_types["user__buys__item"].count == sum(raw["user__buys__item"].values())
    assert raw_edges(shards, "user__buys__item") == raw["user__buys__item"]
    assert raw_edges(shards, "item__similar_to__item") == raw["item__similar_to__item"]


def _snappy_with_a_damaged_page(table: pa.Table, path: Path) -> None:
    """Write ``table`` (compressible columns) with snappy, then damage the compressed data of
    its last column chunk: the footer still reads, decoding that page fails."""
    pq.write_table(table, path, compression="snappy", use_dictionary=False)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(table.num_columns - 1)
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 1] ^= 0xFF  # a copy offset
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match="(?i)snappy"):  # the damage is real
        pq.read_table(path)


def _damage_users(raw: Path) -> None:
    _snappy_with_a_damaged_page(pa.table({"user_id": USER_IDS, **{
        f"f_{j}": np.full(N_USERS, j + 0.5, np.float32) for j in range(3)}}), raw / "users.parquet")


def _damage_item_edges(raw: Path) -> None:
    ids = pa.array([ITEM_IDS[i % 3] for i in range(120)], pa.int64())
    _snappy_with_a_damaged_page(pa.table({"src_item_id": ids, "dst_item_id": ids}),
                                raw / "item_item.parquet")


def _items_with(raw: Path, column: str, value: float, row: int) -> None:
    values = np.ones(N_ITEMS)
    values[row - 1] = value
    pq.write_table(pa.table({"item_id": pa.array(ITEM_IDS, pa.int64()), "f_0": np.ones(N_ITEMS),
                             "f_1": np.ones(N_ITEMS), column: values}), raw / "items.parquet")


def _weight(raw: Path, value: float, row: int) -> None:
    t = pq.read_table(raw / "user_item.parquet")
    w = t.column("weight").to_numpy().astype(np.float64)
    w[row - 1] = value
    pq.write_table(t.set_column(2, "weight", pa.array(w)), raw / "user_item.parquet")


BAD_PARQUET = {
    "corrupt_node_page": (_damage_users, r"users.parquet: cannot read as parquet: .*(?i:snappy)"),
    "corrupt_edge_page": (_damage_item_edges,
                          r"item_item.parquet: cannot read as parquet: .*(?i:snappy)"),
    "feature_beyond_float32": (lambda raw: _items_with(raw, "f_1", 1e300, 5),
                               r"items.parquet: column 'f_1' row 5: feature value 1e\+300 is not a "
                               r"finite float32 number"),
    "weight_beyond_float32": (lambda raw: _weight(raw, -1e300, 7),
                              r"user_item.parquet: column 'weight' row 7: feature value -1e\+300"),
}


@pytest.mark.parametrize("case", sorted(BAD_PARQUET))
def test_unreadable_parquet_names_the_file(tmp_path, path, case):
    make_raw(tmp_path / "raw")
    damage, pattern = BAD_PARQUET[case]
    damage(tmp_path / "raw")
    with pytest.raises(InputDataError, match=pattern):
        run_partition(tmp_path, task_dict(tmp_path / "raw"), tmp_path / "shards", tuning=path)


def _rows(n: int) -> str:
    return "".join(f"{ITEM_IDS[i % N_ITEMS]},{ITEM_IDS[(i * 7) % N_ITEMS]}\n" for i in range(n))


def _item_edges_csv(raw: Path, text: str, name: str = "item_item.csv") -> None:
    data = text.encode()
    if name.endswith(".gz"):
        data = gzip.compress(data)
    (raw / name).write_bytes(data)


BAD_CSV = {
    # a ragged row among the rows DuckDB samples to detect the dialect, and one far beyond them
    "ragged_early": (lambda raw: _item_edges_csv(
        raw, "src_item_id,dst_item_id\n" + _rows(3) + "1000,1013,7\n" + _rows(3)),
        r"item_item.csv: cannot read as csv: line 5: ragged row: 3 field\(s\), the header has 2"),
    "ragged_late": (lambda raw: _item_edges_csv(
        raw, "src_item_id,dst_item_id\n" + _rows(30000) + "1000\n" + _rows(2)),
        r"item_item.csv: cannot read as csv: line 30002: ragged row: 1 field\(s\), the header has 2"),
    "bad_value_late": (lambda raw: _item_edges_csv(
        raw, "src_item_id,dst_item_id\n" + _rows(30000) + "1000,abc\n"),
        r"item_item.csv: cannot read as csv: line 30002: column 'dst_item_id': .*abc"),
    "empty_file": (lambda raw: (raw / "users.csv").write_bytes(b""),
                   r"users.csv: the file is empty \(0 bytes\)"),
}


@pytest.mark.parametrize("case", sorted(BAD_CSV))
def test_unreadable_csv_says_what_is_wrong(tmp_path, case):
    make_raw(tmp_path / "raw", fmt="csv")
    damage, pattern = BAD_CSV[case]
    damage(tmp_path / "raw")
    with pytest.raises(InputDataError, match=pattern):
        run_partition(tmp_path, task_dict(tmp_path / "raw", ext="csv"), tmp_path / "shards")


@pytest.mark.parametrize("cut", ["middle", "end_of_a_line"])
def test_truncated_csv_gz_is_reported_as_truncated(tmp_path, cut):
    """DuckDB reads a gzip stream cut short as if the file ended there: cut at a line end, the
    rows after the cut would silently be missing."""
    make_raw(tmp_path / "raw", fmt="csv")
    text = "src_item_id,dst_item_id\n" + _rows(5000)
    whole = gzip.compress(text.encode())
    if cut == "middle":
        data = whole[: len(whole) // 2]
    else:  # a complete deflate block of the first 100 lines, without the end-of-stream marker
        import zlib
        head = "".join(text.splitlines(keepends=True)[:101]).encode()
        comp = zlib.compressobj(6, zlib.DEFLATED, 31)
        data = comp.compress(head) + comp.flush(zlib.Z_FULL_FLUSH)
    (tmp_path / "raw" / "item_item.csv.gz").write_bytes(data)
    task = task_dict(tmp_path / "raw", ext="csv")
    task["datasetConfig"]["dataSources"]["edges"][1]["uri"] = "item_item.csv.gz"
    with pytest.raises(InputDataError, match=r"item_item.csv.gz: truncated gzip"):
        run_partition(tmp_path, task, tmp_path / "shards")
