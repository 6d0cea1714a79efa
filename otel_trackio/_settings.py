"""``TrackioSettings``: every otel-trackio setting, its default and its environment variable, once.

In the style of OpenInference's ``TraceConfig``: one frozen dataclass; each field declares its
default and the ``OTEL_EXPORTER_TRACKIO_*`` variable that sets it (see
:mod:`otel_trackio._environment_variables`). The exporters, the assembler, the converter, the OTLP
receiver, :func:`otel_trackio.configure` and the zero-code entry points all read one of these.

Build one with keyword arguments (``TrackioSettings(key="val/traces")``), from the environment
(``TrackioSettings.from_env(**overrides)``: arguments win), or let an exporter build it from its
own keyword arguments (:func:`split_options`: setting names become settings, every other keyword
goes to ``trackio.init``).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from otel_trackio import _environment_variables as env

FSYNC_POLICIES = ("request", "cycle", "never")
"""When the spool's bytes are forced to the disk (``fsync``):

- ``request``: every append before it returns (before a request is acknowledged), and every
  checkpoint: an acknowledged entry survives a power loss or a kernel crash.
- ``cycle``: the checkpoint, with the segment bytes it covers, once per drain cycle: a power
  loss keeps a checkpoint that matches the segments (never "replay everything" nor a checkpoint
  past data the disk lost); entries acknowledged in the last moments before it (up to the OS's
  write-back delay, about 30 s on Linux) can be lost.
- ``never``: the OS writes back when it likes: process kills are survived, a power loss can
  lose recent entries and leave the checkpoint ahead of them.
