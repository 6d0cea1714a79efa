"""TRL: every GRPO or RLOO completion as a Trackio Trace beside TRL's own curves, in one line.

::

    trainer = GRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(report_to="trackio"), ...)
    otel_trackio.trl.trace_rollouts(trainer)
    trainer.train()

Each completion becomes one Trace in TRL's own run (``args.project`` / ``args.run_name``, or the
name Trackio picked), whatever was opened first: the prompt conversation and the completion as
messages (TRL's tool turns as tool calls and results), each reward function's value by its name,
the total reward and the advantage in the header, the prompt group and the completion's index in
it, and the token counts on its generation span.

**The step.** A batch generated while TRL's ``global_step`` is *s* is logged by TRL (its
``train/reward``, loss, KL) in the row of its next logging step: the first multiple of
``logging_steps`` above *s*, at most ``max_steps``. Its Traces are logged at that row's Trackio
step (TRL's rows take Trackio's own counter, which evaluation rows move on), so a Trace sits on
the curves it explains; with ``steps_per_generation > 1`` or ``logging_steps > 1`` several
batches share a row, as their rewards share TRL's mean. An evaluation batch is logged with the
evaluation's row, marked ``validate``. While a batch is generated the step is declared
(:func:`otel_trackio.set_step`): a span or ``rollout(None, i)`` of the user's that names no step
gets it.

**The user's own spans.** Inside a ``rollout_func``, a reward function or an environment's tool,
``with otel_trackio.trl.sample(i):`` makes completion *i* of the batch (its index in the
``prompts`` list TRL passed) the current span: everything started inside (GenAI
instrumentations, ``@traced`` calls) joins that completion's Trace.

**Several ranks.** Every process traces its own completions into the one run: ``sample_index``
numbers the completions logged at a step across all ranks (rank 0's first), ``group`` their
prompts, ``rollout_n`` a completion's place in its group. ``max_samples_per_step`` caps the Traces
each process keeps per step.

TRL's members read: ``_generate_and_score_completions`` (wrapped) and ``_logs`` (the gathered
prompts, completions, rewards and advantages TRL keeps for its own completions table), as in TRL
1.16; and the Trackio run's step counter (``Run._next_step``, Trackio 0.43). A TRL without them
gets one warning, and training runs untouched.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from otel_trackio._core.conventions import otel_genai
from otel_trackio._engine.steps import set_step
from otel_trackio.instrument import end_sample, sample_attributes, start_sample
from otel_trackio.telemetry import TrackioTelemetry, active_telemetry, configure

__all__ = ["RolloutTracing", "sample", "trace_rollouts", "trace_step"]

_logger = logging.getLogger(__name__)

TESTED_TRL_VERSIONS = ("1.16",)
"""The TRL versions whose private members this module reads (see the module's docstring)."""

_NEEDED_MEMBERS = (
    "_generate_and_score_completions",
    "_logs",
    "reward_func_names",
    "reward_weights",
    "accelerator",
    "state",
    "args",
)

_SAMPLE_SPAN = "trl.completion"
_GENERATION_SPAN = "generate"


def trace_step(
    global_step: int, logging_steps: int, max_steps: int, *, logs_by_steps: bool = True
) -> int:
    """The Trackio step of a batch generated while TRL's ``global_step`` is ``global_step``:
    the step TRL logs that batch's metrics at (its next logging step, at most ``max_steps``);
    ``global_step + 1`` when TRL does not log every ``logging_steps`` steps."""
    if not logs_by_steps or logging_steps < 1:
        return global_step + 1
    step = (global_step // logging_steps + 1) * logging_steps
    return min(step, max_steps) if max_steps > 0 else step


@dataclass
class _Batch:
    """The completions of one generation batch of this process while it is generated."""

    roots: list[Span]
    offset: int
    started_ns: int
    evaluation: bool


_current: _Batch | None = None
_current_lock = threading.Lock()


@contextlib.contextmanager
def sample(index: int) -> Iterator[Span | None]:
    """Make completion ``index`` of the batch being generated (its index in the ``prompts`` TRL
    passed to a ``rollout_func`` or reward function) the current span: spans started inside
    join its Trace. Outside a traced batch, or for an index it does not have, nothing changes
    (None is yielded)."""
    batch = _current
    root = batch.roots[index] if batch is not None and 0 <= index < len(batch.roots) else None
    if root is None:
        yield None
        return
    token = otel_context.attach(trace.set_span_in_context(root))
    try:
        yield root
    finally:
        otel_context.detach(token)


class RolloutTracing:
    """What :func:`trace_rollouts` installed on one trainer: the wrapped generation and the
    callback that joins TRL's run when training begins and stores everything when it ends.

    ``telemetry``: the otel-trackio handle the Traces go through (None until training begins);
    ``options``: what :func:`otel_trackio.configure` is called with (project and name come from
    the trainer)."""

    def __init__(self, trainer: Any, options: Mapping[str, Any]) -> None:
        self.trainer = trainer
        self.options = dict(options)
        self.telemetry: TrackioTelemetry | None = None
        self._configured_here = False
        self._failed_once = False
        self._batches_at: tuple[int | None, int] = (None, 0)  # (step, batches traced at it)

    # -- the run ----------------------------------------------------------------------------

    def join_run(self, name: str | None = None) -> TrackioTelemetry:
        """The otel-trackio handle for TRL's run, configured on first use: the active
        ``configure()`` when there is one, else one for the trainer's project and ``name``
        (default ``args.run_name``; the run TRL's Trackio callback opened)."""
        if self.telemetry is not None and not self.telemetry.closed:
            return self.telemetry
        active = active_telemetry()
        if active is not None and not active.closed:
            self.telemetry = active
            return active
        args = self.trainer.args
        project = getattr(args, "project", None) or "huggingface"
        options = dict(self.options)
        options.setdefault("outcome_attributes", self._outcome_names())
        name = name or getattr(args, "run_name", None) or None
        self.telemetry = configure(project, name, **options)
        self._configured_here = True
        return self.telemetry

    def _outcome_names(self) -> tuple[str, ...]:
        names = [f"reward.{name}" for name in self.trainer.reward_func_names]
        return ("reward", "advantage", *names)

    def join_on_every_rank(self) -> None:
        """Join TRL's run in every process, the main one first: its run (opened by TRL's
        callback, or by otel-trackio) is then stored under its name, and the other ranks
        continue it instead of each starting a run of that name."""
        accelerator = self.trainer.accelerator
        several = int(accelerator.num_processes) > 1
        name = _run_name(self.trainer)  # every rank: the name is sent from the main one
        if not several or accelerator.is_main_process:
            self._guarded(self.join_run, name)
        if several:
            accelerator.wait_for_everyone()
            if not accelerator.is_main_process:
                self._guarded(self.join_run, name)

    def finish(self) -> None:
        """Store everything recorded (training ended); the run stays TRL's."""
        if self._configured_here and self.telemetry is not None:
            self.telemetry.shutdown()

    # -- one generation batch ---------------------------------------------------------------

    def wrap(self, generate: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``_generate_and_score_completions`` recording each completion as a sample."""

        def generate_and_score_completions(inputs: Any) -> Any:
            global _current
            next_row = self._next_row_step()
            batch = self._guarded(self._begin, inputs, next_row)
            with _current_lock:
                _current = batch
            try:
                output = generate(inputs)
            except BaseException as exc:
                if batch is not None:
                    for root in batch.roots:
                        end_sample(root, exc)
                raise
            finally:
                with _current_lock:
                    if _current is batch:
                        _current = None
            if batch is not None:
                self._guarded(self._finish, batch, output)
            return output

        generate_and_score_completions.__wrapped__ = generate  # type: ignore[attr-defined]
        return generate_and_score_completions

    def _guarded(self, call: Callable[..., Any], *args: Any) -> Any:
        """Run a recording step; a failure is said once and never reaches training."""
        try:
            return call(*args)
        except Exception:
            if not self._failed_once:
                self._failed_once = True
                _logger.warning(
                    "otel-trackio: recording TRL's completions failed (training goes on, later "
                    "failures are not said again)",
                    exc_info=True,
                )
            return None

    def _next_row_step(self) -> int | None:
        """The Trackio step TRL's next step-less row would land at (its Trackio callback logs
        without a step: the run's own counter), read on the main process and sent to every rank;
        None without TRL's Trackio callback."""
        accelerator = self.trainer.accelerator
        following = self._guarded(self._counter) if accelerator.is_main_process else None
        if int(accelerator.num_processes) > 1:
            from accelerate.utils import broadcast_object_list

            sent = [following]
            broadcast_object_list(sent, from_process=0)
            following = sent[0]
        return following if isinstance(following, int) else None

    def _counter(self) -> int | None:
        handler = getattr(self.trainer, "callback_handler", None)
        callbacks = getattr(handler, "callbacks", ())
        if not any(type(c).__name__ == "TrackioCallback" for c in callbacks):
            return None
        import sys

        trackio = sys.modules.get("trackio")
        run = trackio.context_vars.current_run.get() if trackio is not None else None
        following = getattr(run, "_next_step", None)
        return following if isinstance(following, int) else None

    def _begin(self, inputs: Sequence[Any], next_row: int | None) -> _Batch:
        self.join_run()
        trainer = self.trainer
        state = trainer.state
        evaluation = not trainer.model.training
        global_step = int(state.global_step)
        if evaluation:  # TRL logs the evaluation's row next
            step = global_step if next_row is None else next_row
        else:
            args = trainer.args
            strategy = getattr(args, "logging_strategy", "steps")
            logged_at = trace_step(
                global_step,
                int(getattr(state, "logging_steps", 0) or args.logging_steps),
                int(state.max_steps or 0),
                logs_by_steps=getattr(strategy, "value", strategy) == "steps",
            )
            step = logged_at
            if next_row is not None:
                # Rows TRL logged besides its training rows (evaluations) moved the run's
                # counter past global_step; those it will log before this batch's row, too.
                step += max(0, next_row - (global_step + 1))
                step += _evaluations_between(trainer, global_step, logged_at)
        set_step(step)
        group_size = _group_size(trainer, evaluation)
        count = len(inputs)
        # Batches logged at one step (steps_per_generation or logging_steps > 1) follow each
        # other in its sample indices: each is of the same size on every rank.
        earlier = self._batches_at[1] if self._batches_at[0] == step else 0
        self._batches_at = (step, earlier + 1)
        processes = int(trainer.accelerator.num_processes)
        offset = (earlier * processes + int(trainer.accelerator.process_index)) * count
        roots = [
            start_sample(
                _SAMPLE_SPAN,
                sample_attributes(
                    step,
                    offset + i,
                    rollout_n=(offset + i) % group_size,
                    validate=evaluation,
                ),
            )
            for i in range(count)
        ]
        return _Batch(roots, offset, time.time_ns(), evaluation)

    def _finish(self, batch: _Batch, output: Mapping[str, Any]) -> None:
        trainer = self.trainer
        ended_ns = time.time_ns()
        processes = int(trainer.accelerator.num_processes)
        total = len(batch.roots) * processes
        logs = trainer._logs
        prompts = _last(logs["prompt"], total)
        completions = _last(logs["completion"], total)
        advantages = _last(logs["advantages"], total)
        rewards = {name: _last(logs["rewards"][name], total) for name in trainer.reward_func_names}
        weights = [float(w) for w in trainer.reward_weights.tolist()]
        prompt_tokens = _row_sums(output.get("prompt_mask"))
        completion_tokens = _row_sums(output.get("completion_mask"))
        model = _model_name(trainer)
        group_size = _group_size(trainer, batch.evaluation)
        tracer = trace.get_tracer("otel_trackio.trl")
        images: dict[int, str] = {}  # a prompt's images, repeated for each of its completions
        for i, root in enumerate(batch.roots):
            if not root.is_recording():
                end_sample(root)
                continue
            at = batch.offset % total + i  # this completion in the batch of all ranks
            values = {name: _number(_at(column, at)) for name, column in rewards.items()}
            scored = [v * w for v, w in zip(values.values(), weights, strict=True) if v is not None]
            if scored:
                root.set_attribute("reward", math.fsum(scored))
            advantage = _number(_at(advantages, at))
            if advantage is not None:
                root.set_attribute("advantage", advantage)
            for name, value in values.items():
                if value is not None:
                    root.set_attribute(f"reward.{name}", value)
            root.set_attribute("group", (batch.offset + i) // group_size)
            generation = tracer.start_span(
                _GENERATION_SPAN,
                context=trace.set_span_in_context(root),
                start_time=batch.started_ns,
                attributes=_generation_attributes(
                    _at(prompts, at),
                    _at(completions, at),
                    model,
                    _at(prompt_tokens, i),
                    _at(completion_tokens, i),
                    images,
                ),
            )
            generation.end(end_time=ended_ns)
            end_sample(root)


def trace_rollouts(trainer: Any, **options: Any) -> RolloutTracing | None:
    """Log every completion a TRL ``GRPOTrainer`` or ``RLOOTrainer`` generates as a Trackio
    Trace, in TRL's own run, at the step TRL logs that batch's metrics. Call it once after the
    trainer is built, before ``trainer.train()``.

    ``options`` go to :func:`otel_trackio.configure` (``max_samples_per_step``, ``offload``,
    ``server_url`` ...); the project and run name are the trainer's (``args.project``,
    ``args.run_name``). When ``configure()`` is already active in the process, its handle is
    used as it is. Returns what was installed, or None (with one warning) for a trainer that
    lacks what this module reads.
    """
    missing = [name for name in _NEEDED_MEMBERS if not hasattr(trainer, name)]
    if missing:
        _logger.warning(
            "otel-trackio: %s has no %s: its completions are not traced (otel_trackio.trl "
            "reads TRL %s; training runs untouched)",
            type(trainer).__name__,
            ", ".join(missing),
            " and ".join(TESTED_TRL_VERSIONS),
        )
        return None
    tracing = RolloutTracing(trainer, options)
    trainer._generate_and_score_completions = tracing.wrap(trainer._generate_and_score_completions)
    trainer.add_callback(_callback(tracing))
    return tracing


def _callback(tracing: RolloutTracing) -> Any:
    """A ``TrainerCallback`` that joins TRL's run when training begins (reporting callbacks,
    Trackio's among them, have run: its run is open) and stores everything when it ends."""
    from transformers import TrainerCallback

    class OtelTrackioCallback(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            tracing.join_on_every_rank()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            tracing._guarded(tracing.finish)

    return OtelTrackioCallback()


def _evaluations_between(trainer: Any, generated_at: int, logged_at: int) -> int:
    """How many evaluation rows TRL logs after a batch generated at global step
    ``generated_at`` and before its training row at ``logged_at`` (an evaluation runs right
    after the training row of its step)."""
    args = trainer.args
    strategy = getattr(args, "eval_strategy", "no")
    if getattr(strategy, "value", strategy) != "steps" or trainer.eval_dataset is None:
        return 0
    every = int(getattr(trainer.state, "eval_steps", 0) or args.eval_steps or 0)
    if every < 1:
        return 0
    return sum(1 for at in range(generated_at + 1, logged_at) if at % every == 0)


def _group_size(trainer: Any, evaluation: bool) -> int:
    """How many completions TRL generates per prompt (consecutive in a batch)."""
    size = getattr(trainer, "num_generations_eval", None) if evaluation else None
    return max(1, int(size or trainer.num_generations))


def _run_name(trainer: Any) -> str | None:
    """The run TRL logs to: ``args.run_name``, else the name of the Trackio run its callback
    opened on the main process (sent to the other ranks)."""
    name = getattr(trainer.args, "run_name", None)
    if name:
        return str(name)
    accelerator = trainer.accelerator
    if accelerator.is_main_process:
        import sys

        trackio = sys.modules.get("trackio")
        run = trackio.context_vars.current_run.get() if trackio is not None else None
        name = getattr(run, "name", None)
    if int(accelerator.num_processes) > 1:
        from accelerate.utils import broadcast_object_list

        names = [name]
        broadcast_object_list(names, from_process=0)
        name = names[0]
    return str(name) if name else None


def _generation_attributes(
    prompt: Any,
    completion: Any,
    model: str | None,
    prompt_tokens: Any,
    completion_tokens: Any,
    images: dict[int, str],
) -> dict[str, Any]:
    chat = isinstance(prompt, list)
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat" if chat else "text_completion"}
    if model:
        attributes["gen_ai.request.model"] = model
    if prompt is not None:
        attributes[otel_genai.INPUT_KEY] = _messages_json(prompt, "user", images)
    if completion is not None:
        attributes[otel_genai.OUTPUT_KEY] = _messages_json(completion, "assistant")
    if isinstance(prompt_tokens, int):
        attributes["gen_ai.usage.input_tokens"] = prompt_tokens
    if isinstance(completion_tokens, int):
        attributes["gen_ai.usage.output_tokens"] = completion_tokens
    return attributes


def _messages_json(value: Any, role: str, images: dict[int, str] | None = None) -> str:
    """A TRL prompt or completion (a text, or chat messages) as OTel GenAI messages; the images
    of a multimodal prompt (``{"type": "image", "image": <PIL image>}``) as PNG ``blob`` parts,
    each encoded once per batch (``images``: by the image object's id)."""
    turns = value if isinstance(value, list) else [{"role": role, "content": value}]
    cache = images if images is not None else {}
    return json.dumps(
        [
            otel_genai.from_chat_message(_with_blobs(m, cache))
            for m in turns
            if isinstance(m, Mapping)
        ],
        default=str,
        ensure_ascii=False,
    )


def _with_blobs(message: Mapping[str, Any], images: dict[int, str]) -> Mapping[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts: list[Any] = []
    for part in content:
        image = part.get("image") if isinstance(part, Mapping) else None
        if image is not None and callable(getattr(image, "save", None)):
            encoded = images.get(id(image))
            if encoded is None:
                buffer = io.BytesIO()
                image.save(buffer, format="PNG")
                encoded = images[id(image)] = base64.b64encode(buffer.getvalue()).decode()
            part = {"type": "blob", "modality": "image", "mime_type": "image/png",
                    "content": encoded}  # fmt: skip
        elif isinstance(part, Mapping) and part.get("type") == "text" and "text" in part:
            part = {"type": "text", "content": part["text"]}
        parts.append(part)
    return {**message, "content": parts}


def _last(values: Any, count: int) -> list[Any]:
    """The last ``count`` entries of one of TRL's log columns (this batch, all ranks)."""
    column = list(values)
    return column[-count:] if len(column) >= count else []


def _at(values: Sequence[Any], index: int) -> Any:
    return values[index] if 0 <= index < len(values) else None


def _number(value: Any) -> float | None:
    """A reward or advantage as TRL computed it (float32): to its 7 significant digits, so that
    the header reads ``0.2``, not ``0.20000000298023224``; None for a function that gave none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(f"{value:.7g}")


def _row_sums(mask: Any) -> list[int]:
    """Each row's count of ones in a (torch) mask: the tokens of each prompt or completion."""
    if mask is None:
        return []
    return [int(n) for n in mask.sum(dim=1).tolist()]


def _model_name(trainer: Any) -> str | None:
    config = getattr(getattr(trainer, "model", None), "config", None)
    name = getattr(config, "_name_or_path", None) or getattr(config, "model_type", None)
    return str(name) if name else None
