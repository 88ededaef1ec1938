"""Real headless Chromium (Debian's package) driven by Playwright against pytest-django's live server.

Playwright cannot download a browser here: it launches `/usr/bin/chromium`
(`scripts/install-browser` installs it). A missing browser fails the suite
with that instruction; it never skips.

Playwright's sync API runs an event loop in this thread, which makes
Django's async-safety check refuse the test's own ORM calls; the tests only
touch the database between browser steps, so the check is turned off here.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

from playwright.sync_api import Browser, Page, expect, sync_playwright

from core.waiter_slots import waiter_slots
from ledger.apis.changes_stream import ChangeStream
from push.waiting import event_watcher
from tests.console.conftest import PASSWORD

CHROMIUM = os.environ.get("LEASEHOLD_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts"
# Generous: CI machines run other suites at the same time; a passing check returns at once anyway.
TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for the browser tests; closed after them, so Playwright's
    event loop does not outlive this package (other tests run asyncio)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is not installed at {CHROMIUM}; run scripts/install-browser (Debian's chromium).")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, live_server) -> Iterator[Page]:
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1440, "height": 1000}, accept_downloads=True
    )
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    yield opened
    context.close()


@pytest.fixture(scope="module")
def feed_waiters_ended() -> Iterator[None]:
    """For a module whose browser pages or agent processes wait on the changes feed through the live server.

    Their waits hold live-server threads and start this process's event watcher (on PostgreSQL a LISTEN
    connection, which would keep the test database from being dropped). At the module's end every wait
    is woken (a stream whose browser has gone notices at its next keepalive, made short here) and gives
    its slot back; then the watcher is stopped.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ChangeStream, "heartbeat_seconds", 0.5)
        yield
        deadline = time.monotonic() + 15
        while waiter_slots().held() and time.monotonic() < deadline:
            event_watcher()._wake_everyone()  # as a lost listener connection does: each waiter re-reads
            time.sleep(0.1)
    event_watcher().stop()


def login(page: Page, username: str) -> None:
    page.goto("/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(username.upper(), ignore_case=True)


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    target = ARTIFACTS / name
    page.screenshot(path=str(target), full_page=True)
    return target
