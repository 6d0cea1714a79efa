"""Turn an assembled sample into a Trackio Trace dict: ``messages``, ``spans`` and ``metadata``.

Pure: plain data in, plain dicts out, no Trackio import (``_trackio`` logs the dicts).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from otel_trackio._core.assembly import ROLLOUT_N_ATTRIBUTE, VALIDATE_ATTRIBUTE
from otel_trackio._core.conventions import SpanFacts, ai_sdk, dialects, otel_genai, read_span_facts
from otel_trackio._core.conversation import build_conversation, settle_model_calls
from otel_trackio._core.media import MEDIA_KEY, MediaTable, take_media
from otel_trackio._core.metric_convert import format_attribute
from otel_trackio._core.records import UNFINISHED, EventRecord, SpanRecord
from otel_trackio._core.samples import Sample
from otel_trackio._core.values import as_text, attribute_json, cut_text, limit, storable
from otel_trackio._settings import TrackioSettings

TraceDict = dict[str, Any]

#: Trace metadata keys the exporter writes itself: a user attribute of that name stays on its span.
METADATA_KEYS = frozenset(
    {
        "step",
        "sample_index",
        "rollout_n",
        "validate",
        "status",
        "partial",
        "partial_reason",
        "duration_ms",
        "usage",
        "cost_usd",
        "span_count",
        "trace_id",
        "root_span_id",
        "service_name",
        "search",
        "conversion_error",
    }
)

#: First name segments (``<namespace>.…``) of the OTel semantic conventions (GenAI included),
#: OpenInference, OpenLLMetry, Logfire (pydantic-ai), LiteLLM, MLflow and the Vercel AI SDK
#: (``ai.*``): such attributes are never user fields.
CONVENTION_NAMESPACES = frozenset(
    {
        # OTel semantic conventions registry
        "android", "app", "artifact", "aspnetcore", "aws", "az", "azure", "browser",
        "cassandra", "cicd", "client", "cloud", "cloudevents", "cloudfoundry", "code",
        "container", "cpu", "cpython", "db", "deployment", "destination", "device", "disk",
        "dns", "dotnet", "elasticsearch", "enduser", "error", "event", "exception", "faas",
        "feature_flag", "file", "gcp", "gen_ai", "geo", "go", "graphql", "heroku", "host",
        "http", "hw", "ios", "jvm", "k8s", "kestrel", "linux", "log", "mainframe", "messaging",
        "net", "network", "nodejs", "oci", "openai", "opentracing", "os", "otel", "peer",
        "pool", "process", "profile", "rpc", "server", "service", "session", "signalr",
        "source", "system", "telemetry", "test", "thread", "tls", "url", "user", "user_agent",
        "v8js", "vcs", "webengine", "zos",
        # OpenInference
        "openinference", "llm", "input", "output", "tool", "tool_call", "message",
        "message_content", "embedding", "retrieval", "reranker", "document", "image", "audio",
        "agent", "graph", "prompt", "tag",
        # OpenLLMetry (Traceloop), Logfire (pydantic-ai), LiteLLM, MLflow, the Vercel AI SDK
        "traceloop", "logfire", "pydantic_ai", "litellm", "mlflow", "ai",
    }
)  # fmt: skip

#: A user field's value in the header is cut to this many characters (whole on its span).
HEADER_VALUE_CHARS = 256


def iso_time(ns: int) -> str:
    """Nanoseconds since the epoch as ISO-8601 UTC with microseconds and a ``Z``."""
    global _iso_second
    seconds, rest = divmod(int(ns), 1_000_000_000)
    cached_seconds, prefix = _iso_second
    if seconds != cached_seconds:
        # The spans of a sample mostly share a second: format the date part once per second.
        t = time.gmtime(seconds)
        prefix = (
            f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}."
        )
        _iso_second = (seconds, prefix)
    return f"{prefix}{rest // 1000:06d}Z"


# (seconds, "YYYY-MM-DDTHH:MM:SS.") of the last second formatted by iso_time (one tuple, swapped
# atomically, so concurrent exporters at worst format a second twice).
_iso_second: tuple[int | None, str] = (None, "")


def sample_to_trace(sample: Sample, settings: TrackioSettings | None = None) -> TraceDict:
    """Convert one sample to a Trace dict (logged at ``sample.identity.step``)."""
    settings = settings or TrackioSettings()
    spans = sorted(_evaluations_on_their_calls(sample.spans), key=lambda s: (s.start_ns, s.end_ns))
    ids = {s.span_id for s in spans}
    root = sample.root
    facts = [read_span_facts(s, settings) for s in spans]
    settle_model_calls(spans, facts)  # wrapper LLM spans are no model calls: before the kinds
    media: MediaTable = {}
    span_dicts = [
        _translate_span(s, f, root, ids, settings, media) for s, f in zip(spans, facts, strict=True)
    ]
    generations = [f for f in facts if f.kind == "generation"]
    prompt, held = _agent_messages(facts, generations)
    decoded = held or build_conversation(generations, settings.token_decoder, prompt)
    messages = decoded or prompt or []
    at = _position(spans, root)
    if not messages and at is not None:
        messages = _fallback_messages(facts[at])
    messages = [limit(take_media(m, media), settings.max_value_chars) for m in messages]
    if at is not None:
        _show_prompt_and_answer(span_dicts[at], messages)
    for span_dict in span_dicts:  # the OTel trace id, for joins, where the tree starts
        if span_dict["parent_id"] is None:
            span_dict["metadata"]["otel.trace_id"] = f"{sample.identity.trace_id:032x}"
    # Without a sample index the spans may be several rollouts: disagreeing scores are listed.
    fields = user_fields(
        spans, facts, root, settings, one_rollout=sample.identity.sample_index is not None
    )
    metadata = _translate_metadata(sample, spans, span_dicts, fields, settings)
    if (
        not messages
        and len(span_dicts) > 1
        and not any("input" in d or "output" in d for d in span_dicts)
    ):
        # An empty conversation would read as lost content: say there was none to read.
        metadata = _with_text_note(metadata)
    trace = storable({"messages": messages, "spans": span_dicts, "metadata": metadata})
    if media:  # the images the sink saves as Trackio image files (never stored as text)
        trace[MEDIA_KEY] = media
    return trace


def _agent_messages(
    facts: list[SpanFacts], generations: list[SpanFacts]
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]:
    """(the prompt, the whole conversation) an agent span recorded as role messages, when the
    model calls recorded only token ids (decoded, or not at all): the first span that is no
    model call and has input messages (verl's agent loop: its ``raw_prompt``, and, when the
    loop held the conversation, its later turns as output messages). The conversation is None
    without output messages; replies of model calls it lacks (a loop cut off at its length
    limit) are added from their decoded output."""
    if not any(f.prompt_ids is not None or f.input_messages is None for f in generations):
        return None, None
    for f in facts:
        if f.kind != "generation" and f.input_messages:
            prompt = [*f.system_messages, *f.input_messages]
            if not f.output_messages:
                return prompt, None
            held = [*prompt, *f.output_messages]
            replies = sum(1 for m in f.output_messages if m.get("role") == "assistant")
            for call in generations[replies:]:
                held.extend(call.output_messages or ())
            return prompt, held
    return None, None


_RESPONSE_ID = "gen_ai.response.id"


def _position(spans: list[SpanRecord], root: SpanRecord | None) -> int | None:
    """Where the sample's root is among its spans: that record, else the span with its id (a
    copy: the root's events moved, or its id sent again with other content); None without."""
    if root is None:
        return None
    for at, span in enumerate(spans):
        if span is root:
            return at
    return next((at for at, span in enumerate(spans) if span.span_id == root.span_id), None)


