"""Options shared by the whole suite.

``--require-image``: the image tests (tests/image, marker ``image``) fail instead of skipping when
no image was built from this working tree; CI (.ci/run) and ``make image-test`` pass it, so a
build that went missing cannot turn those tests into silent skips.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--require-image", action="store_true",
                     help="fail the image tests instead of skipping them when no image is built "
                          "from this working tree (make image)")
