"""The per-step outcome table: one ``trackio.Table`` per step in the Media & Tables tab, one row
per sample — which scored, what it answered, which failed or stopped — without opening a Trace.

Real OTel SDK spans in, real Trackio storage read back (the table is a metrics-log value).
"""

from __future__ import annotations

import pytest
from conftest import read_logs, read_traces, wait_until
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode
from test_exporter import _chat_attributes

from otel_trackio import (
    TrackioSettings,
    TrackioSpanExporter,
    TrackioSpanProcessor,
    rollout,
)
from otel_trackio._core.outcomes import ANSWER_CHARS, StepTables, outcome_row
from otel_trackio._engine.open_samples import register_open_sample, unregister_open_sample
from otel_trackio.settings import TrackioConfigError

COLUMNS = [
    "sample_index",
    "rollout_n",
    "reward",
    "status",
    "detail",
    "answer",
    "turns",
    "tokens",
    "latency_ms",
]


def _setup(project: str, **options):
    exporter = TrackioSpanExporter(project=project, name="r", **options)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider, provider.get_tracer("t")


def _tables(project: str, key: str = "rollout/outcomes") -> list[tuple[int, list[dict]]]:
    """Every table logged under ``key``, as (step, rows), in the order they were logged."""
    return [(row["step"], row[key]["_value"]) for row in read_logs(project, "r") if key in row]


def _answered(provider, step: int, index: int, answer: str, reward: float | None) -> None:
    tracer = provider.get_tracer("t")
    with rollout(step, index, rollout_n=index % 2, tracer_provider=provider) as root:
        with tracer.start_as_current_span("chat", attributes=_chat_attributes("q?", answer, 7, 3)):
            pass
        if reward is not None:
            root.set_attribute("reward", reward)


def test_one_table_per_step_says_which_scored_what_they_answered_which_failed_or_stopped(
    project,
):
    exporter, provider, tracer = _setup(project)
    _answered(provider, 0, 1, "It is 5.", 0.0)  # wrong
    _answered(provider, 0, 0, "It is 4. " + "x" * 400, 1.0)  # right, long
    with rollout(0, 2, tracer_provider=provider) as root:  # its tool failed
        with tracer.start_as_current_span("execute_tool calc") as tool:
            tool.set_status(Status(StatusCode.ERROR, "sandbox died"))
        root.set_attribute("reward", 0.0)
    stuck = tracer.start_span("rollout", attributes={"step": 0, "sample_index": 3})
    ids = stuck.get_span_context()
    register_open_sample(ids.trace_id, ids.span_id, {"step": 0, "sample_index": 3})
    with otel_trace.use_span(stuck, end_on_exit=False):
        with tracer.start_as_current_span("chat", attributes=_chat_attributes("q?", "hm", 2, 1)):
            pass
    assert _tables(project) == []  # the step is not over yet
    exporter.force_flush()  # the trainer's end of step: sample 3 goes out partial
    _answered(provider, 1, 0, "It is 9.", 1.0)
    provider.shutdown()
    unregister_open_sample(ids.trace_id, ids.span_id)

    tables = _tables(project)
    assert [step for step, _ in tables] == [0, 1]  # one table per step
    (_, rows), (_, later) = tables
    assert all(list(row) == COLUMNS for row in rows + later)
    by_index = {row["sample_index"]: row for row in rows}
    assert [row["sample_index"] for row in rows] == [0, 1, 2, 3]  # in sample order
    assert [row["reward"] for row in rows] == [1.0, 0.0, 0.0, None]
    assert [row["status"] for row in rows] == ["success", "success", "error", "partial"]
    assert by_index[2]["detail"] == "execute_tool calc: sandbox died"
    assert by_index[3]["detail"] == "flush"
    assert by_index[1]["answer"] == "It is 5."
    assert len(by_index[0]["answer"]) == ANSWER_CHARS and by_index[0]["answer"].endswith("…")
    assert by_index[0]["answer"].startswith("It is 4. xxx")
    assert (by_index[0]["turns"], by_index[0]["tokens"], by_index[0]["rollout_n"]) == (1, 10, 0)
    assert by_index[1]["rollout_n"] == 1 and by_index[2]["turns"] == 0
    assert all(isinstance(row["latency_ms"], float) for row in rows)
    assert [row["answer"] for row in later] == ["It is 9."]
    # The table agrees with the Traces it sums up.
    traces = {t["metadata"]["sample_index"]: t for t in read_traces(project, "r") if t["step"] == 0}
    assert traces[1]["metadata"]["status"] == "reward 0"  # the pill says it too
    assert traces[1]["messages"][-1]["content"] == "It is 5."


def test_a_step_in_several_batches_is_one_table_and_a_straggler_relogs_it_whole(
    project, in_process
):
    # In process: the tables are read as each export's write is stored.
    exporter, provider, _ = _setup(project)
    _answered(provider, 0, 1, "b", 1.0)  # each sample is its own export (and log call)
    _answered(provider, 0, 0, "a", 0.0)
    wait_until(lambda: exporter.stats.samples_logged == 2, "both samples stored")
    assert _tables(project) == []  # a table goes with the Traces of its write: none yet
    _answered(provider, 1, 0, "c", 1.0)  # step 1 begins: step 0 is over

    def answers() -> list[tuple[int, list[str]]]:
        return [(step, [r["answer"] for r in rows]) for step, rows in _tables(project)]

    wait_until(lambda: answers() == [(0, ["a", "b"])], "step 0's table stored")
    _answered(provider, 0, 2, "late", 0.0)  # a straggler of step 0
    provider.shutdown()
    assert [(step, [r["answer"] for r in rows]) for step, rows in _tables(project)] == [
        (0, ["a", "b"]),
        (0, ["a", "b", "late"]),  # the latest table of a step holds all of it
        (1, ["c"]),
    ]
    assert exporter.stats.samples_logged == 4


