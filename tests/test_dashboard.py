"""End to end, as a user sees it: the demo's rollouts in Trackio's own dashboard, in Chromium.

Runs ``examples/rollout_demo.py`` into a fresh project, starts Trackio's dashboard on a loopback
port, opens the Traces page in headless Chromium (Debian's ``chromium``, never a downloaded
browser) and reads it as an RL researcher would: a step's rows in sample order, the sample that
never finished marked "partial", the reward in the expanded row's header, the root span showing
question → answer, search by reward; then the spans, token counts and the conversation.
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


def _text(page) -> str:
    """The page's visible text, whitespace collapsed (Trackio upper-cases some labels in CSS)."""
    return " ".join(page.inner_text("body").split())


def test_a_demo_sample_in_the_trackio_traces_page(demo_project, dashboard, tmp_path):
    assert CHROMIUM.exists(), "CI must install Debian's chromium (.ci/run does)"
    traces = read_traces(demo_project, "demo")
    assert len(traces) == 24
    by_sample = {(t["step"], t["metadata"]["sample_index"]): t for t in traces}
    questions = [
        next(m["content"] for m in by_sample[(2, i)]["messages"] if m["role"] == "user")
        for i in range(8)
    ]
    assert len(set(questions)) == 8
    # The demo's last step: sample 7 is stuck in its tool call, logged as partial at the flush.
    assert by_sample[(2, 7)]["metadata"]["status"] == "partial"
    # The last whole sample of that step, right above the partial one in the list.
    sample = by_sample[(2, 6)]
    question, answer = questions[6], sample["messages"][-1]["content"]
    meta = sample["metadata"]
    header = (
        f"step: 2 sample_index: 6 rollout_n: 0 validate: false reward: {meta['reward']:g} "
        f"expected: {meta['expected']} status: success"
    )
    final_chat = [s for s in sample["spans"] if s["name"].startswith("chat ")][-1]
    total_tokens = meta["usage"]["total_tokens"]

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            page.set_default_timeout(30_000)
            page.goto(f"{dashboard}/traces?project={demo_project}")
            step_filter = page.locator("select", has=page.locator("option", has_text="All steps"))
            step_filter.select_option("2")
            sort = page.locator("select", has=page.locator("option", has_text="Oldest first"))
            sort.select_option("request_time_asc")
            page.get_by_text(questions[0], exact=True).wait_for()

            # The step's rows in sample order (logged so; "Oldest first" lists a log call as
            # logged), the stuck sample last and marked partial.
            text = _text(page)
            positions = [text.index(q) for q in questions]
            assert positions == sorted(positions), positions
            partial_row = page.locator("tr", has_text=questions[7])
            assert re.search(r"\bpartial\b", partial_row.inner_text(), re.IGNORECASE)
            for q in questions[:7]:
                row = page.locator("tr", has_text=q).inner_text()
                assert re.search(r"\bsuccess\b", row, re.IGNORECASE), row

            # Expanded: the reward right after the sample's identity in the header, and the
            # root span (selected by default) showing the question and the final answer.
            page.get_by_text(question, exact=True).first.click()
            page.get_by_text(re.compile(r"^execution$", re.IGNORECASE)).wait_for()
            text = _text(page)
            assert header in text, text
            root_panel = re.escape(f"{question} OUTPUT {answer}")
            assert re.search(rf"SPAN rollout .*INPUT {root_panel}", text, re.IGNORECASE), text
            for name in ("rollout", final_chat["name"], "execute_tool calculator", "reward"):
                assert name in text, name
            assert f"Tokens {total_tokens}" in text

            # The picture: the step in sample order, the sample's header and question → answer.
            sort.evaluate("el => el.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(300)
            shot = tmp_path / "trace-view.png"
            page.screenshot(path=str(shot))

            # The last model call: its own token counts and the answer it gave.
            page.get_by_text(final_chat["name"], exact=True).nth(1).click()
            page.get_by_text(re.compile(r"^generation$", re.IGNORECASE)).wait_for()
            text = _text(page)
            assert f"Input {final_chat['usage']['input_tokens']} tokens" in text
            assert f"Output {final_chat['usage']['output_tokens']} tokens" in text
            assert answer in text

            # The whole conversation, as Trackio renders it.
            page.get_by_text("Conversation", exact=True).click()
            conversation = _text(page)
            assert f"USER {question}" in conversation
            assert f"ASSISTANT {answer}" in conversation
            assert "TOOL " in conversation

            # The stuck sample, expanded: its pill and header say what happened.
            page.get_by_text(questions[7], exact=True).first.click()
            page.get_by_text("partial_reason: flush").wait_for()
            assert "status: partial partial: true partial_reason: flush" in _text(page)

            # Search by outcome: Trackio matches metadata values, and "reward=0" is one.
            failed = [
                q
                for i, q in enumerate(questions)
                if by_sample[(2, i)]["metadata"].get("reward") == 0
            ]
            assert failed and len(failed) < 7
            scored = [q for q in questions if q not in failed]
            page.get_by_placeholder("Search traces by request").fill("reward=0")
            page.get_by_text(scored[0], exact=True).wait_for(state="hidden")
            text = _text(page)
            assert all(q in text for q in failed)
            assert not any(q in text for q in scored)
        finally:
            browser.close()

    assert shot.stat().st_size > 10_000
    if not SCREENSHOT.exists() or os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
