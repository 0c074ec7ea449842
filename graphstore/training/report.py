"""The run report: ``report/report.html`` and its Markdown twin ``report/report.md``.

Written by compute rank 0 of the default trainer at the end of a run, from what metrics.json
holds plus a 2-D projection of a sample of embeddings (graphstore.training.report_inputs):

1. the test metrics of the model beside every baseline, per supervision type, with the protocol,
   the candidate count, the share of pairs whose anchor had no training pair (cold) and each
   baseline's settings; the full-ranking recall@k / NDCG@k when metrics.json has them;
2. plots (matplotlib, Agg, no pyplot state): the training loss per progress interval, the
   validation MRR per evaluation (model and baselines), the comparison on the test split, the
   share of step time spent waiting for batches, the stage's phase timings (and earlier pipeline
   stages' seconds when the run folder has their records), and the embedding projection coloured
   by a node attribute;
3. the same as tables in Markdown.

Files (graphstore.formats.run_paths): ``report/<plot>.png`` (the Markdown links them), ``report.md``,
then ``report.html`` last, self-contained (each PNG embedded as a ``data:`` URI), so a report.html
that exists is complete. A rerun first removes the report.html of the earlier one, then replaces
the plots and the Markdown. Plain data in, files out: no torch here.
"""

from __future__ import annotations

import base64
import html
import io
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np

from graphstore.io import uris
from graphstore.formats.run_paths import RunPaths
from graphstore.formats.stage_records import StageRecord

PLOTS = ("loss", "validation", "comparison", "wait_share", "timings", "embeddings")
"""Every plot a report may have, in page order (``report/<name>.png``)."""
METRIC_COLUMNS = ("mrr", "hits@1", "hits@10", "hits@50")


@dataclass(frozen=True)
class Projection:
    """A 2-D projection of a sample of one node type's embeddings (``points [n, 2]``), each point
    coloured by ``values [n]`` of ``attribute`` (categorical: one colour per value)."""

    node_type: str
    points: np.ndarray
    values: np.ndarray
    attribute: str
    categorical: bool
    explained: tuple[float, float] = (0.0, 0.0)  # variance share of the two axes
    method: str = "PCA"


@dataclass(frozen=True)
class ReportInputs:
    """What the report shows: ``metrics`` as in metrics.json; ``stages``: earlier pipeline
    stage records; ``title``: the run."""

    title: str
    metrics: dict
    projection: Projection | None = None
    stages: list[StageRecord] = field(default_factory=list)


