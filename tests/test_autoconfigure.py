"""Zero-code setup: ``opentelemetry-instrument`` with ``OTEL_*`` variables only, and the
environment reader (``TrackioSettings.from_env``)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import read_logs, read_traces, trace_usage
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.sampling import DEFAULT_ON

from otel_trackio import TrackioConfigError, autoconfigure, environment_variables
from otel_trackio.autoconfigure import (
    TrackioEnvLogExporter,
    TrackioEnvMetricExporter,
    TrackioEnvSpanExporter,
    settings_from_env,
)
from otel_trackio.sampling import step_sampler_factory

ROOT = Path(__file__).resolve().parents[1]
INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"

APP = textwrap.dedent(
    """
    # A program that knows nothing about Trackio: plain OTel API calls.
    from opentelemetry import metrics, trace

    tracer = trace.get_tracer("app")
    reward = metrics.get_meter("app").create_histogram("rollout.reward")
    for step in range(2):
        for i in range(4):
            sample = {"step": step, "sample_index": i}
            with tracer.start_as_current_span("rollout", attributes=sample):
                with tracer.start_as_current_span("chat policy") as span:
                    span.set_attribute("gen_ai.operation.name", "chat")
                    span.set_attribute("gen_ai.usage.input_tokens", 10 + i)
                    span.set_attribute("gen_ai.usage.output_tokens", 2)
            reward.record(0.25 * i, {"step": step})
    print("app finished", trace.get_tracer_provider().sampler.get_description())
    """
)


GENAI_APP = textwrap.dedent(
    """
    # Model calls whose content goes out as GenAI log events (openai-v2's EVENT_ONLY mode), and
    # an ordinary log record: plain OTel API calls.
    from opentelemetry import _logs, trace

    tracer = trace.get_tracer("app")
    logger = _logs.get_logger("genai")
    chat = {"gen_ai.operation.name": "chat"}
    for i in range(3):
        with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": i}):
            with tracer.start_as_current_span("chat m", attributes=chat):
                messages = {
                    "gen_ai.input.messages": [
                        {"role": "user", "parts": [{"type": "text", "content": f"q{i}"}]}
                    ],
                    "gen_ai.output.messages": [
                        {"role": "assistant", "parts": [{"type": "text", "content": f"a{i}"}]}
                    ],
                }
                name = "gen_ai.client.inference.operation.details"
                logger.emit(_logs.LogRecord(event_name=name, attributes=messages))
                logger.emit(_logs.LogRecord(body="an ordinary log line"))
    print("app finished")
    """
)


def _instrument(
    tmp_path: Path, trackio_dir: str, env: dict[str, str], *flags: str, app_text: str = APP
):
    app = tmp_path / "app.py"
    app.write_text(app_text)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full_env = {
        **clean,
        "TRACKIO_DIR": trackio_dir,
        "TRACKIO_DISABLE_TELEMETRY": "1",
        "OTEL_TRACES_EXPORTER": "trackio",
        "OTEL_METRICS_EXPORTER": "trackio",
        "OTEL_LOGS_EXPORTER": "none",
        **env,
    }
    return subprocess.run(
        [str(INSTRUMENT), *flags, sys.executable, str(app)],
        env=full_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_opentelemetry_instrument_with_env_vars_only(project, trackio_dir, tmp_path):
    result = _instrument(
        tmp_path,
        trackio_dir,
        {
            "OTEL_EXPORTER_TRACKIO_PROJECT": project,
            "OTEL_EXPORTER_TRACKIO_RUN": "zero-code",
            "OTEL_SERVICE_NAME": "rollout-worker",
        },
    )
    assert result.returncode == 0, result.stderr
    assert "app finished" in result.stdout

    traces = read_traces(project, "zero-code")
    assert [(t["step"], t["metadata"]["sample_index"]) for t in traces] == [
        (s, i) for s in range(2) for i in range(4)
    ]
    assert [trace_usage(t)["input_tokens"] for t in traces[:4]] == [10, 11, 12, 13]
    assert {t["metadata"]["service_name"] for t in traces} == {"rollout-worker"}
    means = {
        row["step"]: row["rollout.reward/mean"]
        for row in read_logs(project, "zero-code")
        if "rollout.reward/mean" in row
    }
    assert means == {0: pytest.approx(0.375), 1: pytest.approx(0.375)}


def test_opentelemetry_instrument_sends_genai_log_events_to_their_samples(
    project, trackio_dir, tmp_path
):
    result = _instrument(
        tmp_path,
        trackio_dir,
        {
            "OTEL_LOGS_EXPORTER": "trackio",
            "OTEL_EXPORTER_TRACKIO_PROJECT": project,
            "OTEL_EXPORTER_TRACKIO_RUN": "zero-code-logs",
        },
        app_text=GENAI_APP,
    )
    assert result.returncode == 0, result.stderr
    assert "app finished" in result.stdout
    traces = read_traces(project, "zero-code-logs")
    assert [t["messages"] for t in traces] == [
        [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
        for i in range(3)
    ]
    assert not any(t["metadata"].get("partial") for t in traces)


def test_instrument_flags_and_sampling_cap(project, trackio_dir, tmp_path):
    result = _instrument(
        tmp_path,
        trackio_dir,
        {"OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP": "2"},
        f"--exporter_trackio_project={project}",
        "--exporter_trackio_run=flags",
        "--exporter_trackio_key=rollout/sampled",
    )
    assert result.returncode == 0, result.stderr
    assert "StepSampler" in result.stdout  # the provider's sampler was set before app tracers
    traces = read_traces(project, "flags")
    assert [t["step"] for t in traces] == [0, 0, 1, 1]
    assert {t["key"] for t in traces} == {"rollout/sampled"}


def test_missing_project_is_one_clear_error_and_the_app_still_runs(tmp_path, trackio_dir):
    result = _instrument(tmp_path, trackio_dir, {})
    assert result.returncode == 0
    assert "app finished" in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors == [
        "otel-trackio: set OTEL_EXPORTER_TRACKIO_PROJECT to the Trackio project to log into "
        "(e.g. OTEL_EXPORTER_TRACKIO_PROJECT=my-rl); nothing is sent to Trackio."
    ]


def test_a_malformed_value_under_zero_code_keeps_the_run_and_says_it_in_plain_words(
    tmp_path, trackio_dir, project
):
    """One line naming the variable, its value and what it takes; that setting keeps its
    default, and the run is traced all the same."""
    env = {
        "OTEL_EXPORTER_TRACKIO_PROJECT": project,
        "OTEL_EXPORTER_TRACKIO_RUN": "kept",
        "OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP": "two",
    }
    result = _instrument(tmp_path, trackio_dir, env)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "MAX_SAMPLES_PER_STEP" in line]
    assert said == [
        "otel-trackio: OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP='two': expected an integer "
        ">= 0, or None; its default is used instead"
    ]
    assert "invalid literal" not in result.stderr
    assert len(read_traces(project, "kept")) == 8  # nothing dropped (and no sampler)


def test_configure_says_a_malformed_variable_as_zero_code_does(monkeypatch, project):
    import otel_trackio

    for name, value, expected in [
        ("OFFLOAD", "flase", "expected a boolean (true/false), or None"),
        ("MAX_SAMPLES_PER_STEP", "two", "expected an integer >= 0, or None"),
        ("SPOOL_FSYNC", "cycel", "expected request, cycle or never"),
        ("RESUME", "alow", "expected never, allow or must"),
    ]:
        monkeypatch.setenv(f"OTEL_EXPORTER_TRACKIO_{name}", value)
        with pytest.raises(TrackioConfigError) as caught:
            otel_trackio.configure(project, "bad")
        assert str(caught.value) == f"OTEL_EXPORTER_TRACKIO_{name}={value!r}: {expected}"
        monkeypatch.delenv(f"OTEL_EXPORTER_TRACKIO_{name}")


# -- the environment reader, in process ------------------------------------------------------


@pytest.fixture
def env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_TRACKIO_"):
            monkeypatch.delenv(name)
    autoconfigure._reported.clear()

    def set_env(**values: str) -> None:
        for key, value in values.items():
            monkeypatch.setenv(f"OTEL_EXPORTER_TRACKIO_{key}", value)

    return set_env


def upper_decoder(ids):
    return " ".join(f"<{i}>" for i in ids).upper()


def test_options_from_env(env):
    env(
        PROJECT="p",
        RUN="r",
        KEY="k/traces",
        SERVER_URL="http://127.0.0.1:1",
        RESUME="allow",
        SAMPLE_TTL_SECONDS="2.5",
        MAX_BUFFERED_SPANS="10",
        MAX_VALUE_CHARS="100",
        TOKEN_DECODER=f"{__name__}:upper_decoder",
        STEP_ATTRIBUTE="global_step",
    )
    settings = settings_from_env()
    assert settings == settings.__class__(
        project="p",
        name="r",
        server_url="http://127.0.0.1:1",
        resume="allow",
        key="k/traces",
        step_attribute="global_step",
        sample_ttl_seconds=2.5,
        max_buffered_spans=10,
        max_value_chars=100,
        token_decoder=upper_decoder,
        offload=True,  # the zero-code default
    )
    assert settings.init_kwargs == {"server_url": "http://127.0.0.1:1", "resume": "allow"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAX_VALUE_CHARS", "many"),
        ("MAX_BUFFERED_SPANS", "0"),
        ("SAMPLE_TTL_SECONDS", "nan"),
        ("RESUME", "sometimes"),
        ("TOKEN_DECODER", "no_such_module_xyz:decode"),
        ("TOKEN_DECODER", "just-a-name"),
    ],
)
def test_bad_values_name_the_variable(env, name, value):
    env(PROJECT="p", **{name: value})
    with pytest.raises(TrackioConfigError, match=f"OTEL_EXPORTER_TRACKIO_{name}"):
        settings_from_env()


@pytest.mark.parametrize("off", ["none", "off", ""])
def test_token_decoder_off(env, off):
    env(PROJECT="p", TOKEN_DECODER=off)
    assert settings_from_env().token_decoder is None


def test_zero_argument_exporters_share_one_run(env, project):
    env(PROJECT=project, RUN="shared")
    spans = TrackioEnvSpanExporter()
    metrics = TrackioEnvMetricExporter()
    logs = TrackioEnvLogExporter()
    try:
        assert isinstance(spans, TrackioEnvSpanExporter)
        assert spans.run is metrics.run
        assert (spans.run.project, spans.run.name) == (project, "shared")
        # The log exporter found where the span exporter takes events (same project and run).
        assert logs.exporter._target() is spans.exporter.event_intake
    finally:
        logs.shutdown()
        metrics.shutdown()
        spans.shutdown()
    assert spans.run._stop_flag.is_set()  # the last holder finished it


def test_keyword_arguments_override_the_environment(env, project):
    env(PROJECT="not-this-one", KEY="env/key")
    exporter = TrackioEnvSpanExporter(project=project, name="kw", key="kw/key")
    try:
        assert (exporter.run.project, exporter.key) == (project, "kw/key")
    finally:
        exporter.shutdown()


def test_missing_project_gives_a_disabled_exporter_and_one_error(env, caplog):
    with caplog.at_level(logging.ERROR, logger="otel_trackio"):
        spans = TrackioEnvSpanExporter()
        metrics = TrackioEnvMetricExporter()
        logs = TrackioEnvLogExporter()
    assert spans.export([]) is SpanExportResult.FAILURE
    assert logs.export([]) is LogRecordExportResult.FAILURE
    logs.shutdown()
    metrics.shutdown()
    spans.shutdown()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "OTEL_EXPORTER_TRACKIO_PROJECT" in messages[0]


def test_sampler_entry_point(env):
    assert step_sampler_factory(None) is DEFAULT_ON
    assert "StepSampler" in step_sampler_factory("3").get_description()
    env(MAX_SAMPLES_PER_STEP="5")
    assert "StepSampler" in step_sampler_factory(None).get_description()
    with pytest.raises(TrackioConfigError, match="OTEL_TRACES_SAMPLER_ARG"):
        step_sampler_factory("lots")


def test_entry_points_are_registered():
    from importlib.metadata import entry_points

    def target(group: str, name: str) -> str:
        (point,) = [p for p in entry_points(group=group) if p.name == name]
        return point.value

    assert target("opentelemetry_traces_exporter", "trackio").endswith("TrackioEnvSpanExporter")
    assert target("opentelemetry_metrics_exporter", "trackio").endswith("TrackioEnvMetricExporter")
    assert target("opentelemetry_logs_exporter", "trackio").endswith("TrackioEnvLogExporter")
    assert target("opentelemetry_traces_sampler", "trackio_step").endswith("step_sampler_factory")
    assert (
        target("opentelemetry_environment_variables", "trackio")
        == "otel_trackio.environment_variables"
    )
    flags = [name for name in dir(environment_variables) if name.startswith("OTEL_")]
    assert flags and all(name.startswith("OTEL_EXPORTER_TRACKIO_") for name in flags)
