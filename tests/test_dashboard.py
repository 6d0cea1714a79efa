"""End to end, as a user sees it: the demo's rollouts in Trackio's own dashboard, in Chromium.

Runs ``examples/rollout_demo.py`` into a fresh project, starts Trackio's dashboard on a loopback
port, opens the Traces page in headless Chromium (Debian's ``chromium``, never a downloaded
browser) and reads it as an RL researcher would: a step's rows in sample order, each pill
saying the sample's reward or that it never finished ("partial"), the expanded row's header
leading with the sample and its outcome, the root span showing question → answer, search by
reward; then the spans, token counts and the conversation; then the step's outcome table in the
Media & Tables tab (which scored, what they answered, which failed or stopped).
Every check waits for the state it reads (the sorted order, the expanded row), never a sleep: the
page re-renders as its data comes, later on a busy machine.
The screenshots go to ``docs/trace-view.png`` and ``docs/outcome-table.png`` when missing or
``UPDATE_SCREENSHOTS=1`` (the README shows them); otherwise to the test's temp folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TRL_PYTHON, read_traces

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = ROOT / "docs" / "trace-view.png"
TABLE_SCREENSHOT = ROOT / "docs" / "outcome-table.png"
TRL_SCREENSHOT = ROOT / "docs" / "trl-trace.png"
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


@contextlib.contextmanager
def _show(project: str) -> Iterator[str]:
    """Trackio's dashboard for ``project`` on a free loopback port; yields its base URL."""
    import trackio

    app, url, _share_url, _full_url = trackio.show(
        project=project,
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


@pytest.fixture
def dashboard(demo_project: str) -> Iterator[str]:
    """Trackio's dashboard for the demo project; yields its base URL."""
    with _show(demo_project) as url:
        yield url


@contextlib.contextmanager
def _traces_page(url: str, height: int) -> Iterator[Any]:
    """Headless Chromium (Debian's) on ``url``, a page ``height`` pixels tall; closed after."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": height})
            page.set_default_timeout(30_000)
            page.goto(url)
            yield page
        finally:
            browser.close()


def _text(page) -> str:
    """The page's visible text, whitespace collapsed (Trackio upper-cases some labels in CSS)."""
    return " ".join(page.inner_text("body").split())


# True once the list shows the given requests, each once, in this order (other rows aside).
_ROWS_IN_ORDER = """(questions) => {
    const shown = [...document.querySelectorAll("tr.trace-row .request")]
        .map((cell) => cell.textContent.trim())
        .filter((text) => questions.includes(text));
    return shown.length === questions.length && shown.every((q, i) => q === questions[i]);
}"""


# True once the list shows ``count`` rows, all of step ``step`` (the Step column).
_ONLY_STEP_ROWS = """({step, count}) => {
    const rows = [...document.querySelectorAll("tr.trace-row")];
    return rows.length === count && rows.every((row) => row.cells[3]?.textContent.trim() === step);
}"""


def _pill(value: float) -> str:
    """The status pill of a sample that ran to its end with this reward."""
    return f"reward {value:g}"


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
    rewards = [by_sample[(2, i)]["metadata"]["reward"] for i in range(7)]
    assert 0.0 in rewards and 1.0 in rewards  # the step has wrong and right answers
    # The header leads with who the sample is and how it did; what the chips show (latency,
    # tokens, operations) and the OTel ids are not in it.
    header = (
        f"step: 2 sample_index: 6 rollout_n: 0 reward: {meta['reward']:g} "
        f"status: {_pill(meta['reward'])} expected: {meta['expected']} service_name: rollout-demo"
    )
    final_chat = [s for s in sample["spans"] if s["name"].startswith("chat ")][-1]
    total_tokens = sum(s["usage"]["total_tokens"] for s in sample["spans"] if "usage" in s)

    with _traces_page(f"{dashboard}/traces?project={demo_project}", 1300) as page:
        step_filter = page.locator("select", has=page.locator("option", has_text="All steps"))
        step_filter.select_option("2")
        sort = page.locator("select", has=page.locator("option", has_text="Oldest first"))
        sort.select_option("request_time_asc")
        # The step's rows in sample order (logged so; "Oldest first" lists a log call as
        # logged), the stuck sample last: wait until the list is sorted so, whatever the
        # order it showed first.
        page.wait_for_function(_ROWS_IN_ORDER, arg=questions)

        # Each row's pill says what became of the sample: its reward, or "partial".
        partial_row = page.locator("tr.trace-row", has_text=questions[7]).inner_text()
        assert re.search(r"\bpartial\b", partial_row, re.IGNORECASE), partial_row
        for q, reward in zip(questions[:7], rewards, strict=True):
            row = page.locator("tr.trace-row", has_text=q).inner_text()
            assert _pill(reward) in " ".join(row.split()).lower(), row
            assert "success" not in row.lower(), row

        # Expanded: the reward right after the sample's identity in the header, and the
        # root span (selected by default) showing the question and the final answer.
        page.get_by_text(question, exact=True).first.click()
        page.get_by_text(re.compile(r"^execution$", re.IGNORECASE)).wait_for()
        text = _text(page)
        assert header in text, text
        for noise in ("duration_ms", "span_count", "usage:", "trace_id", "validate"):
            assert noise not in text, noise
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
        page.get_by_text(re.compile("partial_reason: flush")).wait_for()
        assert "status: partial partial: true partial_reason: flush" in _text(page)

        # Search by outcome: Trackio matches metadata values, and "reward=0" is one.
        failed = [
            q for i, q in enumerate(questions) if by_sample[(2, i)]["metadata"].get("reward") == 0
        ]
        assert failed and len(failed) < 7
        scored = [q for q in questions if q not in failed]
        page.get_by_placeholder("Search traces by request").fill("reward=0")
        page.get_by_text(scored[0], exact=True).wait_for(state="hidden")
        text = _text(page)
        assert all(q in text for q in failed)
        assert not any(q in text for q in scored)

        # The Media & Tables tab: per step, one table of its samples.
        table_shot = tmp_path / "outcome-table.png"
        _read_the_outcome_table(page, dashboard, demo_project, by_sample, table_shot)

    for picture, target in ((shot, SCREENSHOT), (table_shot, TABLE_SCREENSHOT)):
        assert picture.stat().st_size > 10_000
        if not target.exists() or os.environ.get("UPDATE_SCREENSHOTS") == "1":
            target.parent.mkdir(exist_ok=True)
            shutil.copyfile(picture, target)


def _read_the_outcome_table(page, dashboard: str, project: str, by_sample, shot: Path) -> None:
    """Step 2's table, read without opening a Trace: which samples scored, what each answered,
    which one stopped (and why), in sample order; one table per step."""
    page.goto(f"{dashboard}/media?project={project}")
    sections = page.locator(".table-section", has_text="rollout/outcomes")
    step_2 = sections.filter(has_text="Step: 2")
    step_2.first.wait_for()
    assert sections.count() == 3  # one table per step
    assert step_2.count() == 1
    table = step_2.first.locator("table")
    headers = [" ".join(h.split()).lower() for h in table.locator("th").all_inner_texts()]
    assert headers[:6] == ["sample_index", "rollout_n", "reward", "status", "detail", "answer"]
    assert headers[6:] == ["turns", "tokens", "latency_ms"]
    rows = [
        [" ".join(cell.split()) for cell in row.locator("td").all_inner_texts()]
        for row in table.locator("tbody tr").all()
    ]
    assert [row[0] for row in rows] == [str(i) for i in range(8)]  # in sample order
    for i, row in enumerate(rows[:7]):
        meta = by_sample[(2, i)]["metadata"]
        answer = by_sample[(2, i)]["messages"][-1]["content"]
        assert row[2] == f"{meta['reward']:g}" and row[3] == "success", row
        assert row[5] == answer, row
        assert row[6] == "2" and int(row[7]) > 0, row  # two model turns, their tokens
    stuck = rows[7]
    assert stuck[2] == "" and stuck[3] == "partial", stuck
    # Where it stopped: the spans still open at the flush, the tool call first.
    assert stuck[4].startswith("flush: still open: execute_tool calculator"), stuck
    step_2.first.scroll_into_view_if_needed()
    page.screenshot(path=str(shot))


def test_a_trl_completion_in_the_traces_page(project, trackio_dir, tmp_path):
    """``examples/trl_grpo.py`` (the real TRL, in its environment): a completion's row and
    header read as TRL scored it, the judge's span in its tree, the prompt and completion in the
    conversation."""
    assert TRL_PYTHON.exists(), f"{TRL_PYTHON} is missing: `make test-packages` makes it"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACKIO_"))}
    env.update(TRACKIO_DIR=trackio_dir, PYTHONPATH=str(ROOT), TRACKIO_DISABLE_TELEMETRY="1")
    command = [str(TRL_PYTHON), "examples/trl_grpo.py", "--project", project]
    command += ["--run-name", "grpo", "--output-dir", str(tmp_path / "out")]
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    traces = read_traces(project, "grpo")
    sample = next(t for t in traces if t["step"] == 2 and t["metadata"]["sample_index"] == 1)
    meta = sample["metadata"]
    prompt = sample["messages"][0]["content"]
    shown = {key: f"{value:.10g}" for key, value in meta.items() if isinstance(value, float)}
    header = (
        f"step: 2 sample_index: 1 rollout_n: 1 reward: {shown['reward']} "
        f"advantage: {shown['advantage']} reward.brevity: {shown['reward.brevity']} "
        f"reward.judge: {shown['reward.judge']} status: reward {meta['reward']:g} group: 0"
    )
    with _show(project) as url, _traces_page(f"{url}/traces?project={project}", 1100) as page:
        step_filter = page.locator("select", has=page.locator("option", has_text="All steps"))
        step_filter.select_option("2")
        sort = page.locator("select", has=page.locator("option", has_text="Oldest first"))
        sort.select_option("request_time_asc")
        # The step's four completions, once the page shows only them (it re-renders as its
        # data comes: later on a busy machine).
        page.wait_for_function(_ONLY_STEP_ROWS, arg={"step": "2", "count": 4})
        rows = page.locator("tr.trace-row").all_inner_texts()
        assert len(rows) == 4, rows
        page.locator("tr.trace-row").nth(1).click()
        page.get_by_text(re.compile(r"^execution$", re.IGNORECASE)).wait_for()
        text = _text(page)
        assert header in text, text
        for name in ("trl.completion", "generate", "judge"):
            assert name in text, name
        usage = next(s["usage"] for s in sample["spans"] if s["name"] == "generate")
        assert f"Tokens {usage['total_tokens']}" in text
        sort.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(300)
        shot = tmp_path / "trl-trace.png"
        page.screenshot(path=str(shot))
        page.get_by_text("Conversation", exact=True).click()
        assert f"USER {prompt}" in _text(page)
    if not TRL_SCREENSHOT.exists() or os.environ.get("UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, TRL_SCREENSHOT)


IMAGE_SCREENSHOT = ROOT / "docs" / "image-evaluation.png"


def test_an_image_and_an_evaluation_in_the_traces_page(project, tmp_path):
    """A vision sample: its prompt image drawn in the conversation (a Trackio image file, not
    base64), a judge's evaluation result in the header and the pill."""
    import base64
    import io
    import json

    from opentelemetry import _logs as otel_logs
    from opentelemetry import trace
    from PIL import Image, ImageDraw

    import otel_trackio

    picture = Image.new("RGB", (240, 160), (250, 250, 250))
    draw = ImageDraw.Draw(picture)
    draw.rectangle((40, 40, 120, 120), fill=(220, 30, 30))
    draw.ellipse((140, 50, 210, 120), fill=(30, 90, 220))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    image = base64.b64encode(buffer.getvalue()).decode()
    question = "How many shapes are in this picture?"
    user = {"role": "user", "parts": [
        {"type": "text", "content": question},
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": image},
    ]}  # fmt: skip
    answer = {
        "role": "assistant",
        "parts": [{"type": "text", "content": "Two: a square, a circle."}],
    }
    handle = otel_trackio.configure(project, "vision", outcome_attributes=("correctness",))
    tracer = trace.get_tracer("vision")
    with tracer.start_as_current_span("rollout", attributes={"step": 5, "sample_index": 0}):
        with tracer.start_as_current_span("chat vlm", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "tiny-vlm",
            "gen_ai.input.messages": json.dumps([user]),
            "gen_ai.output.messages": json.dumps([answer]),
            "gen_ai.usage.input_tokens": 310, "gen_ai.usage.output_tokens": 9,
        }) as chat:  # fmt: skip
            context = trace.set_span_in_context(chat)
        otel_logs.get_logger("judge").emit(otel_logs.LogRecord(
            event_name="gen_ai.evaluation.result",
            attributes={
                "gen_ai.evaluation.name": "correctness", "gen_ai.evaluation.score.value": 1.0,
                "gen_ai.evaluation.score.label": "correct",
                "gen_ai.evaluation.explanation": "two shapes, both named",
            },
            context=context,
        ))  # fmt: skip
    handle.shutdown()
    (stored,) = read_traces(project, "vision")
    drawn = stored["messages"][0]["content"][1]
    assert drawn["_type"] == "trackio.image", drawn

    with _show(project) as url, _traces_page(f"{url}/traces?project={project}", 1000) as page:
        row = page.locator("tr.trace-row", has_text=question)
        row.wait_for()
        assert "correctness 1" in " ".join(row.inner_text().split()).lower()
        row.click()
        page.get_by_text("Conversation", exact=True).click()
        image_element = page.locator("img[src*='.png']").first
        image_element.wait_for()
        page.wait_for_function(
            "(img) => img.complete && img.naturalWidth > 0", arg=image_element.element_handle()
        )
        text = _text(page)
        assert "correctness: 1 status: correctness 1 correctness.label: correct" in text, text
        page.wait_for_timeout(300)
        shot = tmp_path / "image-evaluation.png"
        page.screenshot(path=str(shot))
    if not IMAGE_SCREENSHOT.exists() or os.environ.get("UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, IMAGE_SCREENSHOT)
