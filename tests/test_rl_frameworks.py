"""RL frameworks that already trace with OpenTelemetry, with no settings: spans shaped as xtuner
and ROLL make them (``../shared/field-notes.md``: their names and attributes, read from their
tracing modules) and as the proposed ``rl.*`` conventions name them, sent as the frameworks send
them — xtuner over OTLP/gRPC with the official exporter into ``otel-trackio serve``, ROLL through
its Collector's ``file`` output and ``otel-trackio ingest`` — counted in Trackio storage.
"""

from __future__ import annotations

from collections import Counter

from conftest import read_logs, read_traces
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_ingest import collector_line, ingest

from otel_trackio._core.convert import NO_TEXT_NOTE


def _xtuner_rollout(provider: TracerProvider, step: int, rollout_id: int) -> None:
    """One xtuner sample: its agent loop, the controller's and a worker's generate, the judger;
    every span tagged as xtuner tags them, the counts and the reward set at the end."""
    tracer = provider.get_tracer("xtuner.rl.trace")
    tags = {
        "xtuner.rollout_id": rollout_id,
        "xtuner.group_id": rollout_id // 2,
        "xtuner.session_id": f"s-{rollout_id}",
        "xtuner.task_name": "gsm8k",
        "xtuner.producer_future_step": step,
        "xtuner.stage": "rollout",
    }
    with tracer.start_as_current_span("single_turn_agent_loop.run", attributes=tags) as loop:
        with tracer.start_as_current_span("rollout.controller.generate", attributes=tags):
            with tracer.start_as_current_span("rollout.worker.generate", attributes=tags) as gen:
                gen.set_attribute("prompt.tokens", 40 + rollout_id)
                gen.set_attribute("completion.tokens", 7)
                gen.set_attribute("finish_reason", "stop")
        with tracer.start_as_current_span("judger.run", attributes=tags) as judge:
            judge.set_attribute("reward.score", float(rollout_id % 2))
            judge.set_attribute("reward.pass", rollout_id % 2 == 1)
        loop.set_attribute("xtuner.status", "completed")
        loop.set_attribute("reward.score", float(rollout_id % 2))


def test_xtuner_over_grpc_is_a_sample_per_rollout_at_its_step(project, start_receiver):
    receiver = start_receiver()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "xtuner-rollout", "run.id": "exp-1"})
    )
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True))
    )
    for step in (3, 4):
        for rollout_id in range(4):
            _xtuner_rollout(provider, step, 10 * step + rollout_id)
    provider.shutdown()
    receiver.stop()

    traces = read_traces(project, "r")
    assert Counter((t["step"], t["metadata"]["sample_index"]) for t in traces) == Counter(
        {(s, 10 * s + r): 1 for s in (3, 4) for r in range(4)}
    )
    for t in traces:
        meta, rollout_id = t["metadata"], t["metadata"]["sample_index"]
        assert meta["reward"] == float(rollout_id % 2)
        assert meta["status"] == f"reward {rollout_id % 2}"
        assert meta["group"] == rollout_id // 2
        assert meta["reward.pass"] is (rollout_id % 2 == 1)
        # xtuner records no text: said in the header rather than an empty conversation.
        assert t["messages"] == [] and meta["text"] == NO_TEXT_NOTE
        assert sorted(s["name"] for s in t["spans"]) == [
            "judger.run",
            "rollout.controller.generate",
            "rollout.worker.generate",
            "single_turn_agent_loop.run",
        ]
        usage = next(s for s in t["spans"] if s["name"] == "rollout.worker.generate")["usage"]
        assert usage["input_tokens"] == 40 + rollout_id and usage["output_tokens"] == 7


def _roll_step(provider: TracerProvider, step: int) -> None:
    """One ROLL pipeline step: its batch with four agentic trajectories (each an env's
    generate/step turns), then the phase spans of training."""
    tracer = provider.get_tracer("roll")
    with tracer.start_as_current_span("pipeline_step", attributes={"global_step": step}):
        with tracer.start_as_current_span(
            "get_batch", attributes={"global_step": step, "batch_size": 4}
        ):
            for traj in range(4):
                trajectory = {
                    "traj_id": f"t{step}-{traj}",
                    "traj_group_id": f"g{step}-{traj // 2}",
                    "env_id": traj,
                    "group_id": traj // 2,
                    "episode_id": step,
                }
                with tracer.start_as_current_span("trajectory", attributes=trajectory):
                    for _turn in range(2):
                        with tracer.start_as_current_span("generate"):
                            pass
                        with tracer.start_as_current_span("step"):
                            pass
        for phase in ("compute_advantage", "old_log_probs_and_values", "train", "model_update"):
            with tracer.start_as_current_span(phase):
                pass


