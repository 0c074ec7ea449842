"""MovieLens tables from a wheel laid out like recbole 1.2.1's (built here: no network)."""

from __future__ import annotations

import zipfile

import pyarrow.parquet as pq
import pytest

from graphstore.tools import movielens
from graphstore.runtime.errors import InputDataError


def _wheel(path):
    files = {
        "user": "user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n"
                "1\t24\tM\ttechnician\t85711\n2\t53\tF\tother\t94043\n",
        "item": "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
                "10\tToy Story\t1995\tAnimation Comedy\n20\tOld One\t\tDrama\n",
        "inter": "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                 "1\t10\t5\t881250949\n2\t10\t3\t891717742\n2\t20\t4\t891717743\n"
                 "1\t20\t2\t891717744\n",
    }
    with zipfile.ZipFile(path, "w") as zf:
        for ext, text in files.items():
            zf.writestr(movielens.MEMBER.format(ext), text)
    return path


def test_tables_have_ids_features_and_weighted_interactions(tmp_path):
    counts = movielens.write_tables(str(_wheel(tmp_path / "w.whl")), str(tmp_path / "out"))
    assert counts == {"users": 2, "items": 2, "interactions": 4, "liked": 2, "disliked": 1,
                      "user_features": 5, "item_features": 4}
    users = pq.read_table(tmp_path / "out" / "users.parquet").to_pylist()
    # age/100, M, F, occupations sorted: other, technician
    assert users[0] == {"user_id": 1, "f_0": pytest.approx(0.24), "f_1": 1.0, "f_2": 0.0,
                        "f_3": 0.0, "f_4": 1.0}
    items = pq.read_table(tmp_path / "out" / "items.parquet").to_pylist()
    # (year-1900)/100, genres sorted: Animation, Comedy, Drama; unknown year -> 0
    assert items[0] == {"item_id": 10, "f_0": pytest.approx(0.95), "f_1": 1.0, "f_2": 1.0, "f_3": 0.0}
    assert items[1]["f_0"] == 0.0 and items[1]["f_3"] == 1.0
    edges = pq.read_table(tmp_path / "out" / "user_item.parquet").to_pylist()
    assert [(e["user_id"], e["item_id"], round(e["weight"], 2)) for e in edges] == [
        (1, 10, 1.0), (2, 10, 0.6), (2, 20, 0.8), (1, 20, 0.4)]
    # ratings >= 4 are the liked positives, <= 2 the disliked known negatives, 3 neither
    liked = pq.read_table(tmp_path / "out" / "user_item_liked.parquet").to_pylist()
    assert [(e["user_id"], e["item_id"]) for e in liked] == [(1, 10), (2, 20)]
    disliked = pq.read_table(tmp_path / "out" / "user_item_disliked.parquet")
    assert disliked.to_pylist() == [{"user_id": 1, "item_id": 20}]  # no weight column


def test_a_cached_wheel_with_another_checksum_is_refused(tmp_path):
    _wheel(tmp_path / movielens.WHEEL)
    with pytest.raises(InputDataError, match="is not the pinned"):
        movielens.fetch_wheel(str(tmp_path))
