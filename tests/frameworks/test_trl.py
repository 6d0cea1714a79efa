"""TRL's real GRPOTrainer with ``otel_trackio.trl.trace_rollouts``: ``examples/trl_grpo.py`` run as
a user runs it, on CPU, in the TRL environment ``make test-packages`` makes (TRL 1.16,
transformers 5.25, CPU torch 2.13; a tiny random Qwen2 built in code, nothing downloaded), with
``report_to="trackio"``: TRL's own Trackio callback logs its curves beside the Traces.

Everything is counted in raw SQLite by run id: two runs of one name would hide each other behind
Trackio's by-name readers.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import subprocess
import time
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import TRL_PYTHON
from test_doc_commands import documented

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trl_grpo.py"
TRL_TORCHRUN = TRL_PYTHON.parent / "torchrun"
PROMPTS = {"what is two plus three", "what is three plus three", "say hello", "the answer is"}
BATCH = 4  # per_device_train_batch_size in the example


def run_example(tmp_path: Path, *args: str, ranks: int = 1) -> str:
    """Run the example in the TRL environment with its own ``TRACKIO_DIR``; its output."""
    assert TRL_PYTHON.exists(), f"{TRL_PYTHON} is missing: `make test-packages` makes it"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACKIO_"))}
    env["TRACKIO_DIR"] = str(tmp_path / "trackio")
    env["PYTHONPATH"] = str(ROOT)
    command = [str(TRL_PYTHON), str(EXAMPLE)]
    if ranks > 1:
        command = [str(TRL_TORCHRUN), "--nproc_per_node", str(ranks), str(EXAMPLE)]
    command += ["--output-dir", str(tmp_path / "out"), *args]
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout + result.stderr


def stored(tmp_path: Path, project: str = "trl-demo") -> tuple[list[Any], list[Any]]:
    """(run_id, run_name, step, metrics) of every metrics row and (run_id, step, metadata,
    messages, spans) of every Trace, read raw."""
    with sqlite3.connect(tmp_path / "trackio" / f"{project}.db") as db:
        metrics = [
            (run_id, name, step, json.loads(row))
            for run_id, name, step, row in db.execute(
                "SELECT run_id, run_name, step, metrics FROM metrics"
            )
        ]
        traces = [
            (run_id, step, json.loads(meta), json.loads(messages), json.loads(spans))
            for run_id, step, meta, messages, spans in db.execute(
                "SELECT run_id, step, metadata, messages, spans FROM traces"
            )
        ]
    return metrics, traces


def check_run(tmp_path: Path, completions: int, project: str = "trl-demo") -> tuple[str, list[Any]]:
    """One run holds TRL's curves and a Trace per completion, each once, at the step TRL logged
    that batch's reward, whose mean is TRL's ``train/reward`` there; the run id and the Traces."""
    metrics, traces = stored(tmp_path, project)
    runs = {row[0] for row in metrics} | {row[0] for row in traces}
    assert len(runs) == 1, f"one run expected, found {runs}"
    identities = Counter((step, meta["sample_index"]) for _, step, meta, _, _ in traces)
    assert len(traces) == completions, len(traces)
    assert max(identities.values()) == 1, [k for k, n in identities.items() if n > 1]
    logged = {  # TRL's mean reward of the batches logged at a step, training or evaluation
        step: row.get("train/reward", row.get("eval/reward"))
        for _, _, step, row in metrics
        if "train/reward" in row or "eval/reward" in row
    }
    evaluations = {step for _, _, step, row in metrics if "eval/reward" in row}
    rewards: dict[int, list[float]] = defaultdict(list)
    for _, step, meta, _, _ in traces:
        rewards[step].append(meta["reward"])
        assert bool(meta.get("validate")) is (step in evaluations), (step, meta)
    assert set(rewards) == set(logged), (sorted(rewards), sorted(logged))
    for step, values in rewards.items():
        assert math.isclose(sum(values) / len(values), logged[step], rel_tol=1e-4), step
    return runs.pop(), traces


def check_trace(meta: dict, messages: list, spans: list) -> None:
    """A completion's Trace reads as TRL generated and scored it."""
    assert messages[0]["role"] == "user" and messages[0]["content"] in PROMPTS, messages
    assert messages[-1]["role"] == "assistant", messages
    for key in ("reward", "advantage", "reward.brevity", "reward.judge", "group", "rollout_n"):
        assert key in meta, (key, meta)
    assert meta["reward"] == pytest.approx(meta["reward.brevity"] + meta["reward.judge"])
    index = meta["sample_index"]
    assert meta["group"] == index // 2 and meta["rollout_n"] == index % 2
    assert meta["status"].startswith("reward ")
    names = Counter(span["name"] for span in spans)  # the user's judge span joined
    assert names == {"trl.completion": 1, "generate": 1, "judge": 1}, names
    (generation,) = [span for span in spans if span["kind"] == "generation"]
    assert generation["model"] == "tiny-qwen2"
    assert generation["usage"]["input_tokens"] > 0 and generation["usage"]["output_tokens"] > 0


