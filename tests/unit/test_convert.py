"""The conversion stage on its own (``otel_trackio._core.convert.sample_to_trace``): an assembled
sample in, a Trace dict out, no SDK and no Trackio (records built directly).

What the Trace says of a span (tree, times, usage, status, messages) is asserted on structure; the
order of the header keys is not (it is a presentation choice that may change). Dialect details
(every GenAI convention) are in ``test_conventions.py`` and ``test_dialects.py``.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from conftest import root_span_id, trace_id, trace_usage

from otel_trackio._core.convert import iso_time, sample_to_trace
from otel_trackio._core.records import EventRecord, SpanRecord
from otel_trackio._core.samples import PartialReason, Sample, SampleIdentity
from otel_trackio._core.values import CUT_MARKER
from otel_trackio.settings import TrackioSettings

TRACE_ID = 0xABC
T0 = 1_700_000_000_123_456_789  # ns since the epoch: 2023-11-14T22:13:20.123456789Z
MS = 1_000_000
ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def _parts(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _span(
    span_id: int,
    name: str,
    start_ms: float,
    end_ms: float,
    parent_id: int | None = None,
    **fields: Any,
) -> SpanRecord:
    return SpanRecord(
        trace_id=TRACE_ID,
        span_id=span_id,
        name=name,
        start_ns=T0 + int(start_ms * MS),
        end_ns=T0 + int(end_ms * MS),
        parent_id=parent_id,
        **fields,
    )


def _sample(
    spans: list[SpanRecord], *, reason: PartialReason | None = None, root: bool = True
) -> Sample:
    head = next(s for s in spans if s.parent_id is None)
    identity = SampleIdentity(
        trace_id=TRACE_ID,
        root_span_id=head.span_id if root else None,
        step=int(head.attributes.get("step", 0)),
        sample_index=head.attributes.get("sample_index"),
        partial_reason=reason,
    )
    return Sample(spans=spans, root=head if root else None, identity=identity)


def _agent_sample() -> Sample:
    """rollout → chat (a model call) and rollout → tool (failed) → lookup."""
    root = _span(1, "rollout", 0, 10, attributes={"step": 3, "sample_index": 1, "reward": 0.5})
    chat = _span(
        2,
        "chat gpt-test",
        1,
        4,
        parent_id=1,
        kind="CLIENT",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-test",
            "gen_ai.usage.input_tokens": 7,
            "gen_ai.usage.output_tokens": 2,
            "gen_ai.input.messages": json.dumps(
                [_parts("system", "be brief"), _parts("user", "what is 2+2?")]
            ),
            "gen_ai.output.messages": json.dumps([_parts("assistant", "4")]),
        },
    )
    tool = _span(
        3,
        "tool",
        5,
        8,
        parent_id=1,
        status="error",
        events=(
            EventRecord(
                "exception",
                T0 + 7 * MS,
                {"exception.type": "TimeoutError", "exception.message": "too slow"},
            ),
        ),
    )
    lookup = _span(4, "lookup", 5.5, 6.25, parent_id=3)
    # Out of start order on purpose: the converter orders spans itself.
    return _sample([lookup, tool, chat, root])


def _by_name(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {span["name"]: span for span in trace["spans"]}


def test_spans_form_a_tree_by_parent_id_in_start_order():
    trace = sample_to_trace(_agent_sample())
    spans = trace["spans"]
    assert [s["name"] for s in spans] == ["rollout", "chat gpt-test", "tool", "lookup"]
    ids = {s["name"]: s["id"] for s in spans}
    assert ids["rollout"] == f"{1:016x}"
    parents = {s["name"]: s["parent_id"] for s in spans}
    assert parents == {
        "rollout": None,
        "chat gpt-test": ids["rollout"],
        "tool": ids["rollout"],
        "lookup": ids["tool"],
    }


def test_a_missing_middle_span_hangs_under_the_root_and_keeps_its_real_parent():
    root = _span(1, "rollout", 0, 10, attributes={"step": 0})
    orphan = _span(5, "orphan", 2, 3, parent_id=99)  # span 99 never arrived
    spans = _by_name(sample_to_trace(_sample([root, orphan])))
    assert spans["orphan"]["parent_id"] == f"{1:016x}"
    assert spans["orphan"]["metadata"]["otel.parent_span_id"] == f"{99:016x}"


def test_times_are_iso_8601_utc_with_z_and_durations_in_milliseconds():
    spans = _by_name(sample_to_trace(_agent_sample()))
    for span in spans.values():
        assert ISO_Z.match(span["start_time"]), span["start_time"]
        assert ISO_Z.match(span["end_time"]), span["end_time"]
        start = datetime.fromisoformat(span["start_time"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(span["end_time"].replace("Z", "+00:00"))
        assert start.tzinfo == timezone.utc
        assert abs((end - start).total_seconds() * 1000 - span["duration_ms"]) < 0.002
    assert spans["rollout"]["start_time"] == "2023-11-14T22:13:20.123456Z"
    assert spans["rollout"]["duration_ms"] == 10.0
    assert spans["lookup"]["duration_ms"] == 0.75
    assert iso_time(0) == "1970-01-01T00:00:00.000000Z"


def test_a_model_call_carries_its_model_and_usage_and_the_header_sums_usage():
    trace = sample_to_trace(_agent_sample())
    chat = _by_name(trace)["chat gpt-test"]
    assert chat["kind"] == "generation"
    assert chat["model"] == "gpt-test"
    assert chat["usage"]["input_tokens"] == 7
    assert chat["usage"]["output_tokens"] == 2
    # The Tokens chip sums the spans' usage; the header does not repeat it.
    assert trace_usage(trace) == {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9}
    assert "usage" not in trace["metadata"]
    assert chat["metadata"]["otel.span_kind"] == "CLIENT"


def test_statuses_are_success_or_error_and_an_error_names_its_exception():
    trace = sample_to_trace(_agent_sample())
    spans = _by_name(trace)
    assert {name: s["status"] for name, s in spans.items()} == {
        "rollout": "success",
        "chat gpt-test": "success",
        "tool": "error",
        "lookup": "success",
    }
    assert spans["tool"]["error"] == "TimeoutError: too slow"
    assert trace["metadata"]["status"] == "error"  # one failed span marks the sample


def test_a_whole_sample_is_a_success_and_a_partial_one_says_why():
    root = _span(1, "rollout", 0, 10, attributes={"step": 2, "sample_index": 0})
    whole = sample_to_trace(_sample([root]))["metadata"]
    assert whole["status"] == "success"
    assert not whole.get("partial")
    partial = sample_to_trace(_sample([root], reason="flush"))["metadata"]
    assert partial["status"] == "partial"
    assert partial["partial"] is True and partial["partial_reason"] == "flush"


def test_messages_come_from_the_genai_attributes_system_first():
    trace = sample_to_trace(_agent_sample())
    assert trace["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is 2+2?"},
        {"role": "assistant", "content": "4"},
    ]


def test_the_root_without_io_shows_the_first_user_and_last_assistant_message():
    spans = _by_name(sample_to_trace(_agent_sample()))
    assert spans["rollout"]["input"] == "what is 2+2?"
    assert spans["rollout"]["output"] == "4"


def test_without_model_calls_the_roots_io_becomes_the_conversation():
    root = _span(
        1,
        "rollout",
        0,
        10,
        attributes={"step": 0, "input.value": "the prompt", "output.value": "the answer"},
    )
    trace = sample_to_trace(_sample([root]))
    assert trace["messages"] == [
        {"role": "user", "content": "the prompt"},
        {"role": "assistant", "content": "the answer"},
    ]


def test_the_header_carries_identity_and_user_fields_the_spans_their_ids():
    trace = sample_to_trace(_agent_sample())
    meta = trace["metadata"]
    assert meta["step"] == 3 and meta["sample_index"] == 1
    assert meta["reward"] == 0.5  # the root's own attribute is a user field
    # What the chips show (span count, tokens) and the ids stay out of the header.
    assert len(trace["spans"]) == 4 and "span_count" not in meta
    assert trace_id(trace) == f"{TRACE_ID:032x}"
    assert root_span_id(trace) == f"{1:016x}"
    assert "duration_ms" not in meta  # the Latency chip
    assert "reward=0.5" in meta["search"]


def test_long_values_are_cut_to_max_value_chars_with_a_marker():
    long_text = "x" * 500
    root = _span(1, "rollout", 0, 10, attributes={"step": 0, "note": long_text})
    chat = _span(
        2,
        "chat",
        1,
        2,
        parent_id=1,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([_parts("user", long_text)]),
        },
    )
    settings = TrackioSettings(max_value_chars=100)
    trace = sample_to_trace(_sample([root, chat]), settings)
    marker = CUT_MARKER.format(400)
    assert trace["messages"][0]["content"] == "x" * 100 + marker
    assert _by_name(trace)["rollout"]["metadata"]["note"] == "x" * 100 + marker
    whole = sample_to_trace(_sample([root, chat]), TrackioSettings(max_value_chars=1000))
    assert whole["messages"][0]["content"] == long_text


def test_a_sample_without_its_root_still_converts_every_span():
    child = _span(2, "generate", 1, 2, parent_id=1)
    orphan_root = _span(1, "rollout", 0, 10, attributes={"step": 4})
    sample = _sample([orphan_root, child], reason="ttl", root=False)
    sample.spans = [child]
    trace = sample_to_trace(sample)
    assert [s["name"] for s in trace["spans"]] == ["generate"]
    assert trace["metadata"]["status"] == "partial"
    assert len(trace["spans"]) == 1
    assert "root_span_id" not in trace["metadata"]


def test_the_newest_genai_names_are_read_beside_the_older_ones():
    """Cache writes (``cache_write``, before ``cache_creation``), the cost as an amount with its
    currency (only dollars fill Trackio's cost column), and the names kept on their span."""
    root = _span(1, "workflow", 0, 10, attributes={"step": 0, "sample_index": 0})
    newest = {
        "gen_ai.operation.name": "chat",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 2,
        "gen_ai.usage.cache_write.input_tokens": 4,
        "gen_ai.usage.cost.amount": 0.003,
        "gen_ai.usage.cost.currency": "USD",
        "gen_ai.usage.cost.source": "provider",
        "gen_ai.conversation.id": "c-1",
        "gen_ai.response.time_to_first_chunk": 0.12,
    }
    older = {"gen_ai.operation.name": "chat", "gen_ai.usage.cache_creation.input_tokens": 5}
    euros = {"gen_ai.operation.name": "chat", "gen_ai.usage.cost.amount": 2.0,
             "gen_ai.usage.cost.currency": "EUR"}  # fmt: skip
    agent = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.agent.turn.count": 3}
    spans = [
        root,
        _span(2, "chat new", 1, 2, parent_id=1, attributes=newest),
        _span(3, "chat old", 3, 4, parent_id=1, attributes=older),
        _span(4, "chat eur", 5, 6, parent_id=1, attributes=euros),
        _span(5, "invoke_workflow w", 6, 9, parent_id=1, attributes=agent),
    ]
    by_name = _by_name(sample_to_trace(_sample(spans)))
    new, old, eur = by_name["chat new"], by_name["chat old"], by_name["chat eur"]
    assert new["usage"]["cache_write_input_tokens"] == 4
    assert old["usage"] == {"cache_write_input_tokens": 5}
    assert new["cost_usd"] == 0.003 and "gen_ai.usage.cost.amount" not in new["metadata"]
    assert new["metadata"]["gen_ai.usage.cost.source"] == "provider"
    assert new["metadata"]["gen_ai.conversation.id"] == "c-1"
    assert new["metadata"]["gen_ai.response.time_to_first_chunk"] == 0.12
    assert "cost_usd" not in eur and eur["metadata"]["gen_ai.usage.cost.currency"] == "EUR"
    workflow = by_name["invoke_workflow w"]
    assert workflow["kind"] == "span" and workflow["metadata"]["gen_ai.agent.turn.count"] == 3


def test_a_root_whose_id_another_copy_holds_still_converts():
    """A sample's root that is not, as a record, among its spans (its id sent again with other
    content, which the sample kept): the span with its id stands for it; nothing raises."""
    root = SpanRecord(1, 10, "rollout", 0, 5, attributes={"step": 0, "sample_index": 0})
    copy = SpanRecord(1, 10, "rollout", 0, 6, attributes={"step": 0, "sample_index": 0, "x": 1})
    child = SpanRecord(1, 11, "tool", 1, 2, parent_id=10, attributes={"input.value": "q"})
    sample = Sample([copy, child], root, SampleIdentity(1, 10, 0, sample_index=0))
    trace = sample_to_trace(sample)
    assert {s["name"] for s in trace["spans"]} == {"rollout", "tool"}