def _evaluations_on_their_calls(spans: list[SpanRecord]) -> list[SpanRecord]:
    """``spans`` with each evaluation result that names a model call of the sample by its
    ``gen_ai.response.id`` (a judge's record, sent with its own span's context) moved onto that
    call's span, where its explanation belongs; the records are copied, never changed."""
    calls = {
        span.attributes[_RESPONSE_ID]: span.span_id
        for span in spans
        if isinstance(span.attributes.get(_RESPONSE_ID), str)
    }
    if not calls:
        return spans
    moving: dict[int, list[EventRecord]] = {}
    leaving: dict[int, list[EventRecord]] = {}
    for span in spans:
        for event in span.events:
            target = calls.get(event.attributes.get(_RESPONSE_ID))
            if event.name == otel_genai.EVALUATION_EVENT and target not in (None, span.span_id):
                moving.setdefault(target, []).append(event)
                leaving.setdefault(span.span_id, []).append(event)
    if not moving:
        return spans
    out = []
    for span in spans:
        events = [e for e in span.events if e not in leaving.get(span.span_id, ())]
        events += moving.get(span.span_id, [])
        out.append(span if events == list(span.events) else replace(span, events=tuple(events)))
    return out


NO_TEXT_NOTE = "none recorded: these spans carry no prompt or response text"
"""The header's ``text`` of a sample whose spans hold no message, input or output (xtuner and
ROLL record none): said rather than an empty conversation left to puzzle over."""