def test_roll_from_its_collector_files_is_a_sample_per_trajectory_at_the_pipeline_step(
    project, trackio_dir, tmp_path
):
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "roll"}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    for step in (0, 1):
        _roll_step(provider, step)
    finished = list(spans.get_finished_spans())
    lines = [collector_line(encode_spans(finished[i : i + 7])) for i in range(0, len(finished), 7)]
    (tmp_path / "traces.jsonl").write_text("\n".join(lines) + "\n")
    result = ingest(project, trackio_dir, tmp_path / "traces.jsonl")
    assert result.returncode == 0, result.stderr + result.stdout

    traces = read_traces(project, "collected")
    trajectories = [t for t in traces if t["metadata"].get("sample_index") is not None]
    assert Counter((t["step"], t["metadata"]["sample_index"]) for t in trajectories) == Counter(
        {(s, f"t{s}-{j}"): 1 for s in (0, 1) for j in range(4)}
    )
    for t in trajectories:
        names = Counter(s["name"] for s in t["spans"])
        assert names == {"trajectory": 1, "generate": 2, "step": 2}, names
        assert t["metadata"]["text"] == NO_TEXT_NOTE
        assert (
            t["metadata"]["group"] == f"g{t['step']}-{int(t['metadata']['sample_index'][-1]) // 2}"
        )
    # The pipeline step's own spans are its phases' durations at that step, not a Trace.
    assert len(traces) == len(trajectories)
    phases = ("pipeline_step", "get_batch", "compute_advantage", "train", "model_update")
    rows = [row for row in read_logs(project, "collected") if "step_time/train" in row]
    assert sorted(row["step"] for row in rows) == [0, 1]
    for row in rows:
        assert all(isinstance(row[f"step_time/{phase}"], float) for phase in phases), row
        assert row["step_time/pipeline_step"] >= row["step_time/get_batch"]


def test_the_proposed_rl_conventions_name_the_step_sample_and_reward(project, start_receiver):
    receiver = start_receiver()
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True))
    )
    tracer = provider.get_tracer("nemo-rl")
    for index in range(3):
        attributes = {"rl.loop.iteration": 7, "rl.sample.id": f"p-{index}"}
        with tracer.start_as_current_span("rl.sample", attributes=attributes) as sample:
            sample.set_attribute("rl.reward.score", 0.5 * index)
    provider.shutdown()
    receiver.stop()
    traces = read_traces(project, "r")
    assert sorted((t["step"], t["metadata"]["sample_index"]) for t in traces) == [
        (7, "p-0"),
        (7, "p-1"),
        (7, "p-2"),
    ]
    assert sorted(t["metadata"]["reward"] for t in traces) == [0.0, 0.5, 1.0]


def test_a_steps_own_spans_are_durations_at_that_step_or_a_trace(project):
    """A user's step-level span around its samples, with phases of its own (``update_actor``):
    the samples are Traces, the step's own spans scalars ``step_time/<name>`` at that step;
    with ``step_durations_key=None``, a Trace of their own instead."""
    from opentelemetry import trace

    import otel_trackio

    for run, key in (("timed", "step_time"), ("traced", None)):
        handle = otel_trackio.configure(project, run, step_durations_key=key)
        tracer = trace.get_tracer("trainer")
        for step in (1, 2):
            with tracer.start_as_current_span("train_step", attributes={"step": step}):
                for index in range(2):
                    with otel_trackio.rollout(step, index):
                        pass
                with tracer.start_as_current_span("update_actor"):
                    pass
        handle.shutdown()
    timed = read_traces(project, "timed")
    assert sorted((t["step"], t["metadata"]["sample_index"]) for t in timed) == [
        (1, 0), (1, 1), (2, 0), (2, 1)
    ]  # fmt: skip
    rows = [row for row in read_logs(project, "timed") if "step_time/update_actor" in row]
    assert sorted(row["step"] for row in rows) == [1, 2]
    assert all(row["step_time/train_step"] >= row["step_time/update_actor"] for row in rows)
    traced = read_traces(project, "traced")
    assert len(traced) == 6  # the four samples and each step's own spans
    steps_own = [t for t in traced if t["metadata"].get("sample_index") is None]
    assert sorted(t["step"] for t in steps_own) == [1, 2]
    assert not any("step_time/update_actor" in row for row in read_logs(project, "traced"))
