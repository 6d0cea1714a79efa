"""A sample's identity, made in one place: its tags and its step (with the latest-step memory)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_trackio._core.records import SpanRecord
from otel_trackio._core.samples import PartialReason, SampleIdentity, StepMemory, resolve_step
from otel_trackio._core.values import parse_step

# Tags read into a sample's identity besides the configurable step and sample attributes.
ROLLOUT_N_ATTRIBUTE = "rollout_n"
VALIDATE_ATTRIBUTE = "validate"
ENDED_EARLY_ATTRIBUTE = "otel_trackio.ended_early"
"""On a sample's root ended by its producer before the sample was (``ttl``: idle too long;
``flush``: the producer stopping): the sample is partial, for that reason."""
_EARLY_REASONS: frozenset[PartialReason] = frozenset({"ttl", "flush"})


class Identifier:
    """Makes sample identities from the configured step and sample attribute names; reads the
    latest step from ``steps`` (for a sample without one) and notes the steps it sees there."""

    def __init__(self, step_attribute: str, sample_attribute: str, steps: StepMemory) -> None:
        self.step_attribute = step_attribute
        self.sample_attribute = sample_attribute
        self.steps = steps

    def identify(
        self,
        spans: list[SpanRecord],
        root: SpanRecord | None,
        *,
        ancestor_step: Any = None,
        known: Mapping[str, Any] | None = None,
        reason: PartialReason | None = None,
    ) -> SampleIdentity:
        """The one place a sample's identity is made: its tags from what is ``known`` of an open
        root, else from its root, else from any of its spans; the step by :func:`resolve_step`."""
        sources: list[Mapping[str, Any]] = []
        if known:
            sources.append(known)
        if root is not None:
            sources.append(root.attributes)
        sources.extend(span.attributes for span in spans)

        def tag(name: str) -> Any:
            for attributes in sources:
                if name in attributes:
                    return attributes[name]
            return None

        ended_early = root.attributes.get(ENDED_EARLY_ATTRIBUTE) if root is not None else None
        if reason is None and ended_early in _EARLY_REASONS:
            reason = ended_early
        own_step = tag(self.step_attribute)
        step = resolve_step(own_step, ancestor_step, self.steps.latest())
        usable = parse_step(own_step) is not None
        found = usable or parse_step(ancestor_step) is not None
        if found:
            self.steps.note(step)
        return SampleIdentity(
            trace_id=spans[0].trace_id if spans else 0,
            root_span_id=root.span_id if root is not None else None,
            step=step,
            sample_index=tag(self.sample_attribute),
            rollout_n=tag(ROLLOUT_N_ATTRIBUTE),
            validate=tag(VALIDATE_ATTRIBUTE),
            partial_reason=reason,
            unusable_step=None if usable or own_step is None else own_step,
            stepless=not found and own_step is None,
        )
