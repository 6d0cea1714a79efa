"""Evaluation results (``gen_ai.evaluation.result``, GenAI conventions v1.38) on the sample they
evaluate: as a span event, and as a log record with the evaluated span's context sent before or
after that span ended — through ``configure()`` (offloaded, the default) and through the
receiver, with the logs on a request of their own. Read back from Trackio storage: the header,
its search text, the status pill, the outcome table."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import read_logs, read_traces
from opentelemetry import _logs as otel_logs
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan

import otel_trackio

CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}


def _evaluation(name: str, score: float | None, label: str | None = None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"gen_ai.evaluation.name": name}
    if score is not None:
        attributes["gen_ai.evaluation.score.value"] = score
    if label is not None:
        attributes["gen_ai.evaluation.score.label"] = label
    attributes["gen_ai.evaluation.explanation"] = f"why {name}"
    return attributes


def _evaluated_rollout(index: int) -> None:
    """A sample whose model call is evaluated three ways: a span event, a log record sent while
    the call is open, and one sent after it ended (a judge that runs later)."""
    tracer = trace.get_tracer("test")
    logger = otel_logs.get_logger("judge")
    with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": index}):
        with tracer.start_as_current_span("chat m", attributes=CHAT) as chat:
            chat.add_event("gen_ai.evaluation.result", _evaluation("correctness", 0.25, "partial"))
            logger.emit(
                otel_logs.LogRecord(
                    event_name="gen_ai.evaluation.result", attributes=_evaluation("fluency", 0.9)
                )
            )
        ended = trace.set_span_in_context(NonRecordingSpan(chat.get_span_context()))
        logger.emit(
            otel_logs.LogRecord(
                event_name="gen_ai.evaluation.result",
                attributes=_evaluation("tone", None, "polite"),
                context=ended,
            )
        )


@pytest.mark.parametrize("outcomes", [None, ("correctness",)], ids=["default", "pill"])
def test_evaluations_are_in_the_header_the_search_and_the_outcome_table(project, outcomes):
    options = {} if outcomes is None else {"outcome_attributes": outcomes}
    handle = otel_trackio.configure(project, "r", **options)
    for index in range(2):
        _evaluated_rollout(index)
    handle.shutdown()

    traces = read_traces(project, "r")
    assert len(traces) == 2 and not any(t["metadata"].get("partial") for t in traces)
    for t in traces:
        meta = t["metadata"]
        assert meta["correctness"] == 0.25 and meta["correctness.label"] == "partial"
        assert meta["fluency"] == 0.9 and meta["tone"] == "polite"
        assert "correctness=0.25" in meta["search"] and "tone=polite" in meta["search"]
        if outcomes is None:
            assert meta["status"] == "success"
        else:  # an evaluation named as the outcome: first in the header, in the pill
            assert list(meta)[2:4] == ["correctness", "status"]
            assert meta["status"] == "correctness 0.25"
        # The explanations stay on the evaluated span.
        (chat,) = [s for s in t["spans"] if s["name"] == "chat m"]
        explained = {
            e["attributes"].get("gen_ai.evaluation.explanation") for e in chat["metadata"]["events"]
        }
        assert explained == {"why correctness", "why fluency", "why tone"}
    ((rows),) = [row["rollout/outcomes"]["_value"] for row in read_logs(project, "r")
                 if "rollout/outcomes" in row]  # fmt: skip
    assert [r["sample_index"] for r in rows] == [0, 1]
    for row in rows:
        assert (row["correctness"], row["fluency"], row["tone"]) == (0.25, 0.9, "polite")
        assert list(row)[-6:] == ["status", "detail", "answer", "turns", "tokens", "latency_ms"]


def test_a_judges_evaluation_naming_the_response_goes_on_that_model_call(project):
    """A judge running in its own span reports on a model call by its ``gen_ai.response.id``:
    the score is in the sample's header, the evaluation (and its explanation) on that call."""
    handle = otel_trackio.configure(project, "judged")
    tracer = trace.get_tracer("test")
    logger = otel_logs.get_logger("judge")
    with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}):
        with tracer.start_as_current_span(
            "chat m", attributes={**CHAT, "gen_ai.response.id": "r-1"}
        ):
            pass
        with tracer.start_as_current_span("judge"):
            verdict = {**_evaluation("correctness", 1.0), "gen_ai.response.id": "r-1"}
            logger.emit(
                otel_logs.LogRecord(event_name="gen_ai.evaluation.result", attributes=verdict)
            )
    handle.shutdown()
    ((t),) = read_traces(project, "judged")
    assert t["metadata"]["correctness"] == 1.0
    by_name = {s["name"]: s for s in t["spans"]}
    (event,) = by_name["chat m"]["metadata"]["events"]
    assert event["attributes"]["gen_ai.evaluation.explanation"] == "why correctness"
    assert "events" not in by_name["judge"]["metadata"]
