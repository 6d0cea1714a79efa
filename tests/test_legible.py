"""A Trace reads at a glance on Trackio's Traces page: the outcome in the header, a status that
tells the truth, the root span showing question → answer, rows in sample order, no noise.

Real OTel SDK spans in, real Trackio storage (and Trackio's own search) read back.
"""

from __future__ import annotations

import json
import random

from conftest import read_traces
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from test_exporter import _chat_attributes
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio import TrackioSpanExporter, rollout
from otel_trackio._core.convert import HEADER_VALUE_CHARS
from otel_trackio._engine.open_samples import register_open_sample, unregister_open_sample


def _exporter_and_tracer(project: str):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider, provider.get_tracer("t")


def _tool_call_turn(question: str) -> dict:
    """A model call that answers ``question`` with a calculator call (no text)."""
    attributes = _chat_attributes(question, "", 5, 3)
    attributes["gen_ai.output.messages"] = json.dumps(
        [{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "calc",
                                          "arguments": {"x": 1}}]}]
    )  # fmt: skip
    return attributes


# -- the outcome in the header ------------------------------------------------------------------


def test_root_user_attributes_lead_the_header_and_conventions_stay_on_the_span(project):
    _, provider, tracer = _exporter_and_tracer(project)
    root_attributes = {
        "step": 2,
        "sample_index": 4,
        "rollout_n": 1,
        "prompt_uid": "p-17",
        "gen_ai.agent.name": "solver",  # a convention's attribute
        "http.route": "/x",  # an OTel semantic convention
        "traceloop.workflow.name": "wf",  # OpenLLMetry
        "_note": "debug only",  # private: stays on the span
        "response_ids": [7, 8, 9],  # token ids (here undecoded): never a user field
        "status": "mine",  # the header's own key: stays on the span
        "tags": ["math", "easy"],
        "long_text": "x" * 1000,
    }
    with tracer.start_as_current_span("rollout", attributes=root_attributes) as root:
        with tracer.start_as_current_span("chat", attributes=_chat_attributes("q?", "a.", 3, 2)):
            pass
        root.set_attribute("reward", 1.0)
        root.set_attribute("correct", True)
    provider.shutdown()

    (trace,) = read_traces(project, "r")
    meta = trace["metadata"]
    # Identity, then the outcome (the reward, the status pill saying it), then the user's
    # other fields in the order they were set; the search text last.
    assert list(meta) == [
        "step",
        "sample_index",
        "rollout_n",
        "reward",
        "status",
        "prompt_uid",
        "tags",
        "long_text",
        "correct",
        "search",
    ]
    assert (meta["prompt_uid"], meta["tags"], meta["reward"], meta["correct"]) == (
        "p-17",
        ["math", "easy"],
        1.0,
        True,
    )
    assert meta["status"] == "reward 1"
    assert meta["long_text"].startswith("x" * HEADER_VALUE_CHARS + "…[otel-trackio cut 744")
    # What the chips show (latency, tokens, operations) and the OTel ids are not in the header:
    # the trace id is on the root span, whose id is the root span id.
    for key in ("duration_ms", "usage", "span_count", "trace_id", "root_span_id", "validate"):
        assert key not in meta
    for key in (
        "gen_ai.agent.name",
        "http.route",
        "traceloop.workflow.name",
        "_note",
        "response_ids",
    ):
        assert key not in meta
    # The root span keeps every attribute it had, whole.
    root_span = next(s for s in trace["spans"] if s["name"] == "rollout")
    assert root_span["id"] == f"{root.get_span_context().span_id:016x}"
    assert root_span["metadata"]["otel.trace_id"] == f"{root.get_span_context().trace_id:032x}"
    assert root_span["metadata"]["_note"] == "debug only"
    assert root_span["metadata"]["status"] == "mine"
    assert root_span["metadata"]["long_text"] == "x" * 1000


