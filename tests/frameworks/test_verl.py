"""verl without code changes: ``VERL_USE_EXTERNAL_MODULES=otel_trackio.verl``, backend ``otel``.

Each worker is its own process (``tests/verl_agent_loop.py``: a ``ToolAgentLoop``-shaped agent
loop, tool and server client decorated with verl's real ``rollout_trace_op``, samples under its
real ``rollout_trace_attr``). verl's real ``verl/utils/rollout_trace.py`` comes from the verl
0.9.1 wheel (``make test`` downloads it, 1.7 MB) and is loaded under stub parent packages: the
real ``verl/__init__.py`` imports torch, tensordict, transformers and ray first, too heavy for
this suite. The stub ``verl/__init__.py`` imports ``VERL_USE_EXTERNAL_MODULES`` the way the real
one does (before any module that uses the rollout trace); ``verl.utils.ray_utils`` is a stub with
its ``get_event_loop``. Everything is read back from real Trackio storage.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import read_traces, stored, trace_usage
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_trackio import TrackioSpanExporter

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

HERE = Path(__file__).resolve().parents[1]  # tests/
EXAMPLES = HERE.parent / "examples"
WHEELS = sorted((Path(sys.prefix) / "verl-0.9.1").glob("verl-*.whl"))
#: the real verl package on CPU torch (`make test-packages` makes this environment)
VERL_PYTHON = HERE.parent / ".venv" / "verl-env" / "bin" / "python"
STEPS = (1, 2)
ROLLOUT_N = 2
SYSTEM = "You are a calculator agent ."

_STUB_INIT = '''"""Stub of verl/__init__.py: external modules, then the "verl.plugins" entry points
(VERL_USE_EXTERNAL_PLUGINS: auto, none or names), before anything else, as the real one does."""
import importlib
import os
from importlib.metadata import entry_points

for _name in filter(None, os.getenv("VERL_USE_EXTERNAL_MODULES", "").split(",")):
    importlib.import_module(_name)
_policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
if _policy != "none":
    _allowed = None if _policy == "auto" else {n.strip() for n in _policy.split(",")}
    for _entry in entry_points(group="verl.plugins"):
        if _allowed is None or _entry.name in _allowed:
            try:
                _entry.load()
            except Exception:
                pass
'''
_STUB_RAY_UTILS = '''"""Stub of verl/utils/ray_utils.py: what rollout_trace.py imports from it."""
import asyncio


def get_event_loop():
    try:
        return asyncio.get_event_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        return loop
'''


def run_in_verl(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ``args`` with the real verl environment's Python (``make test-packages`` makes it);
    its stdout. ``env``: the environment (default: this one without OTel and verl variables)."""
    assert VERL_PYTHON.exists(), f"{VERL_PYTHON} is missing: `make test-packages` makes it"
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "VERL_"))}
    result = subprocess.run(
        [str(VERL_PYTHON), *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def raw_rows(project: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(run_id, step, metrics) of every metrics row and (run_id, step, metadata) of every Trace
    of ``project``, from raw SQLite: runs of one name would hide each other behind the API."""
    with sqlite3.connect(Path(os.environ["TRACKIO_DIR"]) / f"{project}.db") as db:
        metrics = db.execute("SELECT run_id, step, metrics FROM metrics").fetchall()
        traces = db.execute("SELECT run_id, step, metadata FROM traces").fetchall()
    return metrics, traces


@pytest.fixture(scope="module")
def verl_tree(tmp_path_factory) -> Path:
    """A ``verl`` package: the wheel's real ``rollout_trace.py`` under stub parents."""
    if not WHEELS:
        pytest.skip("verl's wheel is missing: run `make venv` (it downloads verl==0.9.1)")
    root = tmp_path_factory.mktemp("verl-stub")
    utils = root / "verl" / "utils"
    utils.mkdir(parents=True)
    (root / "verl" / "__init__.py").write_text(_STUB_INIT)
    (utils / "__init__.py").write_text("")
    (utils / "ray_utils.py").write_text(_STUB_RAY_UTILS)
    with zipfile.ZipFile(WHEELS[-1]) as wheel:
        (utils / "rollout_trace.py").write_bytes(wheel.read("verl/utils/rollout_trace.py"))
    return root


def start_worker(verl_tree: Path, backend: str, project: str, first: int, cap: int, **env):
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "VERL_"))},
        "VERL_USE_EXTERNAL_MODULES": "otel_trackio.verl",
        "VERL_USE_EXTERNAL_PLUGINS": "none",  # the variable alone does it (the plugin: below)
        "PYTHONPATH": os.pathsep.join([str(verl_tree), str(HERE), str(EXAMPLES)]),
        **env,
    }
    args = [backend, project, "verl-exp", str(first), "4", str(cap)]
    return subprocess.Popen(
        [sys.executable, str(HERE / "verl_agent_loop.py"), *args],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(workers) -> None:
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err[-4000:]
        assert "done" in out


def assert_verl_samples(traces: list[dict], indices_per_step: int) -> None:
    """One Trace per (step, sample_index, rollout_n), whole, at its step, with the decoded
    conversation (the raw prompt, the tool call, the tool result, the answer), the tool span's
    arguments and result, and verl's identity."""
    keys = Counter(
        (t["step"], t["metadata"]["sample_index"], t["metadata"]["rollout_n"]) for t in traces
    )
    assert set(keys.values()) == {1}, keys  # nothing doubled
    for step in STEPS:
        indices = {i for s, i, _ in keys if s == step}
        assert len(indices) == indices_per_step, (step, indices)
        for index in indices:
            assert {n for s, i, n in keys if (s, i) == (step, index)} == set(range(ROLLOUT_N))
    for trace in traces:
        meta = trace["metadata"]
        index = meta["sample_index"]
        assert meta["status"] == "success" and "partial" not in meta, meta
        assert "validate" not in meta and meta["experiment_name"] == "verl-exp"  # only when true
        # the word tokenizer's decoding of '<tool_call> {"name": "calculator", ...} </tool_call>'
        arguments = f'{{ " expr " : " {index} + 3 " }}'
        call = f'{{ " name " : " calculator " , " arguments " : {arguments} }}'
        call = f"<tool_call> {call} </tool_call>"
        assert trace["messages"] == [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"What is {index} + 3 ?"},
            {"role": "assistant", "content": call},
            {
                "role": "user",
                "content": f"<tool_response> {index + 3} </tool_response> <assistant>",
            },
            {"role": "assistant", "content": f"The answer is {index + 3} ."},
        ], trace["messages"]
        spans = {s["name"]: s for s in trace["spans"]}
        tool = spans["CalculatorTool.execute"]
        assert tool["kind"] == "tool"
        assert tool["input"] == {"expr": f"{index}+3"} and tool["output"] == str(index + 3)
        assert tool["metadata"]["verl.tool_reward"] == 0.5
        generations = [s for s in trace["spans"] if s["kind"] == "generation"]
        assert [g["name"] for g in generations] == ["LLMServerClient.generate"] * 2
        assert all(g["usage"]["input_tokens"] > 0 for g in generations)
        assert spans["ToolAgentLoop.run"]["kind"] == "span"
        assert spans["agent_loop"]["parent_id"] is None
        assert trace_usage(trace)["output_tokens"] == sum(
            g["usage"]["output_tokens"] for g in generations
        )


