"""Validation generations as Trackio Traces (what verl's ``ValidationGenerationsLogger`` logs).

Each sample ``(input, output, score)`` — or a dict with ``input``/``output``/``score`` and any
other fields — becomes a Trace with a user and an assistant message and the header a rollout
sample has: ``step``, ``sample_index``, the score as ``reward`` (one search, ``reward=1``, finds
rollouts and validation samples alike), a ``status`` saying it (``reward 1``), the extra fields,
``validate: true``, ``source="validation_generations"``. All of one call are logged in one Trackio
log call at ``step``, with their outcome table (the rollouts' columns) beside them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from otel_trackio._core.convert import outcome_status, search_text
from otel_trackio._core.outcomes import outcome_row
from otel_trackio._core.values import json_safe, limit, storable
from otel_trackio._settings import TrackioSettings, active_settings
from otel_trackio._trackio.installed import RunLike
from otel_trackio._trackio.sink import TrackioSink

DEFAULT_MAX_VALUE_CHARS: int = TrackioSettings().max_value_chars

__all__ = ["generations_to_traces", "log_generations"]

SOURCE = "validation_generations"

_INPUT_KEYS = ("input", "prompt", "question")
_OUTPUT_KEYS = ("output", "response", "completion", "answer")
_SCORE_KEYS = ("score", "reward")
#: The header key of the score: the rollouts' outcome key.
REWARD = "reward"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    safe = json_safe(value, max_chars=DEFAULT_MAX_VALUE_CHARS)
    return safe if isinstance(safe, str) else json.dumps(safe, ensure_ascii=False)


def _pick(sample: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[bool, Any, str | None]:
    for key in keys:
        if key in sample:
            return True, sample[key], key
    return False, None, None


def generations_to_traces(
    samples: Iterable[Any], step: int, max_value_chars: int = DEFAULT_MAX_VALUE_CHARS
) -> list[dict[str, Any]]:
    """Trace dicts (``messages``, ``metadata``, ``spans``) for validation samples. Pure."""
    traces: list[dict[str, Any]] = []
    for position, sample in enumerate(samples):
        extra: dict[str, Any] = {}
        if isinstance(sample, Mapping):
            has_in, given_in, in_key = _pick(sample, _INPUT_KEYS)
            has_out, given_out, out_key = _pick(sample, _OUTPUT_KEYS)
            has_score, score, score_key = _pick(sample, _SCORE_KEYS)
            used = {in_key, out_key, score_key}
            extra = {str(k): v for k, v in sample.items() if k not in used}
        else:
            items = (
                list(sample)
                if isinstance(sample, (tuple, list))
                else [sample]  # a bare value is the input
            )
            has_in, has_out, has_score = len(items) > 0, len(items) > 1, len(items) > 2
            given_in = items[0] if has_in else None
            given_out = items[1] if has_out else None
            score = items[2] if has_score else None
            if len(items) > 3:
                extra["extra"] = items[3:]
        messages = []
        if has_in:
            messages.append({"role": "user", "content": _text(given_in)})
        if has_out:
            messages.append({"role": "assistant", "content": _text(given_out)})
        sample_index = extra.pop("sample_index", position)
        metadata: dict[str, Any] = {"step": step, "sample_index": json_safe(sample_index)}
        fields: dict[str, Any] = {REWARD: json_safe(score)} if has_score else {}
        metadata.update(fields)
        metadata["status"] = outcome_status(fields) if has_out else "no output"
        for key, value in extra.items():
            if key not in metadata and key not in ("validate", "source", "search"):
                metadata[key] = fields[key] = json_safe(value)
        metadata["validate"] = True
        metadata["source"] = SOURCE
        if fields:
            metadata["search"] = search_text(fields)
        traces.append(
            storable(
                {
                    "messages": limit(messages, max_value_chars),
                    "metadata": limit(metadata, max_value_chars),
                    "spans": [],
                }
            )
        )
    return traces


def log_generations(
    samples: Iterable[Any],
    step: int,
    *,
    key: str = "val/generations",
    table_key: str | None = "val/outcomes",
    run: RunLike | None = None,
) -> int:
    """Log validation generations as Traces at ``step``, in one Trackio log call.

    ``samples``: ``(input, output, score)`` tuples (shorter ones too: ``(input, output)``,
    ``(input,)``), or dicts with ``input``/``output``/``score`` (also ``prompt``/``response``/
    ``reward``) plus any other fields, which go to the metadata. Values need not be strings.
    ``table_key``: where their outcome table goes (the Media & Tables tab; None: no table).
    ``run``: a ``trackio.Run``; default the run active in this thread (``trackio.init``).
    Returns how many Traces were logged (nothing is logged for no samples).
    """
    traces = generations_to_traces(samples, int(step))
    if not traces:
        return 0
    try:
        sink = TrackioSink(run=run)
    except ValueError:
        raise ValueError(
            "log_generations needs a Trackio run: call trackio.init(...) in this thread "
            "first, or pass run=<trackio.Run>."
        ) from None
    try:
        names = active_settings().outcome_attributes
        names = names if REWARD in names else (REWARD, *names)
        rows = [outcome_row(trace, names) for trace in traces] if table_key else []
        sink.log_traces(key, traces, int(step), table=(table_key, rows) if table_key else None)
    finally:
        sink.release()
    return len(traces)