def test_scores_on_child_spans_reach_the_header_and_the_root_wins(project):
    _, provider, tracer = _exporter_and_tracer(project)
    with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}) as r:
        with tracer.start_as_current_span("chat", attributes=_chat_attributes("q?", "a.", 3, 2)):
            pass
        for turn, (score, passed) in enumerate([(0.0, False), (0.5, True)]):
            with tracer.start_as_current_span("judge") as judge:
                judge.set_attribute("turn_score", score)
                judge.set_attribute("passed", passed)
                judge.set_attribute("turn", turn)
        with tracer.start_as_current_span("reward") as reward:
            reward.set_attribute("reward", 0.25)
            reward.set_attribute("expected", 42)
            reward.set_attribute("verdict", "wrong")  # text on a child span: stays there
            reward.set_attribute("_raw", 3)  # private
        r.set_attribute("reward", 1.0)  # the root's own value wins
    provider.shutdown()

    (trace,) = read_traces(project, "r")
    meta = trace["metadata"]
    user = {k: meta[k] for k in list(meta)[2:-1] if k != "status"}
    assert user == {
        "reward": 1.0,
        "turn_score": 0.5,  # the judge span that ended last
        "passed": True,
        "turn": 1,
        "expected": 42,
    }
    assert meta["status"] == "reward 1"  # the root's reward, not the reward span's
    assert "verdict" not in meta and "_raw" not in meta
    assert "gen_ai.usage.input_tokens" not in meta  # numbers of a convention are not scores
    assert meta["search"] == "reward=1.0 turn_score=0.5 passed=true turn=1 expected=42"


def test_trackio_search_finds_samples_by_their_reward(project):
    _, provider, tracer = _exporter_and_tracer(project)
    for index in range(4):
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
            with tracer.start_as_current_span("reward") as span:  # every Trace has a span "reward"
                span.set_attribute("reward", float(index % 2))
    provider.shutdown()

    def found(query: str) -> list[int]:
        rows = SQLiteStorage.get_traces(project, "r", search=query)
        return sorted(t["metadata"]["sample_index"] for t in rows)

    assert found("reward") == [0, 1, 2, 3]
    assert found("reward=1") == [1, 3]
    assert found("reward=0") == [0, 2]


def test_a_sample_without_its_root_shows_the_scores_of_its_spans(project):
    exporter, provider, tracer = _exporter_and_tracer(project)
    with rollout(1, 3, tracer_provider=provider, prompt_uid="p3"):
        with tracer.start_as_current_span("reward") as span:
            span.set_attribute("reward", 1.0)
        exporter.force_flush()  # the root is still open: logged as partial
    provider.shutdown()

    partial = next(t for t in read_traces(project, "r") if t["metadata"].get("partial"))
    assert partial["metadata"]["sample_index"] == 3
    assert partial["metadata"]["reward"] == 1.0
    assert "prompt_uid" not in partial["metadata"]  # the root's own attributes are not known yet


# -- status that tells the truth ---------------------------------------------------------------


def test_status_is_partial_for_an_open_sample_and_error_wins(project):
    _, provider, tracer = _exporter_and_tracer(project)
    roots = []
    for index, fails in enumerate((False, True)):
        root = tracer.start_span("rollout", attributes={"step": 5, "sample_index": index})
        roots.append(root)
        ids = root.get_span_context()
        register_open_sample(ids.trace_id, ids.span_id, {"step": 5, "sample_index": index})
        with otel_trace.use_span(root, end_on_exit=False):
            with tracer.start_as_current_span("tool") as tool:
                if fails:
                    tool.set_status(Status(StatusCode.ERROR, "tool crashed"))
    with tracer.start_as_current_span("rollout", attributes={"step": 5, "sample_index": 2}):
        pass
    provider.shutdown()  # samples 0 and 1 are still open
    for root in roots:
        unregister_open_sample(root.get_span_context().trace_id, root.get_span_context().span_id)

    status = {
        t["metadata"].get("sample_index", "?"): (
            t["metadata"]["status"],
            t["metadata"].get("partial_reason"),
        )
        for t in read_traces(project, "r")
    }
    assert status == {0: ("partial", "flush"), 1: ("error", "flush"), 2: ("success", None)}


# -- the root span says what the sample was ------------------------------------------------------


