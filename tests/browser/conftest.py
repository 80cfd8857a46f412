"""Playwright driving a real Chromium against ``live_server``: the admin and dashboard in a browser.

Chromium is Debian's (``apt-get install chromium``; ``.ci/run`` installs it when absent), or the
binary named by ``IQ_CHROMIUM``. Without Playwright or a Chromium these tests are skipped with the
reason. Screenshots go to ``IQ_ARTIFACTS`` (default ``test-artifacts/``), one folder per test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import ROOT

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # the "test" extra installs it; a bare install skips these tests
    sync_playwright = None


def chromium_path() -> str | None:
    named = os.environ.get("IQ_CHROMIUM")
    if named:
        return named
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


# Per module, not per session: Playwright's sync API keeps an event loop running in this thread
# while it is open, and the suite's later tests (jobs run in process by run_jobs) must not find
# one there.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if sync_playwright is None:
        pytest.skip("playwright is not installed: pip install -e '.[test]'")
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium: apt-get install chromium, or set IQ_CHROMIUM")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
    # between browser steps are still plain synchronous code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield launched
        finally:
            launched.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Path:
    base = Path(os.environ.get("IQ_ARTIFACTS", ROOT / "test-artifacts"))
    folder = base / request.node.name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser: Browser, artifacts: Path) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()
