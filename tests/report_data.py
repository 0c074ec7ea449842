"""A metrics.json-shaped dict and a projection for report tests (shapes the trainer writes)."""

from __future__ import annotations

import numpy as np

from graphstore.formats.stage_records import StageRecord
from graphstore.training.report import Projection, ReportInputs


def result(model: float, pop: float, bpr: float, light: float, full: bool = False) -> dict:
    def m(mrr: float) -> dict:
        return {"count": 400.0, "mrr": mrr, "hits@1": mrr / 2, "hits@10": min(1.0, 2.5 * mrr),
                "hits@50": min(1.0, 4 * mrr)}

    one = {"model": m(model), "popularity": m(pop), "bpr": m(bpr), "lightgcn": m(light),
           "candidates_per_pair": 500, "candidates": "0123456789abcdef", "cold_anchor_share": 0.0}
    if full:  # recall@20 = 1.5 x MRR, NDCG@20 = MRR (made-up shapes)
        one["full_ranking"] = {"k": 20, "labels": 1682, **{
            who: {"count": 90.0, "recall@20": 1.5 * v, "ndcg@20": v}
            for who, v in (("model", model), ("popularity", pop), ("bpr", bpr), ("lightgcn", light))}}
    return {**one, "by_supervision_edge_type": {"user__buys__item": one}}


def metrics(with_validation: bool = True) -> dict:
    val = [{"step": s, **result(0.05 + s / 2000, 0.03, 0.02, 0.025)} for s in (100, 200)]
    return {
        "steps": 300, "seconds": 61.2, "val_history": val if with_validation else [],
        "test": result(0.21, 0.03, 0.05, 0.06, full=True),
        "baselines": {"popularity": {"method": "training positives per label node"},
                      "bpr": {"method": "matrix factorisation", "dim": 64, "epochs": 20}},
        "loss_history": [{"step": s, "loss": 6.0 - s / 100, "batches_per_s": 5.0,
                          "wait_share": 0.3} for s in range(20, 301, 20)],
        "timings_s": {"join cluster": 3.2, "open dataset, loaders": 8.1, "baselines": 4.0,
                      "training steps": 40.3, "validation": 3.0, "test": 2.2},
        "wait_share": 0.31, "protocol": "filtered ranking against 500 uniform candidates",
    }


def projection(n: int = 300, communities: int = 6) -> Projection:
    rng = np.random.default_rng(0)
    values = rng.integers(communities, size=n)
    centres = rng.normal(size=(communities, 2)) * 4
    points = centres[values] + rng.normal(size=(n, 2))
    return Projection("item", points, values, "community", True, (0.41, 0.22))


def inputs(with_validation: bool = True) -> ReportInputs:
    return ReportInputs(title="Training run r1", metrics=metrics(with_validation),
                        projection=projection(),
                        stages=[StageRecord(stage="partition", status="ok", seconds=1.5)])