def test_the_root_span_shows_the_prompt_and_the_final_answer(project):
    _, provider, tracer = _exporter_and_tracer(project)
    with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}):
        with tracer.start_as_current_span("chat-1", attributes=_tool_call_turn("What is 2+2?")):
            pass
        second = _chat_attributes("What is 2+2?", "It is 4.", 9, 4)
        with tracer.start_as_current_span("chat-2", attributes=second):
            pass

    with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 1}):
        pass  # no model call, no input/output: nothing to show
    provider.shutdown()

    traces = {t["metadata"]["sample_index"]: t for t in read_traces(project, "r")}
    root = next(s for s in traces[0]["spans"] if s["parent_id"] is None)
    assert root["input"] == "What is 2+2?"
    assert root["output"] == "It is 4."
    assert traces[0]["messages"][-1]["content"] == "It is 4."
    bare = next(s for s in traces[1]["spans"] if s["parent_id"] is None)
    assert "input" not in bare and "output" not in bare


def test_a_root_with_input_or_output_of_its_own_keeps_it(project):
    _, provider, tracer = _exporter_and_tracer(project)
    with rollout(0, 0, tracer_provider=provider) as root:
        root.set_attribute("output.value", "graded: correct")
        with tracer.start_as_current_span("chat", attributes=_chat_attributes("2+2?", "4", 1, 1)):
            pass
    own = {"step": 0, "sample_index": 1, "input.value": "my input", "output.value": "my output"}
    with tracer.start_as_current_span("rollout", attributes=own):
        with tracer.start_as_current_span("chat", attributes=_chat_attributes("3+3?", "6", 1, 1)):
            pass
    provider.shutdown()

    roots = {
        t["metadata"]["sample_index"]: next(s for s in t["spans"] if s["parent_id"] is None)
        for t in read_traces(project, "r")
    }
    assert (roots[0]["input"], roots[0]["output"]) == ("2+2?", "graded: correct")
    assert (roots[1]["input"], roots[1]["output"]) == ("my input", "my output")


# -- order and noise -------------------------------------------------------------------------------


def test_traces_of_a_step_are_logged_in_sample_order_whatever_the_types(project, tracer_provider):
    memory = InMemorySpanExporter()
    source = tracer_provider
    source.add_span_processor(SimpleSpanProcessor(memory))
    tracer = source.get_tracer("t")
    identities = [(i, n) for i in (0, 1, 2, 10) for n in (1, 0)]
    identities += [("b", None), ("a", 0), ("10x", None), (True, None)]
    for sample_index, rollout_n in identities:
        attributes = {"step": 3, "sample_index": sample_index}
        if rollout_n is not None:
            attributes["rollout_n"] = rollout_n
        with tracer.start_as_current_span("rollout", attributes=attributes):
            pass
    with tracer.start_as_current_span("step-level", attributes={"step": 3}):
        pass  # no sample_index: last
    spans = list(memory.get_finished_spans())
    random.Random(7).shuffle(spans)

    exporter = TrackioSpanExporter(project=project, name="r")
    exporter.export(spans)  # one export, one run.log for step 3
    exporter.shutdown()

    logged = sorted(read_traces(project, "r"), key=lambda t: t["index"])
    order = [(t["metadata"].get("sample_index"), t["metadata"].get("rollout_n")) for t in logged]
    assert order == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
        (10, 0),
        (10, 1),
        ("10x", None),  # then other values, by their text
        (True, None),
        ("a", 0),
        ("b", None),
        (None, None),  # no sample_index: last
    ]


def test_no_noise_internal_span_kind_and_unnamed_service_are_left_out(project):
    exporter = TrackioSpanExporter(project=project, name="r")
    unnamed = TracerProvider()  # the SDK names the service unknown_service:<process>
    named = TracerProvider(resource=Resource.create({"service.name": "rollout-worker"}))
    for provider in (unnamed, named):
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    for index, provider in enumerate((unnamed, named)):
        tracer = provider.get_tracer("t")
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
            with tracer.start_as_current_span("http call", kind=SpanKind.CLIENT):
                pass
    unnamed.shutdown()
    named.shutdown()

    traces = {t["metadata"]["sample_index"]: t for t in read_traces(project, "r")}
    assert "service_name" not in traces[0]["metadata"]
    assert traces[1]["metadata"]["service_name"] == "rollout-worker"
    for t in traces.values():
        spans = {s["name"]: s for s in t["spans"]}
        assert "otel.span_kind" not in spans["rollout"]["metadata"]
        assert spans["http call"]["metadata"]["otel.span_kind"] == "CLIENT"
