"""log_generations: validation samples as Traces in real Trackio storage."""

from __future__ import annotations

import numpy as np
import pytest
import trackio
from conftest import read_logs, read_traces
from test_outcomes import COLUMNS
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio import log_generations
from otel_trackio.validation import generations_to_traces


def test_tuples_short_tuples_and_dicts_in_one_log_call(project):
    run = trackio.init(project=project, name="val")
    try:
        count = log_generations(
            [
                ("what is 2+2?", "4", 1.0),
                ("capital of France?", "Paris"),
                ("unanswered",),
                {
                    "input": "hi",
                    "output": {"text": "hello"},
                    "score": np.float32(0.5),
                    "lang": "en",
                },
                (["a", "b"], 42, None),
            ],
            step=12,
        )
        assert count == 5
    finally:
        run.finish()
    traces = read_traces(project, "val")
    assert len(traces) == 5
    assert {t["step"] for t in traces} == {12}
    by_index = {t["metadata"]["sample_index"]: t for t in traces}
    assert by_index[0]["messages"] == [
        {"role": "user", "content": "what is 2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    assert by_index[0]["metadata"]["reward"] == 1.0
    assert by_index[0]["metadata"]["source"] == "validation_generations"
    assert [m["role"] for m in by_index[1]["messages"]] == ["user", "assistant"]
    assert "reward" not in by_index[1]["metadata"]
    assert by_index[2]["messages"] == [{"role": "user", "content": "unanswered"}]
    assert by_index[3]["messages"][1] == {"role": "assistant", "content": '{"text": "hello"}'}
    assert by_index[3]["metadata"]["reward"] == 0.5
    assert by_index[3]["metadata"]["lang"] == "en"
    assert by_index[4]["messages"][0]["content"] == '["a", "b"]'
    assert by_index[4]["messages"][1]["content"] == "42"
    assert by_index[4]["metadata"]["reward"] is None
    # The header a rollout sample has: identity, the outcome as `reward` and a status pill
    # saying it (rollouts and validation samples answer one search), the extra fields.
    assert list(by_index[3]["metadata"]) == [
        "step",
        "sample_index",
        "reward",
        "status",
        "lang",
        "validate",
        "source",
        "search",
    ]
    assert by_index[3]["metadata"]["search"] == "reward=0.5 lang=en"
    statuses = [by_index[i]["metadata"]["status"] for i in range(5)]
    assert statuses == ["reward 1", "success", "no output", "reward 0.5", "success"]
    found = SQLiteStorage.get_traces(project, "val", search="reward=1")
    assert [t["metadata"]["sample_index"] for t in found] == [0]
    # One Trackio log call: one row at step 12, with the outcome table of the 5 samples.
    rows = [r for r in read_logs(project, "val") if r.get("step") == 12]
    assert len(rows) == 1
    table = rows[0]["val/outcomes"]
    assert table["_type"] == "trackio.table"
    assert [list(r.values()) for r in table["_value"]] == [
        [0, None, 1.0, "success", "", "4", 1, None, None],
        [1, None, None, "success", "", "Paris", 1, None, None],
        [2, None, None, "success", "", "", 0, None, None],
        [3, None, 0.5, "success", "", '{"text": "hello"}', 1, None, None],
        [4, None, None, "success", "", "42", 1, None, None],
    ]
    assert list(table["_value"][0]) == COLUMNS  # the rollouts' columns


def test_explicit_run_and_key(project):
    run = trackio.init(project=project, name="explicit")
    try:
        log_generations(
            [{"prompt": "p", "response": "r", "reward": 2}], 3, key="eval/gens", run=run
        )
    finally:
        run.finish()
    (trace,) = read_traces(project, "explicit")
    assert trace["step"] == 3
    assert trace["messages"][0]["content"] == "p"
    assert trace["metadata"]["reward"] == 2
    assert trace["metadata"]["status"] == "reward 2"
    (row,) = [r for r in read_logs(project, "explicit") if r.get("step") == 3]
    assert "val/outcomes" in row  # the table beside the Traces


def test_the_table_can_be_turned_off(project):
    run = trackio.init(project=project, name="off")
    try:
        log_generations([("q", "a", 1)], 0, table_key=None)
    finally:
        run.finish()
    assert len(read_traces(project, "off")) == 1
    assert not any("val/outcomes" in r for r in read_logs(project, "off"))


def test_no_run_is_a_clear_error():
    with pytest.raises(ValueError, match=r"trackio\.init"):
        log_generations([("a", "b", 1)], 0)
    assert log_generations([], 0) == 0  # nothing to log: no run needed


def test_conversion_is_pure_and_keeps_given_sample_index():
    traces = generations_to_traces([{"input": "x", "sample_index": 7}, b"\xff"], 1)
    assert traces[0]["metadata"]["sample_index"] == 7
    assert traces[1]["messages"] == [{"role": "user", "content": "\ufffd"}]
    long = generations_to_traces([("x" * 100, "y")], 0, max_value_chars=10)
    assert long[0]["messages"][0]["content"].startswith("x" * 10 + "…")
