"""The run report in a real headless Chromium (Debian package; scripts/setup_browser.sh): every
plot decodes to a non-empty image and the page logs no error. The report a real training run
writes is opened the same way in tests/integration/test_training.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphstore.training.report import PLOTS, write_report
from tests import report_data
from tests.browser import open_page

pytestmark = [pytest.mark.integration]


def check_report_renders(html: Path, shot: Path, plots: tuple[str, ...]) -> None:
    """Open ``html`` in Chromium: one rendered image per plot in ``plots``, no console error;
    the screenshot goes to ``shot`` (REPORT_SCREENSHOT_DIR keeps a copy to look at)."""
    page = open_page(html)
    shot.write_bytes(page.screenshot)
    keep = os.environ.get("REPORT_SCREENSHOT_DIR")
    if keep:
        Path(keep, shot.name).write_bytes(page.screenshot)
    assert page.errors == [], page.errors
    assert [i["alt"] for i in page.images] == list(plots), page.images
    for image in page.images:
        assert image["complete"] and image["naturalWidth"] > 200 and image["naturalHeight"] > 100, image
    assert page.title.startswith("Training run")
    assert len(page.screenshot) > 20_000  # a page with plots, not a blank one


@pytest.mark.timeout(180)
def test_the_report_renders_in_chromium(tmp_path: Path):
    run = tmp_path / "run"
    html = Path(write_report(str(run), report_data.inputs()))
    check_report_renders(html, tmp_path / "report-synthetic.png", PLOTS)


@pytest.mark.timeout(180)
def test_the_check_fails_for_a_broken_image(tmp_path: Path):
    """The browser check can fail: a corrupt embedded PNG has naturalWidth 0 and logs nothing,
    a script error shows as an exception."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><title>Training run x</title></head><body>'
                    '<img alt="loss" src="data:image/png;base64,iVBORw0KGgoAAAA=">'
                    '<script>undefinedFunction()</script></body></html>')
    result = open_page(page)
    assert result.images[0]["naturalWidth"] == 0
    assert any("undefinedFunction" in e for e in result.errors), result.errors
