"""RL frameworks that already trace their rollouts with OpenTelemetry, in their own words.

- **xtuner** (``xtuner/v1/rl/trace/``): every span of a sample carries ``xtuner.rollout_id`` (one
  per sample) and ``xtuner.producer_future_step`` (the training step); ``xtuner.group_id`` (the
  prompt), ``reward.score`` / ``reward.pass``, ``prompt.tokens`` / ``completion.tokens``.
- **ROLL** (``roll/utils/telemetry.py``): ``pipeline_step`` spans carry ``global_step``; under
  them, an agentic ``trajectory`` span per sample (``traj_id``, ``traj_group_id``), or a
  ``rollout.generate`` span per request (``request_id``, ``prompt_id``).
- **The proposed ``rl.*`` conventions** (semantic-conventions-genai #88, a proposal, not merged):
  ``rl.loop.iteration`` (the step), ``rl.sample.id``, ``rl.reward.score``.

:func:`sample_tags` says what such a span means in otel-trackio's terms — its sample, its step,
its reward, group and token counts — so that it assembles as a span of ``rollout(step, i)`` does.
A step on a span that is no sample (ROLL's ``pipeline_step``) is the step of the samples under it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STEP = "step"
SAMPLE = "sample_index"
"""The keys of :func:`sample_tags` for the step and the sample (the caller names them as its
settings say)."""

_MARKERS = frozenset(
    {
        "xtuner.rollout_id",
        "xtuner.producer_future_step",
        "traj_id",
        "global_step",
        "request_id",
        "rl.loop.iteration",
        "rl.sample.id",
        "rl.reward.score",
    }
)


def sample_tags(
    name: str, attributes: Mapping[str, Any], *, top: bool = True
) -> dict[str, Any] | None:
    """The attributes a span of xtuner, ROLL or the ``rl.*`` proposal adds to read as
    otel-trackio's own (:data:`STEP`, :data:`SAMPLE`, ``reward``, ``group``, GenAI token counts),
    or None for any other span. The caller adds those the span does not have already. ``top``:
    the span starts its trace here (no parent, or a parent in another process): xtuner tags
    every span of a sample, and only the top one is the sample's root (the others keep the
    step)."""
    if _MARKERS.isdisjoint(attributes):
        return None
    tags: dict[str, Any] = {}
    if "xtuner.rollout_id" in attributes or "xtuner.producer_future_step" in attributes:
        if top:
            _put(tags, SAMPLE, attributes.get("xtuner.rollout_id"))
        _put(tags, STEP, attributes.get("xtuner.producer_future_step"))
        _put(tags, "group", attributes.get("xtuner.group_id"))
        _put(tags, "reward", attributes.get("reward.score"))
        _put(tags, "gen_ai.usage.input_tokens", attributes.get("prompt.tokens"))
        _put(tags, "gen_ai.usage.output_tokens", attributes.get("completion.tokens"))
    if name == "pipeline_step" or name == "get_batch":
        _put(tags, STEP, attributes.get("global_step"))
    elif name == "trajectory" and "traj_id" in attributes:
        _put(tags, SAMPLE, attributes.get("traj_id"))
        _put(tags, "group", attributes.get("traj_group_id"))
    elif name == "rollout.generate" and "request_id" in attributes:
        _put(tags, SAMPLE, attributes.get("request_id"))
        _put(tags, "group", attributes.get("prompt_id"))
    _put(tags, STEP, attributes.get("rl.loop.iteration"))
    _put(tags, SAMPLE, attributes.get("rl.sample.id"))
    _put(tags, "reward", attributes.get("rl.reward.score"))
    return tags or None


def _put(tags: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and key not in tags:
        tags[key] = value
