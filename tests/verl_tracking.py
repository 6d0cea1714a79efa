"""verl's own ``Tracking`` beside its rollout trace, in one process (run by
tests/frameworks/test_verl.py).

    python tests/verl_tracking.py ORDER PROJECT EXPERIMENT

Runs in the real verl environment (``.venv/verl-env``: verl 0.9.1 on CPU torch). ``import verl``
loads otel-trackio through verl's own plugin entry points; nothing here names otel-trackio. The
trainer's side opens ``Tracking(default_backend=["console", "trackio"])`` with
``trace.backend=otel`` in its config, logs ``reward/mean`` per step and ``val/generations``
through verl's ``ValidationGenerationsLogger``; the worker's side calls
``RolloutTraceConfig.init`` and runs 3 samples per step under ``rollout_trace_attr``, each with a
traced generate call. ORDER ``tracking-first`` opens ``Tracking`` before the first sample (verl's
trainer does), ``samples-first`` after the first step's samples.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import verl  # noqa: F401 - loads the plugins, as verl's trainer and workers do
from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_attr, rollout_trace_op
from verl.utils.tracking import Tracking, ValidationGenerationsLogger

STEPS = (1, 2)
SAMPLES = 3
CONFIG: dict[str, Any] = {
    "actor_rollout_ref": {"rollout": {"trace": {"backend": "otel"}}},
    "trainer": {"logger": ["console", "trackio"]},
}


class Policy:
    @rollout_trace_op
    async def generate(self, prompt_ids: list[int]) -> dict[str, Any]:
        return {"token_ids": [7, 8]}


async def rollouts(step: int) -> None:
    policy = Policy()
    for index in range(SAMPLES):
        with rollout_trace_attr(sample_index=index, step=step, rollout_n=0):
            await policy.generate([1, 2, 3])


def main(order: str, project: str, experiment: str) -> None:
    RolloutTraceConfig.init(project, experiment, "otel")
    loggers = CONFIG["trainer"]["logger"]
    tracking = None
    if order == "tracking-first":
        tracking = Tracking(project, experiment, default_backend=loggers, config=CONFIG)
    for step in STEPS:
        asyncio.run(rollouts(step))
        if tracking is None:
            tracking = Tracking(project, experiment, default_backend=loggers, config=CONFIG)
        tracking.log({"reward/mean": 0.5 * step}, step=step)
    ValidationGenerationsLogger(project, experiment).log(
        loggers, [("what is 2+2?", "4", 1.0)], STEPS[-1]
    )
    tracking.finish()


if __name__ == "__main__":
    main(*sys.argv[1:4])