def test_workers_send_verls_own_trace_to_the_receiver(verl_tree, project, start_receiver):
    """Two workers, OTLP/HTTP into one receiver (routed to verl's project / experiment):
    ``max_samples_per_step_per_worker=2`` keeps 2 of each worker's 4 prompts per step, with
    both their ``rollout_n``; token ids decoded in the workers' exporters."""
    receiver = start_receiver(name="unused")
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    workers = [start_worker(verl_tree, "otel", project, first, 2, **endpoint) for first in (0, 4)]
    finish(workers)
    receiver.stop()
    traces = read_traces(project, "verl-exp")
    assert_verl_samples(traces, indices_per_step=4)
    for step in STEPS:  # 2 per worker
        indices = {t["metadata"]["sample_index"] for t in traces if t["step"] == step}
        assert len(indices & {0, 1, 2, 3}) == len(indices & {4, 5, 6, 7}) == 2


RAY_DRIVER = """
# verl's shape: the driver imports verl, Ray actors (AgentLoopWorker) run the agent loops; the
# actors inherit the driver's environment (VERL_USE_EXTERNAL_MODULES, the OTLP endpoint).
import asyncio
import sys

import ray
import verl  # noqa: F401

project = sys.argv[1]


@ray.remote
class AgentLoopWorker:
    def generate_sequences(self, first):
        import verl_agent_loop

        asyncio.run(verl_agent_loop.main("otel", project, "verl-exp", first, 4, 2))
        return first


ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
workers = [AgentLoopWorker.remote() for _ in range(2)]
print(ray.get([w.generate_sequences.remote(f) for w, f in zip(workers, (0, 4))]), flush=True)
ray.shutdown()
"""