"""


TokenDecoder = Callable[[Sequence[int]], str]

#: token id attribute → the side of the span it fills (``"input"`` or ``"output"``).
DEFAULT_TOKEN_ID_ATTRIBUTES: Mapping[str, str] = {
    "prompt_ids": "input",
    "response_ids": "output",
    "token_ids": "output",
}

_OFF = frozenset({"", "none", "off", "false", "0", "no"})
_TRUE = frozenset({"1", "true", "yes", "on"})
_RESUME = ("never", "allow", "must")

#: the statistics a histogram point can be logged as (``<name>/<stat>``).
HISTOGRAM_STATS = ("count", "sum", "mean", "min", "max")


class TrackioConfigError(ValueError):
    """A setting (or the ``OTEL_EXPORTER_TRACKIO_*`` variable behind it) is missing or malformed;
    the message names it."""


# -- kinds of setting: how a value is checked and how the environment's text is read ----------


@dataclass(frozen=True)
class _Kind:
    """What values a setting takes: ``check`` a value, ``parse`` an environment string."""

    expected: str
    check: Callable[[Any], bool]
    parse: Callable[[str], Any]


class SpecError(ValueError):
    """A value read from its text, and what is wrong with it in plain words (other parse
    failures are said with the setting's ``expected``, not in Python's wording)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _flag(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _OFF:
        return False
    raise ValueError


def _fsync_policy(raw: str) -> str:
    text = raw.strip().lower()
    if text not in FSYNC_POLICIES:
        raise ValueError
    return text


def _choice(raw: str) -> str:
    if raw not in _RESUME:
        raise ValueError
    return raw


def _sides(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in raw.split(","):
        name, _, side = item.strip().partition("=")
        out[name.strip()] = side.strip()
    return out


def _stat_names(raw: str) -> tuple[str, ...]:
    if raw.lower() in _OFF:
        return ()
    return tuple(name.strip().lower() for name in raw.split(",") if name.strip())


def _names(raw: str) -> tuple[str, ...]:
    if raw.lower() in _OFF:
        return ()
    return tuple(name.strip() for name in raw.split(",") if name.strip())


def _are_names(value: Any) -> bool:
    return (
        isinstance(value, (tuple, list))
        and all(isinstance(name, str) and name for name in value)
        and len(set(value)) == len(value)
    )


def _key_or_off(raw: str) -> str | None:
    return None if raw.lower() in _OFF else raw


def _are_stats(value: Any) -> bool:
    return (
        isinstance(value, (tuple, list))
        and all(name in HISTOGRAM_STATS for name in value)
        and len(set(value)) == len(value)
    )


def _are_sides(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and k and side in ("input", "output") for k, side in value.items()
    )


def load_token_decoder(spec: str | None) -> TokenDecoder | None:
    """The callable named by a ``module:function`` spec; None for an empty/``none``/``off`` spec.

    Raises ``ValueError`` saying what is wrong with the spec.
    """
    if spec is None or spec.strip().lower() in _OFF:
        return None
    module_name, _, attribute = spec.strip().partition(":")
    if not module_name or not attribute:
        raise SpecError("expected 'module:function' or 'none'")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"cannot be imported: {exc}") from exc
    if not callable(target):
        raise SpecError("is not callable")
    return target  # type: ignore[no-any-return]


_TEXT = _Kind("expected a non-empty string", lambda v: isinstance(v, str) and bool(v), str)
_OPTIONAL_TEXT = _Kind(
    "expected a non-empty string or None",
    lambda v: v is None or (isinstance(v, str) and bool(v)),
    str,
)
_RESUME_KIND = _Kind("expected never, allow or must", lambda v: v is None or v in _RESUME, _choice)
_FSYNC_POLICY = _Kind(
    "expected request, cycle or never",
    lambda v: v in FSYNC_POLICIES,
    _fsync_policy,
)
_SECONDS = _Kind("expected a number >= 0", lambda v: _is_number(v) and v >= 0, float)
_OPTIONAL_SECONDS = _Kind(
    "expected a number >= 0, or None", lambda v: v is None or (_is_number(v) and v >= 0), float
)
_POSITIVE = _Kind("expected a number > 0", lambda v: _is_number(v) and v > 0, float)
_COUNT = _Kind("expected an integer >= 1", lambda v: _is_int(v) and v >= 1, int)
_CAP = _Kind(
    "expected an integer >= 0, or None", lambda v: v is None or (_is_int(v) and v >= 0), int
)
_INT = _Kind("expected an integer", _is_int, int)
_OPTIONAL_BOOL = _Kind(
    "expected a boolean (true/false), or None", lambda v: v is None or isinstance(v, bool), _flag
)
_BOOL = _Kind("expected a boolean (true/false)", lambda v: isinstance(v, bool), _flag)
_DECODER = _Kind(
    "expected a callable ids -> str ('module:function' or 'none' in the environment)",
    lambda v: v is None or callable(v),
    load_token_decoder,
)
_SIDES = _Kind("expected name=input|output pairs (a mapping in Python)", _are_sides, _sides)
_STATS = _Kind(
    f"expected a tuple of distinct names among {', '.join(HISTOGRAM_STATS)} "
    "(a comma list in the environment; none: no scalars)",
    _are_stats,
    _stat_names,
)
_NAMES = _Kind(
    "expected a tuple of distinct non-empty names (a comma list in the environment)",
    _are_names,
    _names,
)
_KEY_OR_OFF = _Kind(
    "expected a non-empty string, or None (none/off in the environment)",
    lambda v: v is None or (isinstance(v, str) and bool(v)),
    _key_or_off,
)
_MAPPING = _Kind("expected a mapping", lambda v: isinstance(v, Mapping), json.loads)


def _setting(default: Any, kind: _Kind, variable: str | None = None) -> Any:
    """A field with its default, its kind and the environment variable that sets it."""
    metadata = {"env": variable, "kind": kind}
    if isinstance(default, Mapping):
        frozen = dict(default)
        return field(default_factory=lambda: dict(frozen), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class TrackioSettings:
    """Every setting of otel-trackio. Immutable; ``dataclasses.replace`` gives a changed copy.

    Where the data goes (``trackio.init`` arguments when no run is given or active):
        project, name, group, server_url, space_id, resume; ``trackio_init`` holds any other
        ``trackio.init`` keyword (``config``, ``private``, ...).
    Traces:
        key: the Trackio key the Traces are logged under.
        outcome_attributes: the attribute names that are a sample's outcome (``reward``, a
            judge's ``correct``...): first in the Trace header, columns of the outcome table;
            the first one a finished sample has is written in its status pill (``reward 1``).
        outcome_table_key: the key of the per-step outcome table, a ``trackio.Table`` of one
            row per sample in the Media & Tables tab (None: no table).
        step_durations_key: the spans of a step around its samples (a step-level span's other
            children: ``generate``, ``update_actor``, a framework's phases) are logged as their
            durations in seconds at that step, one scalar ``<key>/<span name>`` each (spans of
            one name summed), a plot beside the loss; None: a Trace of their own instead.
        step_attribute, sample_attribute: span attribute names of the step and sample index.
        sample_ttl_seconds: a trace idle this long is logged as partial.
        sample_grace_seconds: how long a completed sample waits for spans and GenAI log events of
            it arriving after its root (None: 0 in process, where children always come first,
            2 s once a log exporter feeds the pipeline; in the OTLP receiver, until the run shows
            spans trailing their root — several processes, a Collector — a sample goes out once
            the requests begun before it completed are in, within 5 s; then 5 s).
        max_buffered_spans: past this many waiting spans (and log events waiting for their
            span) the oldest samples go out as partial.
        max_value_chars: longer strings are cut with a visible marker.
        max_span_attributes, max_span_events: the OTLP receiver keeps the first this many
            attributes of a span (also of an event, a log record, a resource) and events of a
            span, marking the cut (``otel_trackio.dropped_attributes`` / ``dropped_events``), as
            the OTel SDK's ``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`` does; in process the SDK's own
            limits apply.
        token_decoder: turns token id lists on spans into text (on the export thread).
        token_id_attributes: which span attributes hold token ids, and the side each fills.
        offload: the span exporter only turns spans into compact records and spools them; a
            writer process it starts converts them and logs them to Trackio. None (the
            default): the ``OTEL_EXPORTER_TRACKIO_OFFLOAD`` variable, else on — for
            ``configure()``, the zero-code setup and an exporter built by hand alike.
        writer_max_lag_seconds: with offload, how far behind (seconds since the oldest spooled
            entry not yet handed over) the writer may fall at the lowest CPU priority; past it,
            it takes a normal share until it is back within a quarter of that (Linux autogroup
            scheduling; elsewhere it warns).
        shutdown_timeout_seconds: with offload, the longest ``shutdown()`` waits for everything
            spooled to be in Trackio (None: as long as storing moves on). A writer that cannot
            keep up (starved, stuck, dead) hands over to one at the exiting process's priority.
        spool_dir: where spools live (default: ``otel-trackio-spool`` in the Trackio folder).
        spool_max_mb: the bound of one spool on disk; past it ``export()`` returns FAILURE (the
            receiver answers 503 with ``Retry-After``).
        spool_fsync: when the spool forces its bytes to the disk, and so what a power loss
            keeps: ``request`` (every append before it is acknowledged), ``cycle`` (the
            checkpoint and the entries it covers, each drain cycle) or ``never``.
    Metrics:
        log_distributions: also log histogram buckets as a ``trackio.Histogram``.
        histogram_stats: which statistics of a histogram become plots (``<name>/<stat>``).
        counter_totals: counters plot their running total instead of what was added at each
            step.
    Sampling (``configure()`` and the zero-code setup install a ``StepSampler``):
        max_samples_per_step: keep at most this many samples per step (None: all).
        sampling_seed: the sampler's seed; the same in every worker makes them agree.
    Reporting:
        summary: print what the run logged, and the command that opens it, at shutdown (and
            when a sampler starts leaving samples out).
    Process:
        gc_freeze: ``configure()``, and a span exporter built by hand, end their setup with
            ``gc.collect(); gc.freeze()``: every object alive then (imported modules:
            OpenTelemetry's, this package's, yours) leaves the garbage collector's view until
            the last ``shutdown()`` of them, so each full collection — which runs on whatever
            thread allocates, your event loop's included — walks only what the rollout creates
            afterwards, and its pauses shrink with it. The price: cyclic
            garbage among those objects waits for that ``shutdown()`` to be collected, which
            unfreezes them again unless something else froze objects first.
    """

    project: str | None = _setting(None, _OPTIONAL_TEXT, env.OTEL_EXPORTER_TRACKIO_PROJECT)
    name: str | None = _setting(None, _OPTIONAL_TEXT, env.OTEL_EXPORTER_TRACKIO_RUN)
    group: str | None = _setting(None, _OPTIONAL_TEXT, env.OTEL_EXPORTER_TRACKIO_GROUP)
    server_url: str | None = _setting(None, _OPTIONAL_TEXT, env.OTEL_EXPORTER_TRACKIO_SERVER_URL)
    space_id: str | None = _setting(None, _OPTIONAL_TEXT, env.OTEL_EXPORTER_TRACKIO_SPACE_ID)
    resume: str | None = _setting(None, _RESUME_KIND, env.OTEL_EXPORTER_TRACKIO_RESUME)
    trackio_init: Mapping[str, Any] = _setting({}, _MAPPING)

    key: str = _setting("rollout/traces", _TEXT, env.OTEL_EXPORTER_TRACKIO_KEY)
    outcome_attributes: tuple[str, ...] = _setting(
        ("reward",), _NAMES, env.OTEL_EXPORTER_TRACKIO_OUTCOME_ATTRIBUTES
    )
    outcome_table_key: str | None = _setting(
        "rollout/outcomes", _KEY_OR_OFF, env.OTEL_EXPORTER_TRACKIO_OUTCOME_TABLE_KEY
    )
    step_durations_key: str | None = _setting(
        "step_time", _KEY_OR_OFF, env.OTEL_EXPORTER_TRACKIO_STEP_DURATIONS_KEY
    )
    step_attribute: str = _setting("step", _TEXT, env.OTEL_EXPORTER_TRACKIO_STEP_ATTRIBUTE)
    sample_attribute: str = _setting(
        "sample_index", _TEXT, env.OTEL_EXPORTER_TRACKIO_SAMPLE_ATTRIBUTE
    )
    sample_ttl_seconds: float = _setting(
        300.0, _SECONDS, env.OTEL_EXPORTER_TRACKIO_SAMPLE_TTL_SECONDS
    )
    sample_grace_seconds: float | None = _setting(
        None, _OPTIONAL_SECONDS, env.OTEL_EXPORTER_TRACKIO_SAMPLE_GRACE_SECONDS
    )
    max_buffered_spans: int = _setting(
        100_000, _COUNT, env.OTEL_EXPORTER_TRACKIO_MAX_BUFFERED_SPANS
    )
    max_value_chars: int = _setting(64 * 1024, _COUNT, env.OTEL_EXPORTER_TRACKIO_MAX_VALUE_CHARS)
    max_span_attributes: int = _setting(1024, _COUNT, env.OTEL_EXPORTER_TRACKIO_MAX_SPAN_ATTRIBUTES)
    max_span_events: int = _setting(1024, _COUNT, env.OTEL_EXPORTER_TRACKIO_MAX_SPAN_EVENTS)
    token_decoder: TokenDecoder | None = _setting(
        None, _DECODER, env.OTEL_EXPORTER_TRACKIO_TOKEN_DECODER
    )
    token_id_attributes: Mapping[str, str] = _setting(
        DEFAULT_TOKEN_ID_ATTRIBUTES, _SIDES, env.OTEL_EXPORTER_TRACKIO_TOKEN_ID_ATTRIBUTES
    )

    offload: bool | None = _setting(None, _OPTIONAL_BOOL, env.OTEL_EXPORTER_TRACKIO_OFFLOAD)
    writer_max_lag_seconds: float = _setting(
        30.0, _SECONDS, env.OTEL_EXPORTER_TRACKIO_WRITER_MAX_LAG_SECONDS
    )
    shutdown_timeout_seconds: float | None = _setting(
        None, _OPTIONAL_SECONDS, env.OTEL_EXPORTER_TRACKIO_SHUTDOWN_TIMEOUT_SECONDS
    )
    spool_dir: str | None = _setting(None, _OPTIONAL_TEXT, env.OTEL_EXPORTER_TRACKIO_SPOOL_DIR)
    spool_max_mb: float = _setting(1024.0, _POSITIVE, env.OTEL_EXPORTER_TRACKIO_SPOOL_MAX_MB)
    spool_fsync: str = _setting("cycle", _FSYNC_POLICY, env.OTEL_EXPORTER_TRACKIO_SPOOL_FSYNC)

    log_distributions: bool = _setting(False, _BOOL, env.OTEL_EXPORTER_TRACKIO_LOG_DISTRIBUTIONS)
    histogram_stats: tuple[str, ...] = _setting(
        ("mean", "min", "max"), _STATS, env.OTEL_EXPORTER_TRACKIO_HISTOGRAM_STATS
    )
    counter_totals: bool = _setting(False, _BOOL, env.OTEL_EXPORTER_TRACKIO_COUNTER_TOTALS)

    max_samples_per_step: int | None = _setting(
        None, _CAP, env.OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP
    )
    sampling_seed: int = _setting(0, _INT, env.OTEL_EXPORTER_TRACKIO_SAMPLING_SEED)

    summary: bool = _setting(True, _BOOL, env.OTEL_EXPORTER_TRACKIO_SUMMARY)

    gc_freeze: bool = _setting(True, _BOOL, env.OTEL_EXPORTER_TRACKIO_GC_FREEZE)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind: _Kind = f.metadata["kind"]
            if not kind.check(value):
                raise TrackioConfigError(f"{f.name}={value!r}: {kind.expected}")
        # Own copies of the mappings, so the caller's dict cannot change a frozen setting.
        object.__setattr__(self, "trackio_init", dict(self.trackio_init))
        object.__setattr__(self, "token_id_attributes", dict(self.token_id_attributes))
        object.__setattr__(self, "histogram_stats", tuple(self.histogram_stats))
        object.__setattr__(self, "outcome_attributes", tuple(self.outcome_attributes))

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        on_bad: Callable[[TrackioConfigError], None] | None = None,
        **overrides: Any,
    ) -> TrackioSettings:
        """Settings from ``OTEL_EXPORTER_TRACKIO_*`` (``os.environ`` by default); keyword
        arguments win. A malformed variable raises :class:`TrackioConfigError` naming it, its
        value and what it takes; with ``on_bad``, it is handed there instead and its setting
        keeps its default (zero code: the rest of the run goes on)."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            variable = f.metadata.get("env")
            if variable is None or f.name in overrides:
                continue
            raw = environ.get(variable)
            if raw is None or not raw.strip():
                continue
            kind: _Kind = f.metadata["kind"]
            bad: TrackioConfigError | None = None
            try:
                value = kind.parse(raw.strip())
            except SpecError as exc:
                bad = TrackioConfigError(f"{variable}={raw!r}: {exc}")
            except ValueError:
                bad = TrackioConfigError(f"{variable}={raw!r}: {kind.expected}")
            else:
                if not kind.check(value):
                    bad = TrackioConfigError(f"{variable}={raw!r}: {kind.expected}")
            if bad is None:
                values[f.name] = value
            elif on_bad is None:
                raise bad
            else:
                on_bad(bad)
        _say_unknown_variables(environ)
        return split_options({**values, **overrides})

    def with_options(self, **options: Any) -> TrackioSettings:
        """A copy with ``options`` applied (setting names; anything else joins ``trackio_init``)."""
        return split_options(options, self)

    # -- derived ----------------------------------------------------------------------------

    @property
    def init_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``trackio.init`` besides ``project`` and ``name``."""
        out = {
            key: value
            for key in ("group", "server_url", "space_id", "resume")
            if (value := getattr(self, key)) is not None
        }
        out.update(self.trackio_init)
        return out


SETTING_NAMES: frozenset[str] = frozenset(f.name for f in fields(TrackioSettings))


_VARIABLE_PREFIX = "OTEL_EXPORTER_TRACKIO_"
_unknown_said: set[str] = set()


def _say_unknown_variables(environ: Mapping[str, str]) -> None:
    """Warn once per name about an ``OTEL_EXPORTER_TRACKIO_*`` variable no setting reads (a
    misspelt one would otherwise be ignored in silence), with the closest real name."""
    known = {f.metadata["env"] for f in fields(TrackioSettings) if f.metadata.get("env")}
    for name in environ:
        if not name.startswith(_VARIABLE_PREFIX) or name in known or name in _unknown_said:
            continue
        _unknown_said.add(name)
        suffixes = sorted(k.removeprefix(_VARIABLE_PREFIX) for k in known)
        close = difflib.get_close_matches(name.removeprefix(_VARIABLE_PREFIX), suffixes, n=1)
        logging.getLogger("otel_trackio").warning(
            "otel-trackio: %s is no otel-trackio setting and is ignored%s",
            name,
            f" (did you mean {_VARIABLE_PREFIX}{close[0]}?)" if close else "",
        )


def split_options(
    options: Mapping[str, Any], base: TrackioSettings | None = None
) -> TrackioSettings:
    """Settings from keyword arguments: setting names set that setting (``None`` keeps the base
    value for ``project``/``name`` only when absent), anything else is a ``trackio.init``
    keyword collected into ``trackio_init``."""
    base = base or TrackioSettings()
    known = {k: v for k, v in options.items() if k in SETTING_NAMES and k != "trackio_init"}
    extra = {k: v for k, v in options.items() if k not in SETTING_NAMES}
    for key in extra:
        _check_init_keyword(key)
    init = {**base.trackio_init, **dict(options.get("trackio_init") or {}), **extra}
    return dataclasses.replace(base, **known, trackio_init=init)


#: ``trackio.init``'s keywords (Trackio 0.43), so a keyword is checked without importing Trackio
#: (a process that offloads never does); another is looked up in the installed Trackio.
TRACKIO_INIT_KEYWORDS = frozenset(
    {
        "project",
        "name",
        "group",
        "space_id",
        "server_url",
        "dataset_id",
        "bucket_id",
        "config",
        "resume",
        "settings",
        "private",
        "embed",
        "auto_log_gpu",
        "gpu_log_interval",
        "auto_log_cpu",
        "cpu_log_interval",
        "webhook_url",
        "webhook_min_level",
    }
)


def _check_init_keyword(key: str) -> None:
    """A keyword that is no setting must be one of ``trackio.init``'s: else a
    :class:`TrackioConfigError` here, in the calling process, naming the nearest setting or
    keyword (a misspelt setting would otherwise fail later, in the writer process)."""
    if key in TRACKIO_INIT_KEYWORDS:
        return
    from otel_trackio._trackio.installed import init_accepts

    if init_accepts(key):
        return
    import difflib

    close = difflib.get_close_matches(key, sorted(SETTING_NAMES | TRACKIO_INIT_KEYWORDS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise TrackioConfigError(
        f"{key!r} is neither an otel-trackio setting nor a trackio.init keyword{hint}"
    )


def settings_for(
    project: str | None,
    name: str | None,
    settings: TrackioSettings | None,
    options: Mapping[str, Any],
) -> TrackioSettings:
    """What an exporter or ``configure()`` was asked for: ``settings``, then ``options`` by name
    (see :func:`split_options`), then ``project``/``name`` when given. Without ``settings``,
    every ``OTEL_EXPORTER_TRACKIO_*`` variable is the default of the setting it names, as every
    OTel exporter reads its own variables; an argument wins (and a malformed variable it
    replaces is not read). A malformed variable raises :class:`TrackioConfigError` naming it."""
    if settings is None:
        given = dict(options)
        if project is not None:
            given["project"] = project
        if name is not None:
            given["name"] = name
        return TrackioSettings.from_env(None, **given)
    chosen = split_options(options, settings)
    if project is not None:
        chosen = dataclasses.replace(chosen, project=project)
    if name is not None:
        chosen = dataclasses.replace(chosen, name=name)
    return chosen


# -- the process's active settings (for code that has no exporter at hand) ----------------------

_active: TrackioSettings | None = None
_from_environment: TrackioSettings | None = None


def activate(settings: TrackioSettings) -> None:
    """Make ``settings`` the process's active ones: ``rollout()``, ``OpenSampleTracker()`` and a
    ``StepSampler`` built without attribute names use their ``step_attribute`` /
    ``sample_attribute``. ``configure()`` calls it (the latest one wins)."""
    global _active
    _active = settings


def activate_first(settings: TrackioSettings) -> None:
    """:func:`activate` ``settings`` unless some are active already: a hand-built
    ``TrackioSpanExporter`` names the process's attributes when it is the first, and a later
    one (another run's) never changes what ``rollout()`` and ``OpenSampleTracker()`` read."""
    global _active
    if _active is None:
        _active = settings


def active_settings() -> TrackioSettings:
    """The settings of the latest exporter or ``configure()`` in this process; before any, the
    ``OTEL_EXPORTER_TRACKIO_*`` environment (defaults where it is malformed)."""
    global _from_environment
    if _active is not None:
        return _active
    if _from_environment is None:
        try:
            _from_environment = TrackioSettings.from_env()
        except TrackioConfigError:
            _from_environment = TrackioSettings()
    return _from_environment
