"""TrackioSettings: one place for every setting; the table of docs/configuration.md, the
environment and the code agree, and every consumer honours the names it sets."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from dataclasses import fields
from pathlib import Path

import pytest
import trackio
from conftest import read_traces
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_trackio import (
    StepSampler,
    TrackioConfigError,
    TrackioSettings,
    TrackioSpanExporter,
    environment_variables,
    rollout,
)
from otel_trackio._settings import settings_for
from otel_trackio._trackio import installed as trackio_door


def settings_variables() -> dict[str, str]:
    """``{setting name: environment variable}`` for every setting that has one."""
    return {f.name: f.metadata["env"] for f in fields(TrackioSettings) if f.metadata.get("env")}


ROOT = Path(__file__).resolve().parents[2]


CONFIGURATION_PAGE = ROOT / "docs" / "configuration.md"


def _configuration_rows() -> list[list[str]]:
    text = CONFIGURATION_PAGE.read_text()
    section = text.split("\n## Settings", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _readme_default(value: object) -> str:
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        return "`" + repr(value).replace("'", '"') + "`"  # ("reward",) for one name
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def test_every_setting_with_a_variable_is_in_the_configuration_table_with_its_default():
    rows = _configuration_rows()
    defaults = TrackioSettings()
    for name, variable in settings_variables().items():
        matching = [r for r in rows if f"`{name}`" in r[0]]
        assert matching, f"docs/configuration.md's settings table has no row for {name}"
        _, env_cell, default_cell = matching[0][:3]
        assert f"`{variable}`" in env_cell, (name, env_cell)
        default = getattr(defaults, name)
        if default is not None and not isinstance(default, dict):
            assert _readme_default(default) in default_cell, (name, default_cell)


def test_every_variable_is_declared_once_and_read_by_a_setting():
    declared = {n for n in dir(environment_variables) if n.startswith("OTEL_")}
    assert declared == set(settings_variables().values())
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    mentioned = {
        (page.name, variable)
        for page in pages
        for variable in re.findall(r"OTEL_EXPORTER_TRACKIO_[A-Z_]+", page.read_text())
    }
    assert {variable for _, variable in mentioned} <= declared, {
        m for m in mentioned if m[1] not in declared
    }


def test_from_env_reads_every_kind_and_names_a_bad_variable():
    settings = TrackioSettings.from_env(
        {
            "OTEL_EXPORTER_TRACKIO_TOKEN_ID_ATTRIBUTES": "ids=input, out=output",
            "OTEL_EXPORTER_TRACKIO_LOG_DISTRIBUTIONS": "yes",
            "OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP": "4",
            "OTEL_EXPORTER_TRACKIO_KEY": "  spaced/key  ",
            "OTEL_EXPORTER_TRACKIO_HISTOGRAM_STATS": "min, COUNT,max",
        },
        key="argument/wins",
    )
    assert settings.token_id_attributes == {"ids": "input", "out": "output"}
    assert settings.log_distributions is True
    assert settings.max_samples_per_step == 4
    assert settings.key == "argument/wins"
    assert settings.histogram_stats == ("min", "count", "max")
    assert (
        TrackioSettings.from_env({"OTEL_EXPORTER_TRACKIO_HISTOGRAM_STATS": "none"}).histogram_stats
        == ()
    )
    for variable, value in [
        ("OTEL_EXPORTER_TRACKIO_TOKEN_ID_ATTRIBUTES", "ids=sideways"),
        ("OTEL_EXPORTER_TRACKIO_LOG_DISTRIBUTIONS", "maybe"),
        ("OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP", "-1"),
        ("OTEL_EXPORTER_TRACKIO_HISTOGRAM_STATS", "mean,median"),
        ("OTEL_EXPORTER_TRACKIO_HISTOGRAM_STATS", "max,max"),
    ]:
        with pytest.raises(TrackioConfigError, match=variable):
            TrackioSettings.from_env({variable: value})


def test_bad_arguments_name_the_setting_and_settings_are_frozen():
    with pytest.raises(TrackioConfigError, match="max_buffered_spans=0"):
        TrackioSettings(max_buffered_spans=0)
    with pytest.raises(TrackioConfigError, match="token_id_attributes"):
        TrackioSettings(token_id_attributes={"ids": "left"})
    with pytest.raises(TrackioConfigError, match="histogram_stats"):
        TrackioSettings(histogram_stats=("median",))
    assert TrackioSettings(histogram_stats=["max"]).histogram_stats == ("max",)
    settings = TrackioSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.key = "x"  # type: ignore[misc]
    given = {"ids": "input"}
    settings = TrackioSettings(token_id_attributes=given)
    given["ids"] = "output"
    assert settings.token_id_attributes == {"ids": "input"}


def test_unknown_options_go_to_trackio_init(project):
    exporter = TrackioSpanExporter(project, "r", key="k/t", config={"lr": 0.5})
    try:
        assert exporter.settings.key == "k/t"
        assert exporter.settings.trackio_init == {"config": {"lr": 0.5}}
        assert exporter.run.config["lr"] == 0.5
    finally:
        exporter.shutdown()


def test_rollout_and_step_sampler_use_the_configured_attribute_names(project):
    exporter = TrackioSpanExporter(
        project, "r", step_attribute="global_step", sample_attribute="prompt_index"
    )
    provider = TracerProvider(sampler=StepSampler(1))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    for step in (3, 4):
        for index in range(3):
            with rollout(step, index, tracer_provider=provider) as span:
                assert span.is_recording() == (index == 0)
    provider.shutdown()
    traces = read_traces(project, "r")
    assert [(t["step"], t["metadata"]["sample_index"]) for t in traces] == [(3, 0), (4, 0)]
    root = traces[0]["spans"][0]["metadata"]
    assert root["global_step"] == 3 and root["prompt_index"] == 0


class _PublicOnlyRun:
    """A run showing only Trackio's public surface (what a future Trackio might keep)."""

    def __init__(self, run: trackio.Run) -> None:
        self._run = run
        self.project = run.project
        self.name = run.name

    def log(self, metrics: dict, step: int | None = None) -> None:
        self._run.log(metrics, step=step)

    def finish(self) -> None:
        self._run.finish()


