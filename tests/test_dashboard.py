"""End to end, as a user sees it: the demo's rollouts in Trackio's own dashboard, in Chromium.

Runs ``examples/rollout_demo.py`` into a fresh project, starts Trackio's dashboard on a loopback
port, opens the Traces page in headless Chromium (Debian's ``chromium``, never a downloaded
browser) and checks that a sample's conversation, span names and token counts are on the page.
The screenshot goes to ``docs/trace-view.png`` when that file is missing or
``UPDATE_SCREENSHOTS=1`` (the README shows it); otherwise to the test's temp folder.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import read_traces

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = ROOT / "docs" / "trace-view.png"
IN_CI = os.environ.get("CI", "").lower() == "true"

if not CHROMIUM.exists() and not IN_CI:
    pytest.skip(
        "Debian's chromium is not installed (/usr/bin/chromium); "
        "`apt-get install -y chromium` to run the dashboard test (CI installs it)",
        allow_module_level=True,
    )

if IN_CI:
    from playwright import sync_api  # in CI a missing package is a failure, not a skip
else:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]'")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def demo_project(project: str, trackio_dir: str) -> str:
    """The demo's 3 steps x 8 samples, logged into a fresh project of the session's TRACKIO_DIR."""
    env = {**os.environ, "TRACKIO_DIR": trackio_dir, "TRACKIO_DISABLE_TELEMETRY": "1"}
    result = subprocess.run(
        [sys.executable, "examples/rollout_demo.py", "--project", project, "--name", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    return project


@pytest.fixture
def dashboard(demo_project: str):
    """Trackio's dashboard for the demo project on a free loopback port; yields its base URL."""
    import trackio

    app, url, _share_url, _full_url = trackio.show(
        project=demo_project,
        open_browser=False,
        block_thread=False,
        host="127.0.0.1",
        server_port=_free_port(),
    )
    try:
        assert url.startswith("http://127.0.0.1:")
        yield url.rstrip("/")
    finally:
        app.close()


def test_a_demo_sample_in_the_trackio_traces_page(demo_project, dashboard, tmp_path):
    assert CHROMIUM.exists(), "CI must install Debian's chromium (.ci/run does)"
    traces = read_traces(demo_project, "demo")
    assert len(traces) == 24
    sample = next(t for t in traces if t["step"] == 0 and t["metadata"]["sample_index"] == 0)
    question = next(m["content"] for m in sample["messages"] if m["role"] == "user")
    answer = sample["messages"][-1]["content"]
    assert answer.startswith("The answer is ")
    final_chat = [s for s in sample["spans"] if s["name"].startswith("chat ")][-1]
    total_tokens = sample["metadata"]["usage"]["total_tokens"]

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(f"{dashboard}/traces?project={demo_project}")
            step_filter = page.locator("select", has=page.locator("option", has_text="All steps"))
            step_filter.select_option("0")
            page.get_by_text(question, exact=True).first.click()

            # The sample's trace: its spans, and the token total over its model calls.
            execution = page.get_by_text(re.compile(r"^execution$", re.IGNORECASE))
            execution.wait_for()
            body = page.inner_text("body")
            for name in ("rollout", final_chat["name"], "execute_tool calculator", "reward"):
                assert name in body, name
            assert f"Tokens {total_tokens}" in " ".join(body.split())

            # The last model call: its own token counts and the answer it gave.
            page.get_by_text(final_chat["name"], exact=True).nth(1).click()
            page.get_by_text(re.compile(r"^generation$", re.IGNORECASE)).wait_for()
            text = " ".join(page.inner_text("body").split())
            assert f"Input {final_chat['usage']['input_tokens']} tokens" in text
            assert f"Output {final_chat['usage']['output_tokens']} tokens" in text
            assert answer in text

            # The picture: the selected row, the trace's summary line, its spans and the call.
            row = page.get_by_text(question, exact=True).first
            row.evaluate("el => el.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(300)
            shot = tmp_path / "trace-view.png"
            page.screenshot(path=str(shot))

            # The whole conversation, as Trackio renders it.
            page.get_by_text("Conversation", exact=True).click()
            conversation = " ".join(page.inner_text("body").split())
            assert f"USER {question}" in conversation
            assert f"ASSISTANT {answer}" in conversation
            assert "TOOL " in conversation
        finally:
            browser.close()

    assert shot.stat().st_size > 10_000
    if not SCREENSHOT.exists() or os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