def _figure(width: float = 6.4, height: float = 3.6):
    """A new figure (no pyplot: nothing global) and its one axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.subplots()


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _results(metrics: dict, group: str = "test") -> dict[str, dict]:
    """``{supervision type: {"model": {...}, <baseline>: {...}, ...}}`` of ``metrics[group]``."""
    return dict(metrics.get(group, {}).get("by_supervision_edge_type", {}))


def _who(result: dict) -> list[str]:
    """The model first, then the baselines, as the result lists them."""
    return [k for k, v in result.items() if isinstance(v, dict) and "mrr" in v]


def plot_loss(metrics: dict) -> bytes | None:
    rows = metrics.get("loss_history", [])
    if not rows:
        return None
    fig, ax = _figure()
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], marker=".", color="tab:blue")
    ax.set(xlabel="step", ylabel="training loss (interval mean, rank 0)", title="Training loss")
    ax.grid(alpha=0.3)
    return _png(fig)


def plot_validation(metrics: dict) -> bytes | None:
    history = metrics.get("val_history", [])
    if not history:
        return None
    fig, ax = _figure()
    for key in history[0].get("by_supervision_edge_type", {}):
        for who in _who(history[0]["by_supervision_edge_type"][key]):
            ys = [h["by_supervision_edge_type"][key][who]["mrr"] for h in history]
            ax.plot([h["step"] for h in history], ys, marker="o",
                    linestyle="-" if who == "model" else "--", label=f"{who} ({key})")
    ax.set(xlabel="step", ylabel="validation MRR", title="Validation MRR")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


def plot_comparison(metrics: dict) -> bytes | None:
    results = _results(metrics)
    if not results:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 1.0 + 2.6 * len(results)), dpi=100, layout="constrained")
    axes = fig.subplots(len(results), 1, squeeze=False)[:, 0]
    for ax, (key, result) in zip(axes, results.items()):
        who = _who(result)
        x = np.arange(len(who))
        for offset, metric in ((-0.2, "mrr"), (0.2, "hits@10")):
            values = [result[w][metric] for w in who]
            bars = ax.bar(x + offset, values, width=0.4, label=metric)
            ax.bar_label(bars, fmt="%.3f", fontsize="small")
        ax.set_xticks(x, who)
        ax.set(title=f"Test split, {key}", ylabel="score")
        ax.legend(fontsize="small")
    return _png(fig)


def plot_wait_share(metrics: dict) -> bytes | None:
    rows = metrics.get("loss_history", [])
    if not rows:
        return None
    fig, ax = _figure()
    ax.plot([r["step"] for r in rows], [r["wait_share"] for r in rows], marker=".",
            color="tab:orange")
    ax.axhline(metrics.get("wait_share", 0.0), color="grey", linestyle="--", label="whole run")
    ax.set(xlabel="step", ylabel="share of step time", ylim=(0, 1),
           title="Time spent waiting for sampled batches")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _png(fig)


def _timing_rows(inputs: ReportInputs) -> list[tuple[str, float]]:
    rows = [(f"pipeline: {r.stage}" + (f" ({r.node_type})" if r.node_type else ""),
             float(r.seconds or 0.0)) for r in inputs.stages if r.stage != "train"]
    rows += [(f"train: {name}", float(s)) for name, s in inputs.metrics.get("timings_s", {}).items()]
    return rows


def plot_timings(inputs: ReportInputs) -> bytes | None:
    rows = _timing_rows(inputs)
    if not rows:
        return None
    fig, ax = _figure(6.4, 1.2 + 0.35 * len(rows))
    y = np.arange(len(rows))[::-1]
    bars = ax.barh(y, [s for _, s in rows], color="tab:green")
    ax.bar_label(bars, fmt="%.1f s", fontsize="small")
    ax.set_yticks(y, [name for name, _ in rows])
    ax.set(xlabel="seconds", title="Stage timings")
    return _png(fig)


def plot_embeddings(p: Projection | None) -> bytes | None:
    if p is None or len(p.points) == 0:
        return None
    fig, ax = _figure(6.4, 5.0)
    if p.categorical:
        cats = np.unique(p.values)
        cmap = _categorical_colours(len(cats))
        for i, cat in enumerate(cats):
            sel = p.values == cat
            ax.scatter(p.points[sel, 0], p.points[sel, 1], s=10, color=cmap[i],
                       label=str(cat) if len(cats) <= 12 else None)
        if len(cats) <= 12:
            ax.legend(title=p.attribute, fontsize="x-small", markerscale=1.5)
    else:
        sc = ax.scatter(p.points[:, 0], p.points[:, 1], s=10, c=p.values, cmap="viridis")
        fig.colorbar(sc, ax=ax, label=p.attribute)
    ax.set(xlabel=f"{p.method} 1 ({p.explained[0]:.0%} of variance)",
           ylabel=f"{p.method} 2 ({p.explained[1]:.0%} of variance)",
           title=f"{len(p.points)} {p.node_type} embeddings, coloured by {p.attribute}")
    return _png(fig)


def _categorical_colours(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab20" if n > 10 else "tab10"]
    return [cmap(i % cmap.N) for i in range(n)]


# -- text ----------------------------------------------------------------------------------------
def _fmt(value) -> str:
    """A metric: 4 decimals below 10, else 1."""
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _settings(info: dict) -> str:
    """``method: ..., dim: 64, lr: 0.005, epochs_run: user__buys__item 20``."""
    def one(v) -> str:
        if isinstance(v, dict):
            return ", ".join(f"{k} {one(x)}" for k, x in v.items())
        return f"{v:g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k}: {one(v)}" for k, v in info.items())


def tables(inputs: ReportInputs) -> list[tuple[str, list[str], list[list[str]]]]:
    """``(title, header, rows)`` of every table of the report, in page order."""
    m = inputs.metrics
    out = []
    for key, result in _results(m).items():
        rows = [[who, *(_fmt(result[who].get(c, 0.0)) for c in METRIC_COLUMNS),
                 _fmt(result[who].get("count", 0.0))] for who in _who(result)]
        title = (f"Test split, {key}: {result.get('candidates_per_pair', '?')} candidates per pair"
                 + (f", cold anchors {result['cold_anchor_share']:.1%}"
                    if "cold_anchor_share" in result else ""))
        out.append((title, ["", *METRIC_COLUMNS, "pairs"], rows))
        full = result.get("full_ranking")
        if full:
            columns = [f"recall@{full['k']}", f"ndcg@{full['k']}"]
            rows = [[who, *(_fmt(full[who].get(c, 0.0)) for c in columns),
                     str(int(full[who].get("count", 0)))] for who in _who(result) if who in full]
            out.append((f"Test split, {key}, full ranking: every one of {full['labels']} label "
                        "nodes, training pairs masked", ["", *columns, "anchors"], rows))
    settings = m.get("baselines", {})
    if settings:
        out.append(("Baseline settings", ["baseline", "settings"],
                    [[name, _settings(info)] for name, info in settings.items()]))
    facts = [["steps", _fmt(m.get("steps", "?"))], ["seconds", _fmt(m.get("seconds", "?"))],
             ["loader wait share (whole run)", f"{m.get('wait_share', 0.0):.1%}"],
             ["protocol", str(m.get("protocol", ""))]]
    out.append(("Run", ["", ""], facts))
    timing = _timing_rows(inputs)
    if timing:
        out.append(("Stage timings", ["phase", "seconds"], [[n, f"{s:.1f}"] for n, s in timing]))
    return out


CAPTIONS = {
    "loss": "Training loss per progress interval.",
    "validation": "Validation MRR at each validation pass (dashed: baselines).",
    "comparison": "Test MRR and hits@10, the model beside each baseline, same candidates.",
    "wait_share": "Share of each interval's step time spent waiting for sampled batches.",
    "timings": "Seconds per phase of the train stage (and earlier pipeline stages).",
    "embeddings": "A uniform sample of embeddings (the evaluation candidates), projected to 2-D.",
}


def render(inputs: ReportInputs) -> tuple[dict[str, bytes], str, str]:
    """``({plot name: PNG}, markdown, html)`` of a report (plots that have no data are left out)."""
    makers = {"loss": lambda: plot_loss(inputs.metrics),
              "validation": lambda: plot_validation(inputs.metrics),
              "comparison": lambda: plot_comparison(inputs.metrics),
              "wait_share": lambda: plot_wait_share(inputs.metrics),
              "timings": lambda: plot_timings(inputs),
              "embeddings": lambda: plot_embeddings(inputs.projection)}
    pngs = {name: png for name in PLOTS if (png := makers[name]()) is not None}
    md = [f"# {inputs.title}", ""]
    body = [f"<h1>{html.escape(inputs.title)}</h1>"]
    for title, header, rows in tables(inputs):
        md += [f"## {title}", "", "| " + " | ".join(header) + " |",
               "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows] + [""]
        body.append(f"<h2>{html.escape(title)}</h2><table><tr>"
                    + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
                    + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                              for r in rows) + "</table>")
    if "validation" not in pngs:
        note = "No validation pass ran (``val_every_steps`` >= the steps run)."
        md += [note.replace("``", "`"), ""]
        body.append(f"<p>{html.escape(note.replace('``', ''))}</p>")
    for name, png in pngs.items():
        md += [f"## {CAPTIONS[name]}", "", f"![{name}]({name}.png)", ""]
        data = base64.b64encode(png).decode()
        body.append(f"<h2>{html.escape(CAPTIONS[name])}</h2>"
                    f'<img alt="{name}" src="data:image/png;base64,{data}">')
    style = ("body{font-family:sans-serif;max-width:60em;margin:1em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
             "padding:.2em .6em;text-align:left}img{max-width:100%}")
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(inputs.title)}</title><style>{style}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
    return pngs, "\n".join(md), page


def write_report(run_dir: str, inputs: ReportInputs) -> str:
    """Write the report into ``run_dir`` (local or gs://; module docs for the order); returns
    the URI of report.html."""
    paths = RunPaths(run_dir)
    pngs, md, page = render(inputs)
    uris.remove_file(paths.report_html)  # first: a report.html that exists is complete
    with tempfile.TemporaryDirectory(prefix="report-") as tmp:
        def put(data: bytes, uri: str) -> None:
            local = os.path.join(tmp, uris.basename(uri))
            with open(local, "wb") as fh:
                fh.write(data)
            uris.put_file(local, uri)

        for name in PLOTS:  # plots of an earlier report that this one does not have go
            if name not in pngs:
                uris.remove_file(paths.report_image(name))
        for name, png in pngs.items():
            put(png, paths.report_image(name))
        put(md.encode(), paths.report_markdown)
        put(page.encode(), paths.report_html)
    return paths.report_html