def test_a_run_without_trackio_internals_stores_every_sample_and_says_what_is_lost(
    project, caplog, tracer_provider, in_process
):
    # In process: this process's sink against a Trackio lacking the members it uses.
    real = trackio.init(project=project, name="public", resume="never")
    trackio_door._missing.reset()
    exporter = TrackioSpanExporter(run=_PublicOnlyRun(real))
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        for index in range(5):
            with tracer.start_as_current_span(
                "rollout", attributes={"step": 1, "sample_index": index}
            ):
                pass
        provider.shutdown()
    real.finish()  # the user's run: the exporter never finishes it
    assert len(read_traces(project, "public")) == 5
    lost = [r.getMessage() for r in caplog.records if "lacks" in r.getMessage()]
    assert len(lost) == 1, lost
    assert "no longer written to storage before export() returns" in lost[0]


def test_a_misspelt_keyword_is_refused_where_it_was_written_with_the_setting_meant(project):
    """A keyword that is neither a setting nor a ``trackio.init`` keyword is refused in the
    calling process (it used to reach ``trackio.init`` in the writer process and fail there)."""
    import otel_trackio
    from otel_trackio import TrackioConfigError, TrackioSpanExporter

    for build in (
        lambda: TrackioSpanExporter(project, "r", max_samples_per_stp=3),
        lambda: otel_trackio.configure(project, "r", max_samples_per_stp=3),
    ):
        with pytest.raises(TrackioConfigError, match="did you mean 'max_samples_per_step'"):
            build()
    exporter = TrackioSpanExporter(project, "r", private=True, config={"lr": 1e-4})
    assert exporter.settings.trackio_init == {"private": True, "config": {"lr": 1e-4}}
    exporter.shutdown()


