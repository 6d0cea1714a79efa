"""The per-step outcome table: one plain row per sample, built from its Trace dict.

Trackio's Traces page answers "what did this sample do" one row at a time; a researcher reading a
step wants the opposite view, a table of the step's samples with their score, as verl's
validation-generations table or a W&B table of generations gives it. :func:`outcome_row` turns a
Trace dict (a rollout sample's or a validation generation's: the same shape) into such a row,
:class:`StepTables` gathers a step's rows until the step is over. Pure: plain dicts in and out,
no Trackio import (the sink builds the ``trackio.Table``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from otel_trackio._core.conventions import otel_genai
from otel_trackio._core.values import as_text

OutcomeRow = dict[str, Any]

#: The final answer is cut to this many characters in the table (whole in the Trace).
ANSWER_CHARS = 160


def evaluation_names(spans: Iterable[Mapping[str, Any]]) -> list[str]:
    """The names of the evaluation results (``gen_ai.evaluation.result`` events) on a Trace
    dict's spans, in the order they came."""
    names: list[str] = []
    for span in spans:
        for event in (span.get("metadata") or {}).get("events") or ():
            if not isinstance(event, Mapping) or event.get("name") != otel_genai.EVALUATION_EVENT:
                continue
            found = otel_genai.evaluation(event.get("attributes") or {})
            if found is not None and found[0] not in names:
                names.append(found[0])
    return names


def run_state(trace: Mapping[str, Any]) -> str:
    """How the sample ran, whatever it scored: ``error`` when a span failed, ``partial`` when it
    was logged before it ended, else ``success`` (Trackio's own reading of the spans)."""
    spans = trace.get("spans") or ()
    if any(s.get("status") == "error" or s.get("error") for s in spans):
        return "error"
    if (trace.get("metadata") or {}).get("partial"):
        return "partial"
    return "success"


def outcome_row(trace: Mapping[str, Any], outcome_names: Sequence[str]) -> OutcomeRow:
    """One table row for a Trace dict, every row with the same columns in the same order:
    ``sample_index``, ``rollout_n``, each outcome attribute, ``status`` (:func:`run_state`),
    ``detail`` (the error, or why a partial sample was logged early), ``answer`` (the last
    assistant message, cut), ``turns`` (model turns), ``tokens`` and ``latency_ms``."""
    meta = trace.get("metadata") or {}
    spans = list(trace.get("spans") or ())
    messages = list(trace.get("messages") or ())
    row: OutcomeRow = {
        "sample_index": _cell(meta.get("sample_index")),
        "rollout_n": _cell(meta.get("rollout_n")),
    }
    for name in outcome_names:
        row[name] = _cell(meta.get(name))
    for name in evaluation_names(spans):  # a column per evaluation the sample had
        if name not in row:
            row[name] = _cell(meta.get(name))
    state = run_state(trace)
    row["status"] = state
    row["detail"] = _detail(state, meta, spans)
    answers = [m for m in messages if m.get("role") == "assistant"]
    row["answer"] = _cut(_message_text(answers[-1])) if answers else ""
    row["turns"] = len(answers)
    row["tokens"] = _tokens(spans)
    tops = [s for s in spans if s.get("parent_id") is None]
    durations = [float(s["duration_ms"]) for s in tops if _is_number(s.get("duration_ms"))]
    row["latency_ms"] = round(max(durations), 1) if durations else None
    return row


def _detail(state: str, meta: Mapping[str, Any], spans: list[Mapping[str, Any]]) -> str:
    if state == "error":
        failed = next((s for s in spans if s.get("status") == "error" or s.get("error")), {})
        return _cut(f"{failed.get('name', '')}: {failed.get('error') or 'error'}")
    if state == "partial":
        return _cut(as_text(meta.get("partial_reason")))
    return ""


def _tokens(spans: list[Mapping[str, Any]]) -> int | None:
    total: int | None = None
    for span in spans:
        usage = span.get("usage")
        if not isinstance(usage, Mapping):
            continue
        count = usage.get("total_tokens")
        if _is_number(count):
            total = (total or 0) + int(count)
            continue
        parts = [usage.get("input_tokens"), usage.get("output_tokens")]
        total = (total or 0) + sum(int(p) for p in parts if _is_number(p))
    return total


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        texts = [
            str(part.get("text") or part.get("content") or "")
            for part in content
            if isinstance(part, Mapping)
        ]
        return " ".join(t for t in texts if t)
    return as_text(content)