def test_configured_outcomes_are_columns_and_lead_the_header_and_the_table_can_be_off(project):
    _, provider, tracer = _setup(project, outcome_attributes=("correct", "reward"))
    with rollout(0, 0, tracer_provider=provider, prompt_uid="p1") as root:
        with tracer.start_as_current_span("judge") as judge:
            judge.set_attribute("correct", True)
        root.set_attribute("reward", 0.5)
    provider.shutdown()
    ((_, rows),) = _tables(project)
    assert list(rows[0])[:4] == ["sample_index", "rollout_n", "correct", "reward"]
    assert (rows[0]["correct"], rows[0]["reward"]) == (True, 0.5)
    (trace,) = read_traces(project, "r")
    assert list(trace["metadata"])[:5] == ["step", "sample_index", "correct", "reward", "status"]
    assert trace["metadata"]["status"] == "correct true"  # the first configured outcome

    other = project + "-off"
    _, provider, tracer = _setup(other, outcome_table_key=None)
    with rollout(0, 0, tracer_provider=provider):
        pass
    provider.shutdown()
    assert len(read_traces(other, "r")) == 1
    assert _tables(other) == []


def test_outcome_settings_from_the_environment():
    settings = TrackioSettings.from_env(
        {
            "OTEL_EXPORTER_TRACKIO_OUTCOME_ATTRIBUTES": "reward, pass@1",
            "OTEL_EXPORTER_TRACKIO_OUTCOME_TABLE_KEY": "off",
        }
    )
    assert settings.outcome_attributes == ("reward", "pass@1")
    assert settings.outcome_table_key is None
    assert TrackioSettings().outcome_table_key == "rollout/outcomes"
    with pytest.raises(TrackioConfigError, match="outcome_attributes"):
        TrackioSettings(outcome_attributes=("reward", "reward"))


def test_rows_are_plain_and_tables_forget_old_steps():
    row = outcome_row(
        {
            "metadata": {"sample_index": 0, "reward": [1, 2], "partial": True},
            "messages": [{"role": "assistant", "content": [{"type": "text", "text": "hi\nthere"}]}],
            "spans": [],
        },
        ("reward",),
    )
    assert (row["reward"], row["status"], row["answer"]) == ("[1, 2]", "partial", "hi there")
    tables = StepTables(order=lambda v: (v is None, str(v)), keep_steps=2)
    for step in range(5):
        tables.add(step, [{"sample_index": step}])
    assert [step for step, _ in tables.due()] == [0, 1, 2, 3]
    tables.add(0, [{"sample_index": "late"}])  # step 0 was forgotten: its late rows alone
    assert tables.take_all() == [(0, [{"sample_index": "late"}]), (4, [{"sample_index": 4}])]


def test_rollouts_without_a_sample_index_are_one_sample_said_and_no_score_is_picked(project, capfd):
    """Four rollouts with rewards 0, 1, 0, 1 under one step-level span and no ``sample_index``
    (as a new user may write it): one Trace, as documented, but its header lists the rewards
    rather than showing whichever ended last, and the user is told how to make four."""
    exporter = TrackioSpanExporter(project, "merged")  # the default: offload
    provider = TracerProvider()
    provider.add_span_processor(TrackioSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("train_step", attributes={"step": 3}):
        for reward in (0, 1, 0, 1):
            with tracer.start_as_current_span("rollout", attributes={"step": 3, "reward": reward}):
                pass
    provider.shutdown()
    (trace,) = read_traces(project, "merged")
    assert trace["metadata"]["reward"] == [0, 1, 0, 1]
    assert trace["metadata"]["status"] == "reward varies"
    err = capfd.readouterr().err
    assert "a trace without 'sample_index' holds 5 spans with a 'step'" in err
    assert "put 'sample_index' on each rollout's root span" in err


def test_stragglers_one_batch_at_a_time_relog_their_step_a_few_times_not_every_batch():
    """Async RL: 1,000 late samples of an earlier step arrive one batch each. The step's table is
    handed out again as late rows reach a quarter of what it last held (a few whole tables), and
    the flush hands out the rest: the latest table holds every row."""
    tables = StepTables(order=lambda v: (v is None, str(v)))
    tables.add(0, [{"sample_index": i} for i in range(1000)])
    tables.add(1, [{"sample_index": 0}])
    handed = [len(rows) for step, rows in tables.due() if step == 0]
    for i in range(1000, 2000):
        tables.add(0, [{"sample_index": i}])
        handed += [len(rows) for step, rows in tables.due() if step == 0]
    handed += [len(rows) for step, rows in tables.take_all() if step == 0]
    assert handed[0] == 1000 and handed[-1] == 2000  # whole, with every straggler
    assert len(handed) <= 5 and sum(handed) <= 8000  # before: 1,001 tables, 1.5 million rows