# A valid value of each variable other than its default: (the variable's text, the setting it
# gives, an argument of another value that must win over it).
VARIABLE_VALUES: dict[str, tuple[str, object, object]] = {
    "project": ("env-project", "env-project", "arg-project"),
    "name": ("env-run", "env-run", "arg-run"),
    "group": ("env-group", "env-group", "arg-group"),
    "server_url": ("http://127.0.0.1:9/?write_token=t", "http://127.0.0.1:9/?write_token=t", None),
    "space_id": ("user/space", "user/space", None),
    "resume": ("must", "must", "never"),
    "key": ("env/traces", "env/traces", "rollout/traces"),
    "outcome_attributes": ("score, passed", ("score", "passed"), ("reward",)),
    "outcome_table_key": ("none", None, "rollout/outcomes"),
    "step_durations_key": ("phase_time", "phase_time", None),
    "step_attribute": ("iteration", "iteration", "step"),
    "sample_attribute": ("rollout_index", "rollout_index", "sample_index"),
    "sample_ttl_seconds": ("12.5", 12.5, 300.0),
    "sample_grace_seconds": ("0.5", 0.5, None),
    "max_buffered_spans": ("77", 77, 100_000),
    "max_value_chars": ("999", 999, 65_536),
    "max_span_attributes": ("5", 5, 1024),
    "max_span_events": ("6", 6, 1024),
    "token_decoder": ("json:dumps", json.dumps, None),
    "token_id_attributes": ("ids=input", {"ids": "input"}, {"prompt_ids": "input"}),
    "offload": ("false", False, True),
    "writer_max_lag_seconds": ("3", 3.0, 30.0),
    "shutdown_timeout_seconds": ("40", 40.0, None),
    "spool_dir": ("/tmp/env-spool", "/tmp/env-spool", None),
    "spool_max_mb": ("64", 64.0, 1024.0),
    "spool_fsync": ("never", "never", "cycle"),
    "log_distributions": ("true", True, False),
    "histogram_stats": ("count,sum", ("count", "sum"), ("mean",)),
    "counter_totals": ("true", True, False),
    "max_samples_per_step": ("3", 3, None),
    "sampling_seed": ("42", 42, 0),
    "summary": ("false", False, True),
    "gc_freeze": ("false", False, True),
}


def test_the_variable_table_covers_every_variable():
    assert set(VARIABLE_VALUES) == set(settings_variables())


@pytest.mark.parametrize("setting", sorted(VARIABLE_VALUES))
def test_each_variable_is_the_default_of_its_setting_everywhere(setting, monkeypatch):
    """``configure()``, a hand-built exporter and the receiver read a variable as zero code does:
    the default of the setting it names; an argument wins."""
    variable = settings_variables()[setting]
    text, value, argument = VARIABLE_VALUES[setting]
    for other in settings_variables().values():
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(variable, text)
    # configure(), TrackioSpanExporter/TrackioMetricExporter/TrackioLogExporter(...): one path
    assert getattr(settings_for(None, None, None, {}), setting) == value
    # zero code, otel-trackio serve and drain
    assert getattr(TrackioSettings.from_env(), setting) == value
    # an argument wins, even over a malformed variable
    assert getattr(settings_for(None, None, None, {setting: argument}), setting) == argument
    monkeypatch.setenv(variable, "=not, a value=")
    assert getattr(settings_for(None, None, None, {setting: argument}), setting) == argument


def test_configure_takes_what_the_variables_say(project, monkeypatch, trackio_dir):
    """The variables reach a real run: the project, the run and the key of its Traces."""
    import otel_trackio
    from otel_trackio import rollout

    monkeypatch.setenv("OTEL_EXPORTER_TRACKIO_PROJECT", project)
    monkeypatch.setenv("OTEL_EXPORTER_TRACKIO_RUN", "from-env")
    monkeypatch.setenv("OTEL_EXPORTER_TRACKIO_KEY", "env/traces")
    handle = otel_trackio.configure(logs=False, metrics=False)
    try:
        with rollout(0, 0):
            pass
    finally:
        handle.shutdown()
    [trace] = read_traces(project, "from-env")
    assert trace["key"] == "env/traces"


def test_a_misspelt_variable_is_said_once_with_the_real_name(monkeypatch, caplog):
    from otel_trackio import _settings

    monkeypatch.setattr(_settings, "_unknown_said", set())
    monkeypatch.setenv("OTEL_EXPORTER_TRACKIO_SAMPLES_PER_STEP", "4")
    monkeypatch.setenv("OTEL_EXPORTER_TRACKIO_ZZZ", "1")
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        settings = settings_for(None, None, None, {})  # configure() and the exporters
        TrackioSettings.from_env()  # zero code, serve: said once per name all the same
    said = [m for r in caplog.records if "is no otel-trackio setting" in (m := r.getMessage())]
    assert said == [
        "otel-trackio: OTEL_EXPORTER_TRACKIO_SAMPLES_PER_STEP is no otel-trackio setting and is "
        "ignored (did you mean OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP?)",
        "otel-trackio: OTEL_EXPORTER_TRACKIO_ZZZ is no otel-trackio setting and is ignored",
    ]
    assert settings.max_samples_per_step is None