def test_ray_workers_send_verls_own_trace_to_the_receiver(verl_tree, project, start_receiver):
    """The same in real Ray actors: each worker process imports verl, so the module, itself."""
    pytest.importorskip("ray", reason="Ray is in the test extra; `make test` installs it")
    receiver = start_receiver(name="unused")
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAY_ADDRESS"))},
        "VERL_USE_EXTERNAL_MODULES": "otel_trackio.verl",
        "PYTHONPATH": os.pathsep.join([str(verl_tree), str(HERE), str(EXAMPLES)]),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
    }
    result = subprocess.run(
        [sys.executable, "-c", RAY_DRIVER, project],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    receiver.stop()
    traces = read_traces(project, "verl-exp")
    assert_verl_samples(traces, indices_per_step=4)


def test_workers_log_verls_own_trace_into_one_trackio_run(verl_tree, project):
    """No OTLP endpoint: every worker logs into the Trackio run named by verl's project and
    experiment, all samples kept (no cap). No ``VERL_USE_EXTERNAL_MODULES`` either: verl loads
    otel-trackio's ``verl.plugins`` entry point by itself (its default, ``auto``)."""
    plugin = {"VERL_USE_EXTERNAL_MODULES": "", "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    finish([start_worker(verl_tree, "otel", project, first, -1, **plugin) for first in (0, 4)])
    assert_verl_samples(read_traces(project, "verl-exp"), indices_per_step=8)


def test_other_backends_run_verls_own_code(verl_tree, project, tmp_path):
    """``trace.backend=trackio`` (verl's own Trackio logging) is untouched by the module: its
    flat per-call Traces, not ours."""
    finish([start_worker(verl_tree, "trackio", project, 0, -1, TRACKIO_DIR=str(tmp_path))])
    assert read_traces(project) == []  # nothing of ours in the suite's folder


def test_drop_ins_for_a_custom_agent_loop(project, tracer_provider):
    """``from otel_trackio.verl import rollout_trace_attr, rollout_trace_op`` (no verl at all):
    verl's signatures, OTel spans to the provider in place."""
    import asyncio

    from otel_trackio.verl import rollout_trace_attr, rollout_trace_op

    class Tool:
        name = "echo"

        @rollout_trace_op
        async def execute(self, instance_id, parameters, **kwargs):
            return {"text": parameters["say"]}, 1.0, {}

    class Loop:
        @rollout_trace_op
        async def run(self, sampling_params, **kwargs):
            return (await Tool().execute("i", {"say": "hi"}))[0]["text"]

        @rollout_trace_op
        def score(self, text):
            return len(text)

    exporter = TrackioSpanExporter(project=project, name="r")
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    import otel_trackio.verl as module

    module._provider = provider
    try:

        async def sample(index: int) -> None:
            with rollout_trace_attr(sample_index=index, step=3, rollout_n=0, name="custom"):
                loop = Loop()
                await loop.run({}, raw_prompt=[{"role": "user", "content": "say hi"}])
                loop.score("hi")
            with rollout_trace_attr(sample_index=index, step=3, trace=False):
                await Loop().run({}, raw_prompt=[{"role": "user", "content": "hidden"}])

        asyncio.run(sample(0))
    finally:
        module._provider = None
        provider.shutdown()
    (trace,) = read_traces(project, "r")
    assert trace["step"] == 3 and trace["metadata"]["sample_index"] == 0
    names = sorted(s["name"] for s in trace["spans"])
    assert names == sorted(
        [
            "custom",
            "test_drop_ins_for_a_custom_agent_loop.<locals>.Loop.run",
            "test_drop_ins_for_a_custom_agent_loop.<locals>.Tool.execute",
            "test_drop_ins_for_a_custom_agent_loop.<locals>.Loop.score",
        ]
    )
    (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
    assert tool["input"] == {"say": "hi"} and tool["output"] == "hi"
    (agent,) = [s for s in trace["spans"] if s["name"].endswith("Loop.run")]
    assert agent["input"] == [{"role": "user", "content": "say hi"}]
    assert agent["metadata"]["gen_ai.operation.name"] == "invoke_agent"


def test_a_call_whose_result_cannot_be_recorded_still_returns_it(project, tracer_provider):
    """Recording is best effort: the rollout gets its result and the span still ends."""
    import asyncio

    from otel_trackio.verl import rollout_trace_attr, rollout_trace_op

    class Unreadable:
        @property
        def text(self):
            raise RuntimeError("no text")

    class Tool:
        @rollout_trace_op
        async def execute(self, instance_id, parameters, **kwargs):
            return Unreadable(), 0.0, {}

    exporter = TrackioSpanExporter(project=project, name="r")
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    import otel_trackio.verl as module

    module._provider = provider
    try:

        async def sample() -> object:
            with rollout_trace_attr(sample_index=0, step=1):
                return await Tool().execute("i", {"x": 1})

        response, reward, _ = asyncio.run(sample())
    finally:
        module._provider = None
        provider.shutdown()
    assert isinstance(response, Unreadable) and reward == 0.0
    (trace,) = read_traces(project, "r")
    assert len(trace["spans"]) == 2


@pytest.mark.parametrize("order", ["tracking-first", "samples-first"])
def test_verls_tracking_and_its_samples_share_one_run(project, order):
    """The real verl package: ``import verl`` loads otel-trackio through verl's own plugin entry
    points; verl's ``Tracking`` (trackio logger) and its rollout trace (``trace.backend=otel``)
    write into one Trackio run of the experiment's name, whichever opens it first: the samples,
    ``reward/mean`` and ``val/generations`` together. Read from raw SQLite: runs of one name
    would hide each other."""
    run_in_verl(str(HERE / "verl_tracking.py"), order, project, "exp")
    metrics, traces = raw_rows(project)
    assert len({run for run, _, _ in metrics} | {run for run, _, _ in traces}) == 1
    rewards = sorted(
        (step, json.loads(values)["reward/mean"])
        for _, step, values in metrics
        if "reward/mean" in json.loads(values)
    )
    assert rewards == [(1, 0.5), (2, 1.0)]
    samples = Counter(
        (step, json.loads(meta).get("sample_index"), json.loads(meta).get("source"))
        for _, step, meta in traces
    )
    assert samples == Counter(
        [*((s, i, None) for s in STEPS for i in range(3)), (2, 0, "validation_generations")]
    )


def _tool_agent_conversation(sample_index: int) -> list[dict]:
    exprs = [("2+2", "4")] if sample_index % 2 == 0 else [("2+2", "4"), ("3+3", "6")]
    call = {"id": "", "type": "function"}
    return [
        {"role": "system", "content": "You are a calculator agent."},
        {"role": "user", "content": "What is 2+2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {**call, "function": {"name": "calculator", "arguments": f'{{"expr": "{e}"}}'}}
                for e, _ in exprs
            ],
        },
        *({"role": "tool", "content": result} for _, result in exprs),
        {"role": "assistant", "content": "The answer is 4."},
    ]


@pytest.mark.parametrize(
    ("route", "template"), [("trackio", "chatml"), ("receiver", "chatml"), ("trackio", "plain")]
)
def test_verls_tool_agent_loop_stores_the_conversation_it_held(
    project, start_receiver, route, template
):
    """verl's real ``ToolAgentLoop`` (hermes parser, ``LLMServerClient.generate``, a traced
    ``BaseTool``; the policy scripted behind the client, a locally trained tokenizer with a
    ChatML template or one no markup reader knows), through verl's plugin loading, straight into
    the run or over OTLP into a receiver: each Trace's conversation is the messages the agent loop
    held — tool calls parsed, each tool result a ``tool`` message, no template markup — while the
    generation spans keep the decoded text and the token counts."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "VERL_"))}
    receiver = start_receiver(name="unused") if route == "receiver" else None
    if receiver is not None:
        environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
    out = run_in_verl(str(HERE / "verl_tool_agent.py"), project, "exp", template, env=environ)
    if receiver is not None:
        receiver.stop()
    held = [json.loads(line[5:]) for line in out.splitlines() if line.startswith("HELD ")]
    traces = read_traces(project, "exp")
    assert [(t["step"], t["metadata"]["sample_index"]) for t in traces] == [
        (s["step"], s["sample_index"]) for s in held
    ]
    for trace, sample in zip(traces, held, strict=True):
        expected = _tool_agent_conversation(sample["sample_index"])
        assert [m["role"] for m in sample["messages"]] == [m["role"] for m in expected]
        assert stored(trace) == expected, json.dumps(trace["messages"], indent=1)
        generations = [s for s in trace["spans"] if s["kind"] == "generation"]
        assert len(generations) == 2 and all(g["usage"]["output_tokens"] for g in generations)
        assert generations[0]["output"].endswith("</tool_call><|im_end|>")  # decoded as it was
        assert (
            generations[0]["metadata"]["prompt_ids.count"]
            == generations[0]["usage"]["input_tokens"]
        )
        tools = [s for s in trace["spans"] if s["kind"] == "tool"]
        assert sorted((t["input"]["expr"], t["output"]) for t in tools) == [
            (e, r) for e, r in (("2+2", "4"), ("3+3", "6"))[: len(tools)]
        ]
        assert all(t["metadata"]["verl.tool_reward"] == 0.5 for t in tools)


RAY_TOOL_AGENT_DRIVER = """
# verl's shape: Ray actors (AgentLoopWorker) run the agent loops; the driver shuts Ray down right
# after their last result, which kills the actors and their child processes within seconds.
import asyncio
import sys

import ray
from verl.utils.tracking import Tracking, ValidationGenerationsLogger
from verl_tracking import CONFIG

project = sys.argv[1]


@ray.remote
class AgentLoopWorker:
    def generate_sequences(self, first):
        import verl_tool_agent

        asyncio.run(verl_tool_agent.main(project, "exp", "chatml", str(first)))
        return first


loggers = CONFIG["trainer"]["logger"]
tracking = Tracking(project, "exp", default_backend=loggers, config=CONFIG)  # the trainer's
ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
workers = [AgentLoopWorker.remote() for _ in range(2)]
print(ray.get([w.generate_sequences.remote(f) for w, f in zip(workers, (0, 2))]), flush=True)
tracking.log({"reward/mean": 0.5}, step=2)
ValidationGenerationsLogger(project, "exp").log(loggers, [("what is 2+2?", "4", 1.0)], 2)
ray.shutdown()
tracking.finish()
"""


def test_verls_agent_loop_in_ray_actors_stores_every_sample_by_the_last_result(project):
    """Two Ray actors run verl's real ``ToolAgentLoop`` with the default route (straight into
    the run, offloaded) and the driver calls ``ray.shutdown()`` right after their last result:
    every sample is in Trackio's storage when the driver exits — each worker's batch returns
    only once its spans are stored — with nothing started afterwards to drain a spool; the
    driver's ``Tracking`` metrics and validation generations are in the same run."""
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "VERL_", "RAY_"))},
        "PYTHONPATH": str(HERE),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
    }
    run_in_verl("-c", RAY_TOOL_AGENT_DRIVER, project, env=environ)
    metrics, traces = raw_rows(project)
    assert len({run for run, _, _ in metrics} | {run for run, _, _ in traces}) == 1  # one run
    assert any("reward/mean" in json.loads(values) for _, _, values in metrics)
    keys = Counter((step, json.loads(meta).get("sample_index")) for _, step, meta in traces)
    expected = Counter((step, index) for step in STEPS for index in range(4))
    assert keys == expected + Counter([(2, 0)])  # and the validation generation