@pytest.mark.parametrize(
    ("args", "completions"),
    [
        pytest.param(("--configure-first",), 4 * BATCH, id="configure-first"),
        pytest.param(("--trainer", "rloo"), 4 * BATCH, id="rloo"),
        # evaluations (4 prompts x 2) after steps 2 and 4 move TRL's later rows one step each
        pytest.param(("--eval-steps", "2"), 4 * BATCH + 2 * 8, id="with-evaluations"),
        pytest.param(("--run-name", ""), 4 * BATCH, id="trackio-picks-the-name"),
        # batches generated at steps 0, 2, 4, 6, each of 2 x 4 completions, logged at 3, 6, 7
        pytest.param(
            ("--steps", "7", "--steps-per-generation", "2", "--logging-steps", "3"),
            4 * 2 * BATCH,
            id="steps-per-generation-2-logging-steps-3",
        ),
    ],
)
def test_a_trace_per_completion_in_trls_run_at_its_steps(
    tmp_path: Path, args: tuple[str, ...], completions: int
) -> None:
    output = run_example(tmp_path, *args)
    _, traces = check_run(tmp_path, completions)
    for _, _, meta, messages, spans in traces:
        check_trace(meta, messages, spans)
    assert f"otel-trackio: {completions} samples logged to 'trl-demo'" in output
    assert "0 partial, 0 lost" in output


def test_max_samples_per_step_caps_the_traces_a_step_keeps(tmp_path: Path) -> None:
    run_example(tmp_path, "--max-samples-per-step", "2")
    _, traces = stored(tmp_path)
    per_step = Counter(step for _, step, _, _, _ in traces)
    assert sorted(per_step) == [1, 2, 3, 4] and set(per_step.values()) == {2}, per_step


def test_two_ranks_trace_into_the_one_run(tmp_path: Path) -> None:
    """Two CPU processes (torchrun; accelerate's gloo backend): each traces its own
    completions; every completion of both ranks' batches is in TRL's one run, once."""
    run_example(tmp_path, ranks=2)
    _, traces = check_run(tmp_path, 2 * 4 * BATCH)
    for _, _, meta, messages, spans in traces:
        check_trace(meta, messages, spans)


def test_the_trl_pages_commands_run_as_written(tmp_path: Path) -> None:
    """docs/trl.md's commands, read from the page, in a shell whose PATH is the TRL environment's:
    the example with no arguments (TRL opens the run first), then ``trackio show`` on it."""
    assert TRL_PYTHON.exists(), f"{TRL_PYTHON} is missing: `make test-packages` makes it"
    example, show = documented(r"python examples/trl_grpo\.py|trackio show --project trl-demo")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACKIO_"))}
    env["PATH"] = f"{TRL_PYTHON.parent}{os.pathsep}{env.get('PATH', '')}"
    env["TRACKIO_DIR"] = str(tmp_path / "trackio")
    env["GRADIO_SERVER_PORT"] = str(port)
    done = subprocess.run(
        example, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "0 partial, 0 lost" in done.stderr, done.stderr[-4000:]
    _, traces = check_run(tmp_path, 4 * BATCH)
    for _, _, meta, messages, spans in traces:
        check_trace(meta, messages, spans)
    said = tmp_path / "show.out"
    with open(said, "w") as out:
        server = subprocess.Popen(f"exec {show}", shell=True, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 120
        while f"http://127.0.0.1:{port}" not in said.read_text():
            assert server.poll() is None and time.monotonic() < deadline, said.read_text()
            time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/?project=trl-demo") as page:
            assert page.status == 200
    finally:
        server.terminate()
        server.wait(timeout=60)
