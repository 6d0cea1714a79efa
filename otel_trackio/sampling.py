"""``StepSampler``: keep at most N rollout samples per training step in this process.

Use it as the tracer provider's sampler **on its own** (not inside ``ParentBased``)::

    provider = TracerProvider(sampler=StepSampler(8))

It decides itself for every span that carries ``sample_index`` (a sample root, wherever it sits:
a trace root or a child of your step-level span) and lets every other span follow its parent
(a span with no parent is kept). Wrapped in ``ParentBased(root=StepSampler(...))`` it would only
see trace roots, so samples started under a step span would all be kept; that combination still
works for samples that are their own trace (what :func:`otel_trackio.rollout` does by default).

What counts: *unique* ``sample_index`` values per ``step``. All spans carrying the same
``(step, sample_index)`` get the same decision, so every ``rollout_n`` repeat of a kept prompt is
kept (verl's ``max_samples_per_step_per_worker`` counts the same way). Never more than N unique
indices are kept per step in one process.

Which ones (``deterministic=True``): each ``(step, sample_index)`` gets a seeded hash ``u`` in
``[0, 1)``; it is kept when ``u < rate`` and the step still has room. ``rate`` is
``N / samples_per_step`` when you say how many unique indices a step has in this process;
otherwise it is learned: ``N /`` the largest number of unique indices seen in an earlier step
(the first step keeps the first N it sees). So processes with the same seed and the same
``samples_per_step`` agree on every index whatever order they see them in, as long as fewer
than N pass the hash (the cap only cuts the rare excess, first come first kept).
``deterministic=False`` replaces the hash with a ``random.Random(seed)`` draw.

A dropped sample costs one hash and a dict lookup at its root; its descendants are dropped by
the SDK without a call into Python code of ours beyond a flag check, and nothing is recorded.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, get_current_span
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from otel_trackio._engine import steps as _steps
from otel_trackio._engine.report import say
from otel_trackio._settings import TrackioConfigError, TrackioSettings, active_settings

_KEPT = Decision.RECORD_AND_SAMPLE
_DROPPED = SamplingResult(Decision.DROP)
_MAX_U = float(2**64)


class _StepState:
    """Decisions made for one step."""

    __slots__ = ("decided", "kept", "rate")

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.kept = 0
        self.decided: dict[str, bool] = {}


class StepSampler(Sampler):
    """An OTel ``Sampler`` keeping at most ``max_samples_per_step`` samples per step.

    Args:
        max_samples_per_step: unique ``sample_index`` values kept per step in this process
            (``0`` drops every sample).
        seed: seeds the hash (or the random draw); same seed, same choice in every process.
        deterministic: pick by a seeded hash of ``(step, sample_index)`` (default) rather than
            by a seeded random draw.
        samples_per_step: how many unique sample indices one step has in this process, if you
            know it; sets the hash threshold to ``N / samples_per_step``.
        step_attribute, sample_attribute: attribute names read at span start (default: those
            of the process's active settings, see :func:`otel_trackio._settings.active_settings`).
        remembered_steps: decisions are kept for this many recent steps (memory bound).
        announce: say once, when it first leaves a sample out, that it does (stderr).
    """

    def __init__(
        self,
        max_samples_per_step: int,
        *,
        seed: int = 0,
        deterministic: bool = True,
        samples_per_step: int | None = None,
        step_attribute: str | None = None,
        sample_attribute: str | None = None,
        remembered_steps: int = 64,
        announce: bool = True,
    ) -> None:
        if max_samples_per_step < 0:
            raise ValueError("max_samples_per_step must be >= 0")
        if samples_per_step is not None and samples_per_step <= 0:
            raise ValueError("samples_per_step must be > 0")
        self.max_samples_per_step = int(max_samples_per_step)
        self.seed = int(seed)
        self.deterministic = deterministic
        self.samples_per_step = samples_per_step
        self._step_attribute = step_attribute
        self._sample_attribute = sample_attribute
        self._remembered = max(1, remembered_steps)
        self._lock = threading.Lock()
        self._steps: OrderedDict[str, _StepState] = OrderedDict()
        self._largest_population = 0
        self._random = random.Random(seed)
        self._salt = str(self.seed).encode()
        self._announce = announce
        self.kept_samples = 0
        """Unique samples kept so far (every step)."""
        self.dropped_samples = 0
        """Unique samples left out so far (every step): not traced at all."""

    @property
    def step_attribute(self) -> str:
        """The attribute holding a sample's step."""
        return self._step_attribute or active_settings().step_attribute

    @property
    def sample_attribute(self) -> str:
        """The attribute marking a sample root (its value is the sample index)."""
        return self._sample_attribute or active_settings().sample_attribute

    # -- OTel Sampler -------------------------------------------------------------------------

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        """Decide a sample root by its ``(step, sample_index)``; other spans follow the parent."""
        parent = get_current_span(parent_context).get_span_context()
        if parent.is_valid and not parent.trace_flags.sampled:
            return _DROPPED  # inside a dropped sample (or a dropped step): the subtree goes
        if attributes:
            sample_attribute = self.sample_attribute
            if sample_attribute in attributes:
                step = attributes.get(self.step_attribute)
                if not self.keep(step, attributes[sample_attribute]):
                    return _DROPPED
        return SamplingResult(
            _KEPT, attributes, parent.trace_state if parent.is_valid else trace_state
        )

    def get_description(self) -> str:
        """Shown by the SDK's debugging output."""
        mode = "hash" if self.deterministic else "random"
        return f"StepSampler{{max={self.max_samples_per_step},seed={self.seed},{mode}}}"

    # -- the decision -------------------------------------------------------------------------

    def keep(self, step: Any, sample_index: Any) -> bool:
        """Whether the sample ``(step, sample_index)`` is kept; the same answer every time asked.

        A missing step counts as the latest step known in this process (else ``None``).
        """
        if step is None:
            step = _steps.latest_step()
        step_key = str(step)
        index_key = str(sample_index)
        with self._lock:
            state = self._steps.get(step_key)
            if state is None:
                state = self._new_step(step_key)
            decided = state.decided.get(index_key)
            if decided is not None:
                return decided
            if state.kept >= self.max_samples_per_step:
                keep = False
            elif self.deterministic:
                keep = state.rate >= 1.0 or self._hash(step_key, index_key) < state.rate
            else:
                keep = state.rate >= 1.0 or self._random.random() < state.rate
            if keep:
                state.kept += 1
                self.kept_samples += 1
            else:
                self.dropped_samples += 1
            first_drop = not keep and self.dropped_samples == 1
            state.decided[index_key] = keep
            if len(state.decided) > self._largest_population:
                self._largest_population = len(state.decided)
        if first_drop and self._announce:
            say(
                f"otel-trackio: max_samples_per_step={self.max_samples_per_step}: keeping at "
                f"most {self.max_samples_per_step} samples per step in this process; the others "
                f"are not traced (sample {sample_index} of step {step} is the first left out; "
                "the summary at the end counts them)"
            )
        return keep

    def kept_count(self, step: Any) -> int:
        """How many unique samples of ``step`` this sampler kept (0 for an unknown step)."""
        with self._lock:
            state = self._steps.get(str(step))
            return state.kept if state is not None else 0

    def _new_step(self, step_key: str) -> _StepState:
        population = self.samples_per_step or self._largest_population
        if population <= 0 or self.max_samples_per_step >= population:
            rate = 1.0
        else:
            rate = self.max_samples_per_step / population
        state = self._steps[step_key] = _StepState(rate)
        while len(self._steps) > self._remembered:
            self._steps.popitem(last=False)
        return state

    def _hash(self, step_key: str, index_key: str) -> float:
        digest = hashlib.blake2b(
            f"{step_key}\x00{index_key}".encode(), digest_size=8, key=self._salt[:64]
        ).digest()
        return int.from_bytes(digest, "big") / _MAX_U


def sample_hash(seed: int, step: Any, sample_index: Any) -> float:
    """The ``[0, 1)`` value ``StepSampler(seed=seed)`` gives ``(step, sample_index)``.

    Lets other processes (or a report) tell which samples a deterministic sampler prefers.
    """
    return StepSampler(1, seed=seed)._hash(str(step), str(sample_index))


def step_sampler(settings: TrackioSettings) -> Sampler:
    """The ``StepSampler`` ``settings`` ask for (``max_samples_per_step``, ``sampling_seed``,
    attribute names), or ``DEFAULT_ON`` when they keep every sample. It decides for spans
    carrying the sample attribute (wherever they sit, also under a step-level span) and lets
    every other span follow its parent."""
    if settings.max_samples_per_step is None:
        return DEFAULT_ON
    return StepSampler(
        settings.max_samples_per_step,
        seed=settings.sampling_seed,
        deterministic=True,
        step_attribute=settings.step_attribute,
        sample_attribute=settings.sample_attribute,
        announce=settings.summary,
    )


def step_sampler_factory(arg: str | None = None) -> Sampler:
    """The ``trackio_step`` sampler entry point (``OTEL_TRACES_SAMPLER=trackio_step``).

    The cap comes from ``OTEL_TRACES_SAMPLER_ARG``, else
    ``OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP``; with neither, every sample is kept.
    """
    overrides: dict[str, Any] = {}
    if arg is not None and str(arg).strip():
        try:
            overrides["max_samples_per_step"] = int(str(arg).strip())
        except ValueError as exc:
            raise TrackioConfigError(
                f"OTEL_TRACES_SAMPLER_ARG={arg!r}: the trackio_step sampler needs an integer cap"
            ) from exc
    return step_sampler(TrackioSettings.from_env(**overrides))


__all__ = ["StepSampler", "sample_hash", "step_sampler", "step_sampler_factory"]
