"""MovieLens-100K as raw tables, read at run time from the ``recbole==1.2.1`` wheel on PyPI.

    python -m graphstore.tools.movielens --output .data/movielens [--cache .data/cache]

The data is never committed (GroupLens terms: https://grouplens.org/datasets/movielens/100k/);
the wheel (2.1 MB) is downloaded with pip into ``--cache``, checked against the sha256 below, and
three files are read out of it: ``ml-100k.{inter,user,item}``. Written tables (Parquet, the shape
``configs/task_movielens.yaml`` reads; ``configs/task_movielens_hard_negatives.yaml`` reads the
last two instead of ``user_item``):

    users.parquet      user_id INT64, f_0..: age / 100, gender (2 one-hot), occupation (one-hot)
    items.parquet      item_id INT64, f_0..: (year - 1900) / 100 (0 when unknown), genres (multi-hot)
    user_item.parquet  user_id, item_id, weight = rating / 5   (every rating is an interaction)
    user_item_liked.parquet     the same columns, ratings >= LIKED (4) only: the positives
    user_item_disliked.parquet  user_id, item_id of ratings <= DISLIKED (2): known negatives
                                (``hardNegativeEdgeTypes``); ratings of 3 are in neither
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import zipfile

from graphstore.runtime.errors import InputDataError, RuntimeFailure

WHEEL = "recbole-1.2.1-py3-none-any.whl"
WHEEL_SHA256 = "9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407"
MEMBER = "recbole/dataset_example/ml-100k/ml-100k.{}"
LIKED, DISLIKED = 4, 2
"""Ratings (1-5) at or above ``LIKED`` are the liked table's positives, at or below ``DISLIKED``
the disliked table's known negatives."""


def fetch_wheel(cache: str) -> str:
    """The recbole wheel in ``cache`` (downloaded with pip when missing), sha256-checked."""
    path = os.path.join(cache, WHEEL)
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "recbole==1.2.1",
                               "--no-deps", "--only-binary=:all:", "-d", cache, "-q"],
                              capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.exists(path):
            raise RuntimeFailure(f"could not download {WHEEL} from PyPI: {proc.stderr.strip()[-500:]}")
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    if digest != WHEEL_SHA256:
        raise InputDataError(f"{path}: sha256 {digest[:12]}... is not the pinned {WHEEL_SHA256[:12]}...; "
                             "delete it and rerun")
    return path


def _read(wheel: str, ext: str) -> list[list[str]]:
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(MEMBER.format(ext)).decode("utf-8", errors="replace")
    rows = [line.split("\t") for line in io.StringIO(text).read().splitlines() if line]
    return rows[1:]  # the first line is recbole's typed header


def write_tables(wheel: str, output: str) -> dict[str, int]:
    """Write the three tables (module docs); returns row counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    users, items, inter = _read(wheel, "user"), _read(wheel, "item"), _read(wheel, "inter")
    occupations = sorted({u[3] for u in users})
    genres = sorted({g for it in items for g in (it[3].split() if len(it) > 3 else [])})
    user_feats = [[int(u[1]) / 100, float(u[2] == "M"), float(u[2] == "F")]
                  + [float(u[3] == o) for o in occupations] for u in users]
    item_feats = []
    for it in items:
        year = it[2] if len(it) > 2 else ""
        item_genres = set(it[3].split()) if len(it) > 3 else set()
        item_feats.append([(int(year) - 1900) / 100 if year.isdigit() else 0.0]
                          + [float(g in item_genres) for g in genres])
    os.makedirs(output, exist_ok=True)

    def table(id_name: str, ids: list[int], feats: list[list[float]]) -> pa.Table:
        cols = {id_name: pa.array(ids, pa.int64())}
        for j in range(len(feats[0])):
            cols[f"f_{j}"] = pa.array([f[j] for f in feats], pa.float32())
        return pa.table(cols)

    pq.write_table(table("user_id", [int(u[0]) for u in users], user_feats),
                   os.path.join(output, "users.parquet"))
    pq.write_table(table("item_id", [int(it[0]) for it in items], item_feats),
                   os.path.join(output, "items.parquet"))
    def ratings(rows: list[list[str]], weight: bool = True) -> pa.Table:
        cols = {"user_id": pa.array([int(r[0]) for r in rows], pa.int64()),
                "item_id": pa.array([int(r[1]) for r in rows], pa.int64())}
        if weight:
            cols["weight"] = pa.array([float(r[2]) / 5 for r in rows], pa.float32())
        return pa.table(cols)

    liked = [r for r in inter if float(r[2]) >= LIKED]
    disliked = [r for r in inter if float(r[2]) <= DISLIKED]
    pq.write_table(ratings(inter), os.path.join(output, "user_item.parquet"))
    pq.write_table(ratings(liked), os.path.join(output, "user_item_liked.parquet"))
    pq.write_table(ratings(disliked, weight=False), os.path.join(output, "user_item_disliked.parquet"))
    return {"users": len(users), "items": len(items), "interactions": len(inter),
            "liked": len(liked), "disliked": len(disliked),
            "user_features": len(user_feats[0]), "item_features": len(item_feats[0])}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m graphstore.tools.movielens",
                                     description="Write MovieLens-100K raw tables (see module docs).")
    parser.add_argument("--output", required=True)
    parser.add_argument("--cache", default=os.path.join(".data", "cache"))
    args = parser.parse_args()
    counts = write_tables(fetch_wheel(args.cache), args.output)
    print(f"movielens: {counts} -> {args.output}")
    return 0


if __name__ == "__main__":
    from graphstore.runtime.cli import run_cli

    run_cli(main, "graphstore.tools.movielens")