def _with_text_note(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` with ``text`` (:data:`NO_TEXT_NOTE`) before its ``search``."""
    out = {k: v for k, v in metadata.items() if k != "search"}
    out.setdefault("text", NO_TEXT_NOTE)
    if "search" in metadata:
        out["search"] = metadata["search"]
    return out


def bare_trace(sample: Sample, error: str) -> TraceDict:
    """The least a sample can be logged as when full conversion failed: its span names and ids."""
    return storable(
        {
            "messages": [],
            "spans": [
                {
                    "id": f"{s.span_id:016x}",
                    "parent_id": None,
                    "name": str(s.name),
                    "kind": "span",
                }
                for s in sample.spans
            ],
            "metadata": {
                "step": sample.identity.step,
                "trace_id": f"{sample.identity.trace_id:032x}",
                "partial": sample.identity.partial,
                "conversion_error": error,
            },
        }
    )


def _show_prompt_and_answer(root: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """Give a root span without input (output) of its own the sample's prompt, the first user
    message (its final answer, the last assistant message): the span Trackio selects first."""
    if "input" not in root:
        prompt = next((m for m in messages if m.get("role") == "user"), None)
        if prompt is not None and prompt.get("content") not in (None, ""):
            root["input"] = prompt["content"]
    if "output" not in root:
        answer = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
        if answer is not None and answer.get("content") not in (None, ""):
            root["output"] = answer["content"]


def is_user_attribute(key: str, read_names: frozenset[str]) -> bool:
    """True for an attribute the user named: not one the exporter reads (``read_names``: the
    sample's identity, token ids), not private (``_…``: kept on its span only), not in a
    convention's namespace (unless a convention's place for the user's own values, such as the
    AI SDK's ``ai.telemetry.metadata.*``), not a Trace metadata key."""
    return not (
        key in read_names
        or key in METADATA_KEYS
        or key.startswith("_")
        or (
            key.partition(".")[0] in CONVENTION_NAMESPACES
            and not key.startswith(ai_sdk.USER_FIELD_PREFIXES)
        )
    )


def user_fields(
    spans: list[SpanRecord],
    facts: list[SpanFacts],
    root: SpanRecord | None,
    settings: TrackioSettings,
    *,
    one_rollout: bool = True,
) -> dict[str, Any]:
    """The user's own fields of a sample, for the Trace header (in this order):

    - every user attribute of the root span (:func:`is_user_attribute`, and not read into a
      span field), in the order it was set;
    - then the evaluation results (``gen_ai.evaluation.result`` events on any span, or log
      records joined to it): ``<name>`` its score (or its label when it has no score) and
      ``<name>.label`` its label beside a score; a name the root already has keeps the root's;
    - then the scores recorded on the other spans: user attributes holding a number or a
      boolean (a ``reward`` span's ``reward``, a judge's ``correct``); the root's value wins,
      else the span that ended last (a judge's last turn). Unless ``one_rollout`` (the sample
      has a ``sample_index``): then its spans may be several rollouts, and spans that disagree
      give the list of their values, in the order they ended: none is chosen.
    """
    # Attributes the exporter reads itself: the sample's identity, token ids (even undecoded).
    identity = frozenset(
        (
            settings.step_attribute,
            settings.sample_attribute,
            ROLLOUT_N_ATTRIBUTE,
            VALIDATE_ATTRIBUTE,
            *settings.token_id_attributes,
        )
    )
    fields: dict[str, Any] = {}
    at = _position(spans, root)
    if root is not None:
        consumed = facts[at].consumed if at is not None else frozenset()
        # LiteLLM's default mode wrote its call onto the root: its bookkeeping is no user field.
        litellm = dialects.wrote_on_root(root.attributes)
        for key, value in root.attributes.items():
            if litellm and key.partition(".")[0] in dialects.LITELLM_ROOT_NAMESPACES:
                continue
            if key not in consumed and is_user_attribute(key, identity):
                fields[key] = _header_value(value)
    scores: dict[str, list[Any]] = {}
    by_end = sorted(zip(spans, facts, strict=True), key=lambda p: (p[0].end_ns, p[0].start_ns))
    root_keys = set(fields)
    for span, _ in by_end:
        for event in sorted(span.events, key=lambda e: e.time_ns):
            if event.name != otel_genai.EVALUATION_EVENT:
                continue
            found = otel_genai.evaluation(event.attributes)
            if found is None:
                continue
            name, score, label = found
            if name in root_keys:
                continue
            scores.setdefault(name, []).append(score if score is not None else label)
            if score is not None and label is not None:
                scores.setdefault(f"{name}.label", []).append(label)
    for span, span_facts in by_end:
        if span is root:
            continue
        for key, value in span.attributes.items():
            if (
                isinstance(value, (bool, int, float))
                and key not in fields
                and key not in span_facts.consumed
                and is_user_attribute(key, identity)
            ):
                scores.setdefault(key, []).append(attribute_json(value))
    for key, values in scores.items():
        agree = all(v == values[0] for v in values)
        fields[key] = values[-1] if one_rollout or agree else values
    return fields


def _header_value(value: Any) -> Any:
    """An attribute value as JSON, short enough for the header line."""
    value = attribute_json(value)
    if isinstance(value, list) and len(as_text(value)) > HEADER_VALUE_CHARS:
        return cut_text(as_text(value), HEADER_VALUE_CHARS)
    return limit(value, HEADER_VALUE_CHARS)


def search_text(fields: dict[str, Any]) -> str:
    """``name=value`` for each user field: Trackio searches metadata values only, so this is
    what makes ``reward=1`` findable."""
    return " ".join(f"{key}={format_attribute(value)}" for key, value in fields.items())


def _fallback_messages(facts: SpanFacts) -> list[dict[str, Any]]:
    messages = []
    if facts.input is not None:
        messages.append({"role": "user", "content": as_text(facts.input)})
    if facts.output is not None:
        messages.append({"role": "assistant", "content": as_text(facts.output)})
    return messages


def _translate_span(
    span: SpanRecord,
    facts: SpanFacts,
    root: SpanRecord | None,
    ids: set[int],
    settings: TrackioSettings,
    media: MediaTable,
) -> dict[str, Any]:
    parent_id: str | None = None
    metadata: dict[str, Any] = {}
    if span is not root and span.parent_id is not None and not span.parent_is_remote:
        if span.parent_id in ids:
            parent_id = f"{span.parent_id:016x}"
        elif root is not None:
            # A missing middle span: hang it under the sample root, keep the real parent id.
            parent_id = f"{root.span_id:016x}"
            metadata["otel.parent_span_id"] = f"{span.parent_id:016x}"
        else:
            metadata["otel.parent_span_id"] = f"{span.parent_id:016x}"
    elif span.parent_id is not None:
        metadata["otel.parent_span_id"] = f"{span.parent_id:016x}"
    out: dict[str, Any] = {
        "id": f"{span.span_id:016x}",
        "parent_id": parent_id,
        "name": span.name,
        "kind": facts.kind,
        "start_time": iso_time(span.start_ns),
        "end_time": iso_time(span.end_ns),
        "duration_ms": max(0.0, (span.end_ns - span.start_ns) / 1e6),
        "status": _span_status(span),
    }
    error = _error_text(span)
    if error is not None:
        out["error"] = error
    if facts.model is not None:
        out["model"] = facts.model
    # Trackio's Tokens and Cost chips sum every span's: a wrapper's totals of the model calls
    # under it (an agent span's) would count them twice, so they stay in its metadata.
    counted = out if facts.kind == "generation" else metadata
    if facts.usage is not None:
        counted["usage"] = dict(facts.usage)
    if facts.cost_usd is not None:
        counted["cost_usd"] = facts.cost_usd
    if facts.input is not None:
        out["input"] = limit(take_media(facts.input, media), settings.max_value_chars)
    if facts.output is not None:
        out["output"] = limit(take_media(facts.output, media), settings.max_value_chars)
    if facts.provider is not None:
        metadata["provider"] = facts.provider
    if span.kind != "INTERNAL":  # the default kind says nothing; CLIENT, SERVER ... do
        metadata["otel.span_kind"] = span.kind
    for key, value in span.attributes.items():
        if key not in facts.consumed:
            metadata[key] = limit(attribute_json(value), settings.max_value_chars)
    for key, value in facts.extra_metadata.items():
        metadata[key] = limit(attribute_json(value), settings.max_value_chars)
    events = [
        {
            "name": e.name,
            "time": iso_time(e.time_ns),
            "attributes": attribute_json(dict(e.attributes)),
        }
        for i, e in enumerate(span.events)
        if e.name != "exception" and i not in facts.consumed_events
    ]
    if events:
        metadata["events"] = limit(events, settings.max_value_chars)
    out["metadata"] = metadata
    return out


def _span_status(span: SpanRecord) -> str:
    """``error``, ``unfinished`` (still open at a flush: Trackio shows the word as written) or
    ``success``."""
    if span.status == "error":
        return "error"
    return UNFINISHED if span.unfinished else "success"


#: How many open spans a ``partial_reason`` names (the rest are counted).
OPEN_SPANS_NAMED = 3


def partial_reason_text(reason: str, spans: list[SpanRecord]) -> str:
    """``reason``, followed by the spans still open at the flush, innermost first, with how long
    each had been open: ``flush: still open: execute_tool (12.3 s), rollout (12.5 s)``."""
    open_spans = sorted((s for s in spans if s.unfinished), key=lambda s: -s.start_ns)
    if not open_spans:
        return reason
    named = [
        f"{s.name} ({max(0, s.end_ns - s.start_ns) / 1e9:.1f} s)"
        for s in open_spans[:OPEN_SPANS_NAMED]
    ]
    more = len(open_spans) - len(named)
    if more:
        named.append(f"{more} more")
    return f"{reason}: still open: {', '.join(named)}"


def _error_text(span: SpanRecord) -> str | None:
    if span.status != "error":
        return None
    for event in span.events:
        if event.name == "exception":
            kind = event.attributes.get("exception.type")
            message = event.attributes.get("exception.message")
            text = ": ".join(str(x) for x in (kind, message) if x)
            if text:
                return text
    if span.status_description:
        return span.status_description
    return str(span.attributes.get("error.type") or "error")


STEP_GUESSED = "no span of this sample carried a step: the latest step seen, else 0"
"""The header's ``step_guessed``: the step shown was not recorded with the sample."""


def _translate_metadata(
    sample: Sample,
    spans: list[SpanRecord],
    span_dicts: list[dict[str, Any]],
    fields: dict[str, Any],
    settings: TrackioSettings,
) -> dict[str, Any]:
    """The header, the line a researcher reads first: the sample's identity, its outcome (the
    outcome attributes, the status, why it was logged early), the user's other fields, the
    service, then the ``search`` text. What the expanded row's chips already show (latency,
    cost, tokens, span count) is left out, and so are the OTel ids: the trace id is on the
    spans the tree starts at (``otel.trace_id``), the root span's id is its ``id`` (a part of
    a sample logged without its root names it: ``root_span_id``, before ``search``)."""
    identity = sample.identity
    meta: dict[str, Any] = {"step": identity.step}
    if identity.stepless:  # no span of it carried a step (its root lost, no wrapper span)
        meta["step_guessed"] = STEP_GUESSED
    if identity.sample_index is not None:
        meta["sample_index"] = attribute_json(identity.sample_index)
    if identity.rollout_n is not None:
        meta["rollout_n"] = attribute_json(identity.rollout_n)
    if identity.validate not in (None, False):  # a validation sample says so, a rollout not
        meta["validate"] = attribute_json(identity.validate)
    outcomes = {name: fields[name] for name in settings.outcome_attributes if name in fields}
    meta.update(outcomes)
    if any(d["status"] == "error" for d in span_dicts):
        meta["status"] = "error"
    elif identity.partial:
        meta["status"] = "partial"
    else:
        meta["status"] = outcome_status(outcomes)
    if identity.partial:
        meta["partial"] = True
        meta["partial_reason"] = partial_reason_text(str(identity.partial_reason), spans)
    meta.update((key, value) for key, value in fields.items() if key not in outcomes)
    service = _service_name(spans)
    if service is not None:
        meta["service_name"] = service
    if sample.root is None and identity.root_span_id is not None:
        # A part logged apart from its root (late spans, a flush): which sample it belongs to.
        meta["root_span_id"] = f"{identity.root_span_id:016x}"
    if fields:
        meta["search"] = search_text(fields)
    return meta


def outcome_status(outcomes: dict[str, Any]) -> str:
    """The status pill of a sample that ran to its end: its first outcome that is a number or
    a boolean, as ``<name> <value>`` (``reward 0``: a wrong answer does not read "success"),
    ``<name> varies`` when its spans disagreed (a list of scores), else ``success``."""
    for name, value in outcomes.items():
        if isinstance(value, list) and value and all(_is_score(v) for v in value):
            return f"{name} varies"
        if isinstance(value, bool):
            return f"{name} {format_attribute(value)}"
        if isinstance(value, (int, float)):
            return f"{name} {value:g}"
    return "success"


def _is_score(value: Any) -> bool:
    return isinstance(value, (bool, int, float))


def merged_rollouts(sample: Sample, settings: TrackioSettings) -> int:
    """How many spans of a sample without ``sample_index`` carry a step, or an outcome (the
    larger count): 2 or more suggests several rollouts stored as one sample (their roots lack
    ``sample_index``). 0 for a sample that has one."""
    if sample.identity.sample_index is not None:
        return 0
    steps = sum(1 for span in sample.spans if settings.step_attribute in span.attributes)
    outcomes = sum(
        1
        for span in sample.spans
        if any(name in span.attributes for name in settings.outcome_attributes)
    )
    return max(steps, outcomes)


def _service_name(spans: list[SpanRecord]) -> str | None:
    """The resource's ``service.name``; None when no service was named (the SDK's
    ``unknown_service:<process>`` default says nothing)."""
    for span in spans:
        name = span.resource.get("service.name")
        if name is not None:
            text = str(name)
            return None if text.startswith("unknown_service") else text
    return None
