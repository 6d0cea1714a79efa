"""rollout() and @traced: real OTel SDK spans, real Trackio storage read back."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pydantic
import pytest
from conftest import read_traces, trace_id
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from otel_trackio import (
    StepSampler,
    TrackioSpanExporter,
    rollout,
    set_step,
    traced,
)
from otel_trackio._core.values import json_safe
from otel_trackio._engine.open_samples import lookup_open_sample
from otel_trackio.instrument import MAX_STRING_CHARS


def _memory_provider(sampler=None):
    memory = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


# -- concurrency: many samples, none mixes --------------------------------------------------


@traced(kind="generation")
async def generate(prompt: str, temperature: float = 0.7) -> str:
    await asyncio.sleep(random.random() / 1000)
    return f"answer to {prompt}"


@traced(kind="tool")
async def calculator(expr: str) -> str:
    await asyncio.sleep(random.random() / 1000)
    return f"result of {expr}"


@traced()
def score(tag: str) -> float:
    return float(len(tag))


async def _one_sample(provider, step: int, index: int, n: int) -> None:
    tag = f"s{step}-i{index}-n{n}"
    async with rollout(step, index, rollout_n=n, tracer_provider=provider, tag=tag):
        await generate(f"question {tag}")
        # An asyncio task started inside the sample belongs to it.
        await asyncio.create_task(calculator(f"expr {tag}"))
        # So does a thread that copies the context.
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        await loop.run_in_executor(None, ctx.run, score, tag)


def test_256_concurrent_asyncio_samples_land_as_256_traces_each_with_only_its_own(
    project, tracer_provider
):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def main() -> None:
        jobs = [
            _one_sample(provider, step, index, n)
            for step in range(4)
            for index in range(32)
            for n in range(2)
        ]
        random.shuffle(jobs)
        await asyncio.gather(*jobs)

    asyncio.run(main())
    provider.shutdown()

    traces = read_traces(project, "r")
    assert len(traces) == 256
    seen = set()
    for t in traces:
        meta = t["metadata"]
        key = (meta["step"], meta["sample_index"], meta["rollout_n"])
        seen.add(key)
        tag = f"s{key[0]}-i{key[1]}-n{key[2]}"
        assert t["step"] == meta["step"]
        assert meta.get("partial") is not True
        assert "validate" not in meta  # a rollout: no validate: false in the header
        names = sorted(s["name"] for s in t["spans"])
        assert names == ["calculator", "generate", "rollout", "score"], names
        # Every recorded value in the Trace is this sample's own.
        for span in t["spans"]:
            for side in ("input", "output"):
                if side in span and span["name"] != "score":
                    assert tag in json.dumps(span[side]), (tag, span)
        texts = [m["content"] for m in t["messages"]]
        assert texts and all(tag in text for text in texts), (tag, texts)
        root = next(s for s in t["spans"] if s["name"] == "rollout")
        assert root["metadata"]["tag"] == tag
        assert all(s["parent_id"] == root["id"] for s in t["spans"] if s is not root)
    assert len(seen) == 256


def test_samples_under_a_step_span_are_its_children_and_still_one_trace_each(
    project, tracer_provider
):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")

    async def main() -> None:
        with tracer.start_as_current_span("train_step", attributes={"step": 7}):
            await asyncio.gather(*(_one_sample(provider, 7, i, 0) for i in range(8)))

    asyncio.run(main())
    provider.shutdown()
    samples = [t for t in read_traces(project, "r") if "sample_index" in t["metadata"]]
    assert sorted(t["metadata"]["sample_index"] for t in samples) == list(range(8))
    trace_ids = {trace_id(t) for t in samples}
    assert len(trace_ids) == 1  # one OTel trace (the step's), eight Trackio Traces
    for t in samples:
        assert len(t["spans"]) == 4
        assert t["step"] == 7


def test_validate_and_rollout_n_reach_the_metadata(project, tracer_provider):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with rollout(3, 5, rollout_n=2, validate=True, tracer_provider=provider, model="m"):
        pass
    with rollout(3, "prompt-9", tracer_provider=provider):
        pass
    provider.shutdown()
    traces = read_traces(project, "r")
    by_index = {t["metadata"]["sample_index"]: t["metadata"] for t in traces}
    assert by_index[5]["validate"] is True
    assert by_index[5]["rollout_n"] == 2
    assert by_index[5]["step"] == 3
    assert "validate" not in by_index["prompt-9"]
    assert "rollout_n" not in by_index["prompt-9"]


def test_open_sample_is_registered_and_an_early_flush_keeps_its_identity(project, tracer_provider):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with rollout(11, 4, rollout_n=1, tracer_provider=provider) as root:
        ctx = root.get_span_context()
        assert lookup_open_sample(ctx.trace_id, ctx.span_id)["sample_index"] == 4
        score("x")
        exporter.force_flush()  # the root is still open: the child goes out as partial
    assert lookup_open_sample(ctx.trace_id, ctx.span_id) is None
    provider.shutdown()
    partial = [t for t in read_traces(project, "r") if t["metadata"].get("partial")]
    assert len(partial) == 1
    meta = partial[0]["metadata"]
    assert (partial[0]["step"], meta["sample_index"], meta["rollout_n"]) == (11, 4, 1)


def test_rollout_records_an_exception_and_propagates_it():
    provider, memory = _memory_provider()
    with pytest.raises(KeyError), rollout(1, 1, tracer_provider=provider):
        raise KeyError("boom")
    (span,) = memory.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


def test_rollout_non_primitive_attributes_become_json():
    provider, memory = _memory_provider()
    with rollout(np.int64(1), 2, tracer_provider=provider, info={"a": [1, 2]}, tags=["x", "y"]):
        pass
    (span,) = memory.get_finished_spans()
    assert span.attributes["step"] == 1 and type(span.attributes["step"]) is int
    assert json.loads(span.attributes["info"]) == {"a": [1, 2]}
    assert list(span.attributes["tags"]) == ["x", "y"]


# -- @traced ----------------------------------------------------------------------------------


class Agent:
    def __init__(self, provider) -> None:
        self.provider = provider

    @traced(kind="tool")
    def search(self, query: str, limit: int = 3) -> list[str]:
        return [f"{query}-{i}" for i in range(limit)]

    @traced(kind="generation")
    async def respond(self, prompt: str) -> dict:
        return {"text": prompt.upper()}

    @classmethod
    @traced()
    def build(cls, name: str) -> str:
        return name

    @traced()
    @staticmethod
    def helper(x: int) -> int:
        return x * 2

    @traced("failing")
    async def fail(self, why: str) -> None:
        raise ValueError(why)


def _spans_by_name(memory):
    return {s.name: s for s in memory.get_finished_spans()}


def test_traced_methods_sync_and_async_drop_self_and_record_defaults():
    provider, memory = _memory_provider()
    agent = Agent(provider)
    with rollout(0, 0, tracer_provider=provider):
        assert agent.search("cats") == ["cats-0", "cats-1", "cats-2"]
        assert asyncio.run(agent.respond("hi")) == {"text": "HI"}
        assert Agent.build("b") == "b"
        assert Agent.helper(4) == 8
    spans = _spans_by_name(memory)
    search = spans["Agent.search"]
    assert json.loads(search.attributes["input.value"]) == {"query": "cats", "limit": 3}
    assert json.loads(search.attributes["output.value"]) == ["cats-0", "cats-1", "cats-2"]
    assert search.attributes["input.mime_type"] == "application/json"
    assert search.attributes["output.mime_type"] == "application/json"
    assert search.attributes["openinference.span.kind"] == "TOOL"
    respond = spans["Agent.respond"]
    assert respond.attributes["openinference.span.kind"] == "LLM"
    assert json.loads(respond.attributes["input.value"]) == {"prompt": "hi"}
    assert json.loads(respond.attributes["output.value"]) == {"text": "HI"}
    assert json.loads(spans["Agent.build"].attributes["input.value"]) == {"name": "b"}
    assert spans["Agent.build"].attributes["openinference.span.kind"] == "CHAIN"
    assert json.loads(spans["Agent.helper"].attributes["input.value"]) == {"x": 4}
    root = spans["rollout"]
    for name in ("Agent.search", "Agent.build", "Agent.helper"):
        assert spans[name].parent.span_id == root.context.span_id
    # asyncio.run copies the context: the coroutine's span is in the sample too.
    assert spans["Agent.respond"].parent.span_id == root.context.span_id


def test_traced_exception_sets_error_and_reraises_the_same_object():
    provider, memory = _memory_provider()
    agent = Agent(provider)
    errors = []

    @traced
    def sync_fail(x):
        error = RuntimeError(f"bad {x}")
        errors.append(error)
        raise error

    with rollout(0, 0, tracer_provider=provider):
        with pytest.raises(RuntimeError) as caught:
            sync_fail(1)
        assert caught.value is errors[0]
        with pytest.raises(ValueError, match="nope"):
            asyncio.run(agent.fail("nope"))
    spans = _spans_by_name(memory)
    for name, kind in (
        (
            "test_traced_exception_sets_error_and_reraises_the_same_object.<locals>.sync_fail",
            "RuntimeError",
        ),
        ("failing", "ValueError"),
    ):
        span = spans[name]
        assert span.status.status_code is StatusCode.ERROR
        events = [e for e in span.events if e.name == "exception"]
        assert len(events) == 1
        assert events[0].attributes["exception.type"] == kind
        assert "output.value" not in span.attributes
    assert spans["rollout"].status.status_code is StatusCode.UNSET


def test_traced_generators_cover_the_iteration():
    provider, memory = _memory_provider()

    @traced("numbers")
    def numbers(n):
        yield from range(n)

    @traced("anumbers")
    async def anumbers(n):
        for i in range(n):
            yield i

    async def consume():
        return [i async for i in anumbers(3)]

    with rollout(0, 0, tracer_provider=provider):
        assert list(numbers(3)) == [0, 1, 2]
        assert asyncio.run(consume()) == [0, 1, 2]
        gen = numbers(5)
        next(gen)
        gen.close()  # stopped early: not an error
    spans = memory.get_finished_spans()
    numbered = [s for s in spans if s.name == "numbers"]
    assert json.loads(numbered[0].attributes["output.value"]) == [0, 1, 2]
    assert all(s.status.status_code is StatusCode.UNSET for s in numbered)
    anumbered = next(s for s in spans if s.name == "anumbers")
    assert json.loads(anumbered.attributes["output.value"]) == [0, 1, 2]


def test_traced_without_recording_options_and_bad_kind():
    provider, memory = _memory_provider()

    @traced(record_inputs=False, record_outputs=False)
    def secret(password):
        return password

    with rollout(0, 0, tracer_provider=provider):
        assert secret("hunter2") == "hunter2"
    span = next(s for s in memory.get_finished_spans() if s.name.endswith("secret"))
    assert "input.value" not in span.attributes
    assert "output.value" not in span.attributes
    with pytest.raises(ValueError, match="kind"):
        traced(kind="banana")


def test_a_dropped_sample_serialises_nothing():
    provider, memory = _memory_provider(StepSampler(0))
    dumps = []

    class Expensive:
        def model_dump(self):
            dumps.append(1)
            return {"big": "x"}

    @traced()
    def step_fn(value):
        return value

    with rollout(0, 0, tracer_provider=provider) as root:
        assert not root.is_recording()
        assert step_fn(Expensive()) is not None
        ctx = root.get_span_context()
        assert lookup_open_sample(ctx.trace_id, ctx.span_id) is None
    assert dumps == []
    assert memory.get_finished_spans() == ()


def test_threads_copying_the_context_belong_to_their_sample():
    provider, memory = _memory_provider()
    barrier = threading.Barrier(8)

    @traced()
    def work(tag):
        barrier.wait(timeout=10)
        return tag

    def sample(i):
        with rollout(0, i, tracer_provider=provider):
            with ThreadPoolExecutor(1) as pool:
                pool.submit(contextvars.copy_context().run, work, f"t{i}").result()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(sample, range(8)))
    spans = memory.get_finished_spans()
    roots = {s.context.span_id: s.attributes["sample_index"] for s in spans if s.name == "rollout"}
    for span in spans:
        if span.name.endswith("work"):
            index = roots[span.parent.span_id]
            assert json.loads(span.attributes["output.value"]) == f"t{index}"


# -- JSON-safe values ---------------------------------------------------------------------------


@dataclasses.dataclass
class Point:
    x: int
    label: bytes


class Model(pydantic.BaseModel):
    name: str
    scores: list[float]


def test_json_safe_handles_common_rollout_values():
    value = {
        "point": Point(1, b"\x00\x01"),
        "model": Model(name="m", scores=[0.5]),
        "np_scalar": np.float32(1.5),
        "np_int": np.int64(7),
        "small": np.arange(3),
        "big": np.zeros((100, 100)),
        "blob": b"x" * 1000,
        "long": "y" * (MAX_STRING_CHARS + 10),
        "nan": float("nan"),
        "set": {3, 1},
        "obj": object(),
    }
    safe = json_safe(value)
    json.dumps(safe, allow_nan=False)
    assert safe["point"] == {"x": 1, "label": "<2 bytes>"}
    assert safe["model"] == {"name": "m", "scores": [0.5]}
    assert safe["np_scalar"] == 1.5
    assert safe["np_int"] == 7
    assert safe["small"] == [0, 1, 2]
    assert safe["big"] == {"dtype": "float64", "shape": [100, 100]}
    assert safe["blob"] == "<1000 bytes>"
    assert safe["long"].endswith("…[otel-trackio cut 10 chars]")
    assert safe["nan"] == "nan"
    assert safe["set"] == [1, 3]
    assert safe["obj"].startswith("<object object")


def test_json_safe_bounds_deep_and_wide_values():
    deep: list = []
    cursor = deep
    for _ in range(50):
        cursor.append([])
        cursor = cursor[0]
    wide = list(range(10_000))
    safe = json_safe({"deep": deep, "wide": wide})
    assert len(json.dumps(safe)) < 2000
    assert safe["wide"][-1] == "… 9936 more items"


# -- the verl-style example -------------------------------------------------------------------


def test_verl_style_example_runs_and_decodes_tokens(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path)}
    result = subprocess.run(  # --temp respects the TRACKIO_DIR it is given
        [
            sys.executable,
            str(repo / "examples" / "verl_style_agent_loop.py"),
            "--name",
            "ex",
            "--temp",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("Run finished") == 1, result.stdout
    # The run's summary (stderr) ends with an absolute trackio show command.
    assert f"open them with: TRACKIO_DIR={tmp_path} /" in result.stderr
    script = (
        "import json;from trackio.sqlite_storage import SQLiteStorage as S;"
        "print(json.dumps(S.get_traces('otel-trackio-verl-demo','ex')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    traces = json.loads(out.stdout)
    samples = [t for t in traces if t["metadata"].get("source") != "validation_generations"]
    generations = [t for t in traces if t["metadata"].get("source") == "validation_generations"]
    assert len(generations) == 5
    assert samples
    per_step: dict = {}
    for t in samples:
        meta = t["metadata"]
        assert "sample_index" in meta, meta  # nothing traced outside a sample
        per_step.setdefault(t["step"], set()).add(meta["sample_index"])
        names = {s["name"] for s in t["spans"]}
        assert {"generate", "calculator", "compute_score"} <= names
        assert t["messages"][0]["content"].startswith("What is")  # decoded token ids
        assert "reward" in next(s for s in t["spans"] if s["parent_id"] is None)["metadata"]
    assert all(len(indices) <= 3 for indices in per_step.values())
    assert all(("validate" in t["metadata"]) is (t["step"] == 3) for t in samples)
    # The header leads with the sample and its outcome; the root shows question -> answer.
    for t in samples:
        training = t["step"] < 3
        assert list(t["metadata"])[: 6 if training else 5] == [
            "step",
            "sample_index",
            *(["rollout_n"] if training else ["validate"]),
            "reward",
            "status",
            *(["prompt_uid"] if training else []),
        ]
        root = next(s for s in t["spans"] if s["parent_id"] is None)
        assert root["input"].startswith("What is") and root["output"].startswith("The answer is")
    # The metrics it records: the Metrics page has plots on the first run.
    script = (
        "import json;from trackio.sqlite_storage import SQLiteStorage as S;"
        "print(json.dumps(S.get_logs('otel-trackio-verl-demo','ex')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    keys = {k for row in json.loads(out.stdout) for k in row}
    assert {"reward/mean", "reward/max", "response_length/mean", "tokens/type=output"} <= keys


@pytest.mark.parametrize("step", ["step-2", 2.5, True, [1]])
def test_a_bad_step_is_refused_where_rollout_is_called(step, project):
    """Said at the call, naming the value, rather than found at export (nothing is started)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with pytest.raises(ValueError, match=r"rollout\(step=.*a step is a whole number"):
        rollout(step, 0, tracer_provider=provider)
    assert memory.get_finished_spans() == ()


def test_rollout_without_a_step_takes_the_declared_one(project):
    """``rollout(None, i)``: the step a trainer integration (or ``set_step``) declared; with
    none declared it is refused at the call."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with pytest.raises(ValueError, match=r"rollout\(step=None\).*none was declared"):
        rollout(None, 0, tracer_provider=provider)
    set_step(7)
    with rollout(None, 3, tracer_provider=provider):
        pass
    (span,) = memory.get_finished_spans()
    assert span.attributes["step"] == 7 and span.attributes["sample_index"] == 3