def _cell(value: Any) -> Any:
    """A value Trackio's table shows as it is: numbers, booleans and text (None: empty)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return _cut(as_text(value))


def _cut(text: str) -> str:
    text = " ".join(text.split())  # one line in a table cell
    return text if len(text) <= ANSWER_CHARS else text[: ANSWER_CHARS - 1] + "…"


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class StepTables:
    """A step's outcome rows, gathered until the step is over, then handed out as one table.

    Samples of a step reach the pipeline in several batches; one table per batch would bury the
    Media & Tables tab. A step is over when a sample of a later step is logged (:meth:`due`) or
    at a flush (:meth:`take_all`: the trainer's end-of-step ``force_flush``, the shutdown). A
    sample of a step already handed out (a straggler) hands the step out again, whole: the
    latest table of a step holds all its samples. Between flushes a step is handed out again
    only once its late rows reach a quarter of the rows it was last handed out with, so
    stragglers arriving one batch at a time cost a number of tables that grows with the log of
    the step's size, not one whole table per batch. Rows of the last ``keep_steps`` steps are
    kept for that; a straggler of an older step makes a table of the late rows only.

    Args:
        order: the sort key of a ``sample_index`` / ``rollout_n`` value (rows are listed in
            sample order, as the Traces are).
        keep_steps: how many steps' rows are kept.
    """

    def __init__(self, order: Callable[[Any], Any], keep_steps: int = 16) -> None:
        self._order = order
        self._keep_steps = keep_steps
        self._rows: dict[int, list[OutcomeRow]] = {}
        self._pending: set[int] = set()
        self._handed: dict[int, int] = {}  # rows a step had when last handed out
        self._latest: int | None = None

    def add(self, step: int, rows: Iterable[OutcomeRow]) -> None:
        """Add a step's rows (of Traces that were logged)."""
        new = list(rows)
        if not new:
            return
        self._rows.setdefault(step, []).extend(new)
        self._pending.add(step)
        self._latest = step if self._latest is None else max(self._latest, step)

    def due(self) -> list[tuple[int, list[OutcomeRow]]]:
        """The tables of the steps that are over (a later step has rows), oldest first."""
        latest = self._latest
        if latest is None:
            return []
        return self._take([s for s in self._pending if s < latest and self._late_enough(s)])

    def _late_enough(self, step: int) -> bool:
        handed = self._handed.get(step)
        if handed is None:
            return True
        return len(self._rows.get(step, ())) - handed >= max(1, handed // 4)

    def take_all(self) -> list[tuple[int, list[OutcomeRow]]]:
        """Every table not handed out yet (a flush), oldest first."""
        return self._take(list(self._pending))

    def _take(self, steps: list[int]) -> list[tuple[int, list[OutcomeRow]]]:
        out = []
        for step in sorted(steps):
            self._pending.discard(step)
            self._handed[step] = len(self._rows[step])
            rows = sorted(
                self._rows[step],
                key=lambda r: (self._order(r.get("sample_index")), self._order(r.get("rollout_n"))),
            )
            rows = same_columns(rows)
            out.append((step, rows))
        for step in sorted(self._rows):  # forget the oldest steps handed out
            if len(self._rows) <= self._keep_steps:
                break
            if step not in self._pending:
                del self._rows[step]
                self._handed.pop(step, None)
        return out


def same_columns(rows: Sequence[OutcomeRow]) -> list[OutcomeRow]:
    """Rows with the same columns in the same order (an evaluation only some samples had is an
    empty cell in the others): the first row's order, then columns of later rows, before
    ``status``."""
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    fixed = ["status", "detail", "answer", "turns", "tokens", "latency_ms"]
    ordered = [c for c in columns if c not in fixed] + [c for c in fixed if c in columns]
    return [{key: row.get(key) for key in ordered} for row in rows]
