"""StepSampler: exact per-step caps, whole samples kept or dropped, same choice in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased

from otel_trackio import StepSampler, rollout, traced
from otel_trackio.sampling import sample_hash

REPO = Path(__file__).resolve().parents[2]


@traced()
def child(i):
    return i


def _run_samples(sampler, steps, indices, repeats, *, under_step_span=False):
    memory = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for step in steps:
        if under_step_span:
            scope = tracer.start_as_current_span("train_step", attributes={"step": step})
        else:
            scope = None
        if scope is not None:
            scope.__enter__()
        for n in range(repeats):
            for index in indices:
                with rollout(step, index, rollout_n=n, tracer_provider=provider):
                    child(index)
        if scope is not None:
            scope.__exit__(None, None, None)
    return memory.get_finished_spans()


def _kept(spans):
    """step -> sample_index -> set of rollout_n kept."""
    kept = defaultdict(lambda: defaultdict(set))
    for span in spans:
        if span.name == "rollout":
            attrs = span.attributes
            kept[attrs["step"]][attrs["sample_index"]].add(attrs["rollout_n"])
    return kept


@pytest.mark.parametrize("deterministic", [True, False])
def test_at_most_n_unique_samples_per_step_all_repeats_and_children_follow(deterministic):
    sampler = StepSampler(5, seed=3, deterministic=deterministic)
    spans = _run_samples(sampler, range(6), range(40), 3)
    kept = _kept(spans)
    assert set(kept) <= set(range(6))
    assert len(kept[0]) == 5  # the first step (nothing learned yet) fills the cap exactly
    for step in range(6):
        assert len(kept[step]) <= 5
        assert sampler.kept_count(step) == len(kept[step])
        for repeats in kept[step].values():
            assert repeats == {0, 1, 2}  # every rollout_n repeat of a kept prompt
    assert sum(len(v) for v in kept.values()) >= 6  # later steps keep some too
    # Children exist exactly for kept roots, and nothing else was recorded.
    roots = {s.context.span_id for s in spans if s.name == "rollout"}
    children = [s for s in spans if s.name != "rollout"]
    assert len(children) == len(roots)
    assert all(c.parent.span_id in roots for c in children)


def test_counts_are_exact_with_a_known_population():
    sampler = StepSampler(8, samples_per_step=64, seed=1)
    spans = _run_samples(sampler, range(20), range(64), 2)
    kept = _kept(spans)
    for step in range(20):
        assert len(kept[step]) <= 8
        expected = {i for i in range(64) if sample_hash(1, step, i) < 8 / 64}
        # Kept = the hash-chosen ones, cut at 8 (first come) when more than 8 passed.
        assert set(kept[step]) <= expected
        assert len(kept[step]) == min(8, len(expected))


def test_samples_under_a_step_span_are_capped_by_the_sampler_alone():
    spans = _run_samples(StepSampler(3), range(2), range(10), 1, under_step_span=True)
    kept = _kept(spans)
    assert [len(kept[s]) for s in range(2)] == [3, 3]
    assert sum(1 for s in spans if s.name == "train_step") == 2
    # Inside ParentBased the root sampler never sees them: all kept (documented).
    spans = _run_samples(ParentBased(StepSampler(3)), range(2), range(10), 1, under_step_span=True)
    assert [len(_kept(spans)[s]) for s in range(2)] == [10, 10]


def test_zero_keeps_nothing_and_spans_outside_samples_are_kept():
    sampler = StepSampler(0)
    spans = _run_samples(sampler, range(2), range(5), 1, under_step_span=True)
    assert sorted(s.name for s in spans) == ["train_step", "train_step"]
    with pytest.raises(ValueError):
        StepSampler(-1)
    assert "StepSampler" in sampler.get_description()


def test_order_does_not_matter_when_the_hash_picks_fewer_than_the_cap():
    # A seed where exactly 6 of 100 indices pass a 10/100 threshold at step 0: the cap never cuts.
    seed = next(s for s in range(1000) if sum(sample_hash(s, 0, i) < 0.1 for i in range(100)) == 6)
    forward = StepSampler(10, seed=seed, samples_per_step=100)
    backward = StepSampler(10, seed=seed, samples_per_step=100)
    a = {i for i in range(100) if forward.keep(0, i)}
    b = {i for i in reversed(range(100)) if backward.keep(0, i)}
    assert a == b
    assert len(a) == 6


_CHILD = textwrap.dedent(
    """
    import json, random, sys
    from otel_trackio import StepSampler
    seed, order_seed = int(sys.argv[1]), int(sys.argv[2])
    out = {}
    for deterministic in (True, False):
        sampler = StepSampler(7, seed=seed, deterministic=deterministic)
        kept = {}
        for step in range(5):
            indices = list(range(50))
            if deterministic:
                random.Random(order_seed + step).shuffle(indices)
            for n in range(2):
                for i in indices:
                    if sampler.keep(step, i):
                        kept.setdefault(str(step), set()).add(i)
        out[str(deterministic)] = {k: sorted(v) for k, v in kept.items()}
    print(json.dumps(out))
    """
)


def _child(seed: int, order_seed: int, hash_seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(seed), str(order_seed)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    return json.loads(result.stdout)


def test_two_processes_with_the_same_seed_agree():
    first = _child(42, 0, "1")
    second = _child(42, 0, "2")  # different str hashing: the choice must not depend on it
    assert first == second
    for mode in first.values():
        assert all(len(v) <= 7 for v in mode.values())
        assert len(mode["0"]) == 7
    other = _child(43, 0, "1")
    assert other["True"] != first["True"]  # the seed matters
