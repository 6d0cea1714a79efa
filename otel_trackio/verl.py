"""verl's rollout trace as standard OpenTelemetry spans, without changing verl's code.

Pick the ``otel`` trace backend (and name this module in ``VERL_USE_EXTERNAL_MODULES``)::

    VERL_USE_EXTERNAL_MODULES=otel_trackio.verl python -m verl.trainer.main_ppo \\
        actor_rollout_ref.rollout.trace.backend=otel \\
        actor_rollout_ref.rollout.trace.token2text=True \\
        actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=8 ...

``verl/__init__.py`` imports it in every process that imports verl (the driver and each Ray
worker, which inherits the variable), before verl's agent loops, tools and server clients are
defined. (verl also loads every ``verl.plugins`` entry point, unless
``VERL_USE_EXTERNAL_PLUGINS=none``: otel-trackio declares this module as one, so with otel-trackio
installed ``trace.backend=otel`` alone is enough.) Importing it wraps
``verl.utils.rollout_trace``'s ``rollout_trace_attr``, ``rollout_trace_op`` and
``RolloutTraceConfig.init`` so that with ``trace.backend=otel``:

- each sample (``rollout_trace_attr``) is a root span with ``step``, ``sample_index``,
  ``rollout_n``, ``validate`` (and verl's ``experiment_name``): one Trackio Trace per sample;
- each traced call (``rollout_trace_op``) is a child span named like verl names it: a generate
  call (its result holds ``token_ids``) a generation with ``prompt_ids`` / ``response_ids`` and
  their counts as usage, decoded by the exporter on its own thread with the agent loop's
  tokenizer when ``token2text`` is on; a tool's ``execute`` a tool span with its arguments, its
  result text and its reward; the agent loop's ``run`` the agent span whose input is the prompt
  as role messages (the Trace's conversation starts with it); any other call a span with its
  arguments and result as JSON;
- ``max_samples_per_step_per_worker`` is a :class:`~otel_trackio.StepSampler` (verl's own random
  pick is turned off: the sampler keeps the same prompts, all their ``rollout_n``, in every
  worker with the same seed);
- verl's ``Tracking`` with the ``trackio`` logger continues the run the Traces go to (one run
  of ``experiment_name``: its metrics and validation generations beside the samples), instead
  of starting a second run of the same name.

Where the spans go, in each process: with ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_ENDPOINT``) set, over OTLP/HTTP to ``otel-trackio serve`` (every worker into
one receiver, routed to verl's ``project_name`` / ``experiment_name`` unless
``OTEL_RESOURCE_ATTRIBUTES`` says otherwise); else straight into the Trackio run named by verl's
``project_name`` / ``experiment_name`` (the first worker of a machine writes the run, the others
resume it: every worker logs into that one run, each through its own offload writer).
``OTEL_EXPORTER_TRACKIO_*`` settings apply on both routes. Any other backend (``weave``,
``mlflow``, ``trackio``, none) runs verl's own code unchanged.

Custom agent loops can use this module's :func:`rollout_trace_attr` / :func:`rollout_trace_op`
directly (verl's signatures; change one import line): they always emit OTel spans, to whatever
tracer provider is installed.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect
import json
import logging
import operator
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, Status, StatusCode

from otel_trackio._core.conventions import chat_markup, otel_genai
from otel_trackio._core.conventions.tokens import DECODED_TEXT_ATTRIBUTES, token_ids
from otel_trackio._core.values import json_text
from otel_trackio._settings import TrackioSettings
from otel_trackio.instrument import rollout
from otel_trackio.sampling import step_sampler
from otel_trackio.span_exporter import TrackioSpanExporter
from otel_trackio.span_processor import DEEP_QUEUE_SIZE, OpenSampleTracker, TrackioSpanProcessor

__all__ = ["BACKEND", "install", "rollout_trace_attr", "rollout_trace_op", "setup"]

_logger = logging.getLogger("otel_trackio")

#: the ``trace.backend`` value that selects this module's spans
BACKEND = "otel"
_SCOPE = "otel_trackio.verl"
#: token id attributes of a generation span (the exporter's default token id attributes)
PROMPT_IDS, RESPONSE_IDS = "prompt_ids", "response_ids"

F = TypeVar("F", bound=Callable[..., Any])

_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_trackio_verl", default=True)
#: the message lists an agent loop's state holds (verl's ``AgentData.messages``), per traced call
_held_messages: contextvars.ContextVar[list[list[Any]] | None] = contextvars.ContextVar(
    "otel_trackio_verl_messages", default=None
)
_lock = threading.Lock()
_provider: TracerProvider | None = None
_own_exporter: SpanExporter | None = None  # the exporter setup() built (not a user's provider's)
_decode_tokens = True  # verl's token2text (the drop-ins alone: decode when a tokenizer is known)
_decode: Callable[[Sequence[int]], Any] | None = None
_open_samples = 0  # samples of this process inside rollout_trace_attr


# -- where the spans go ---------------------------------------------------------------------------


class _DecodingExporter(SpanExporter):
    """Adds the text of each generation's token ids (``prompt_text`` / ``response_text``) before
    handing spans on, on the export thread (never the rollout's): the text then travels with
    the ids to a receiver or an offload writer that has no tokenizer."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Decode, then export through the wrapped exporter."""
        return self._inner.export([_safely_with_text(span) for span in spans])

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the wrapped exporter."""
        return self._inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Shut the wrapped exporter down."""
        self._inner.shutdown()


def _safely_with_text(span: ReadableSpan) -> ReadableSpan:
    try:
        return _with_text(span)
    except Exception:  # noqa: BLE001 - export() never raises: the span goes as it came
        return span


def _with_text(span: ReadableSpan) -> ReadableSpan:
    decode = _decode
    attrs = span.attributes or {}
    if decode is None or PROMPT_IDS not in attrs:
        return span
    texts: dict[str, str] = {}
    for name, side in ((PROMPT_IDS, "input"), (RESPONSE_IDS, "output")):
        ids = token_ids(attrs.get(name))
        if ids is None:
            continue
        try:
            text = decode(ids)
        except Exception:  # noqa: BLE001 - the ids stay on the span, undecoded
            continue
        texts[DECODED_TEXT_ATTRIBUTES[side]] = text if isinstance(text, str) else str(text)
    if not texts:
        return span
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes={**attrs, **texts},
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def setup(
    project_name: str | None,
    experiment_name: str | None,
    *,
    token2text: bool = False,
    max_samples_per_step_per_worker: int | None = None,
) -> TracerProvider:
    """Install this process's tracer provider for verl's spans (once; later calls return it).

    OTLP/HTTP when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
    set, else a :class:`~otel_trackio.TrackioSpanExporter` into ``project_name`` /
    ``experiment_name`` (the ``OTEL_EXPORTER_TRACKIO_*`` variables win over both); a
    :class:`~otel_trackio.StepSampler` for ``max_samples_per_step_per_worker`` (or
    ``OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP``). A global SDK provider installed before is
    used as it is (its sampler stays).
    """
    global _provider, _own_exporter, _decode_tokens
    with _lock:
        _decode_tokens = token2text
        if _provider is not None:
            return _provider
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            if max_samples_per_step_per_worker is not None:
                _logger.warning(
                    "otel-trackio: a tracer provider was installed before verl's trace setup; "
                    "max_samples_per_step_per_worker is not applied (its sampler stays)"
                )
            _provider = current
            return current
        settings = TrackioSettings.from_env()
        overrides: dict[str, Any] = {
            "project": settings.project or project_name,
            "name": settings.name or experiment_name,
        }
        if settings.max_samples_per_step is None:
            overrides["max_samples_per_step"] = max_samples_per_step_per_worker
        settings = settings.with_options(**overrides)
        resource = Resource.create(_routing(settings))
        provider = TracerProvider(sampler=step_sampler(settings), resource=resource)
        exporter = _exporter(settings)
        if isinstance(exporter, TrackioSpanExporter) and not token2text:
            # configure()'s path: spans encoded as they end (offloaded), open spans tracked.
            provider.add_span_processor(
                TrackioSpanProcessor(exporter, max_queue_size=DEEP_QUEUE_SIZE)
            )
        else:  # token ids decoded on the export thread, before the spans leave the process
            tracked = exporter if isinstance(exporter, TrackioSpanExporter) else None
            provider.add_span_processor(
                OpenSampleTracker(settings.sample_attribute, exporter=tracked)
            )
            exporter = _DecodingExporter(exporter)
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _provider, _own_exporter = provider, exporter
        return provider


def _otlp() -> bool:
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def _routing(settings: TrackioSettings) -> dict[str, str]:
    """The receiver's ``trackio.project`` / ``trackio.run`` resource attributes (OTLP only;
    ``OTEL_RESOURCE_ATTRIBUTES`` wins)."""
    if not _otlp():
        return {}
    named = os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    out = {}
    for key, value in (("trackio.project", settings.project), ("trackio.run", settings.name)):
        if value and f"{key}=" not in named:
            out[key] = value
    return out


def _exporter(settings: TrackioSettings) -> SpanExporter:
    if _otlp():
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    # A named run is continued by name (the plan's continue_by_name): the writer of every worker
    # makes it exist first, so all of them resume it.
    return TrackioSpanExporter(settings=settings.with_options(resume=settings.resume or "allow"))


def _tracer() -> trace.Tracer:
    provider = _provider or trace.get_tracer_provider()
    return provider.get_tracer(_SCOPE)


# -- the drop-ins ---------------------------------------------------------------------------------


@contextlib.contextmanager
def rollout_trace_attr(
    sample_index: Any = None,
    step: Any = None,
    rollout_n: Any = None,
    name: str = "rollout_trace",
    validate: bool = False,
    trace: bool = True,
) -> Iterator[None]:
    """verl's ``rollout_trace_attr`` on OTel: the sample's root span (``step``,
    ``sample_index``, ``rollout_n``, ``validate``, verl's ``experiment_name``), current while
    the block runs. ``trace=False`` traces nothing inside (verl's meaning)."""
    if not trace:
        token = _enabled.set(False)
        try:
            yield
        finally:
            _enabled.reset(token)
        return
    extra: dict[str, Any] = {}
    experiment = _verl_config_value("experiment_name")
    if experiment is not None:
        extra["experiment_name"] = experiment
    _sample_started()
    try:
        with rollout(
            step if step is not None else -1,
            sample_index,
            rollout_n=rollout_n,
            validate=bool(validate),
            name=name,
            tracer_provider=_provider,
            **extra,
        ):
            yield
    finally:
        _sample_ended()


def _sample_started() -> None:
    global _open_samples
    with _lock:
        _open_samples += 1


#: how long the end of a worker's batch waits for its spans to be stored
FLUSH_MILLIS = 10_000


def _sample_ended() -> None:
    """When the last open sample of the process ends (a worker's batch is done), its spans are
    handed on and, straight into Trackio, stored before the batch returns (within
    :data:`FLUSH_MILLIS`; over OTLP, the receiver acknowledged them), rather than when the batch
    processor's timer says: Ray's ``ray.shutdown()`` kills a worker with its offload writer
    within seconds of the last result, and what was only spooled would wait for the next start.
    Once per batch."""
    global _open_samples
    with _lock:
        _open_samples -= 1
        idle = _open_samples == 0
    provider, exporter = _provider, _own_exporter
    if idle and provider is not None:
        started = time.monotonic()
        provider.force_flush(FLUSH_MILLIS)
        if exporter is not None:
            left = FLUSH_MILLIS - (time.monotonic() - started) * 1000
            exporter.force_flush(max(0, int(left)))


def rollout_trace_op(func: F) -> F:
    """verl's ``rollout_trace_op`` on OTel: each call of the decorated method (async or not) a
    span named by its qualified name, inside the current sample (see the module docstring for
    what each kind of call records)."""
    signature = inspect.signature(func)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not _enabled.get():
                return await func(self, *args, **kwargs)
            with _Op(func, signature, self, args, kwargs) as op:
                result = await func(self, *args, **kwargs)
                op.done(result)
                return result

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _enabled.get():
            return func(self, *args, **kwargs)
        with _Op(func, signature, self, args, kwargs) as op:
            result = func(self, *args, **kwargs)
            op.done(result)
            return result

    return wrapper  # type: ignore[return-value]


class _Op:
    """One traced call: its span, started on entry, its arguments and result recorded."""

    __slots__ = ("_held", "_held_token", "_inputs", "_manager", "_self", "span")

    def __init__(
        self,
        func: Callable[..., Any],
        signature: inspect.Signature,
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self._self = instance
        self._manager = _tracer().start_as_current_span(
            func.__qualname__, record_exception=False, set_status_on_exception=False
        )
        self.span: Span = self._manager.__enter__()
        self._held: list[list[Any]] = []
        self._held_token = _held_messages.set(self._held)
        self._inputs: dict[str, Any] = {}
        if self.span.is_recording():
            _remember_tokenizer(instance)
            try:
                bound = signature.bind(instance, *args, **kwargs)
                bound.apply_defaults()
                self._inputs = dict(bound.arguments)
                self._inputs.pop(next(iter(signature.parameters)), None)  # self
            except TypeError:
                self._inputs = {"args": list(args), "kwargs": kwargs}

    def done(self, result: Any) -> None:
        if self.span.is_recording():
            try:
                _record(self.span, self._self, self._inputs, result, self._held)
            except Exception:  # tracing must never cost the rollout its result
                _logger.debug("otel-trackio: could not record %s", self.span, exc_info=True)

    def __enter__(self) -> _Op:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and self.span.is_recording():
            self.span.record_exception(exc)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        _held_messages.reset(self._held_token)
        self._manager.__exit__(exc_type, exc, tb)


def _remember_tokenizer(instance: Any) -> None:
    """The first tokenizer seen on a traced instance (agent loop, server client) decodes token
    ids on the export thread, when ``token2text`` is on."""
    global _decode
    if _decode is not None or not _decode_tokens:
        return
    decode = getattr(getattr(instance, "tokenizer", None), "decode", None)
    if callable(decode):
        _decode = decode


# -- what a call records --------------------------------------------------------------------------


def _ids(value: Any) -> list[int] | None:
    """Token ids as a list of ints (numpy ints too); None for anything else or an empty list."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    try:
        return [operator.index(v) for v in value]
    except TypeError:
        return None


def _field(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _record(
    span: Span, instance: Any, inputs: dict[str, Any], result: Any, held: list[list[Any]]
) -> None:
    """The call's attributes by its shape: generation, tool, agent loop, or any other call.
    ``held``: the message lists the call's agent loop state held (verl's ``AgentData``)."""
    response_ids = _field(result, "token_ids")
    if isinstance(response_ids, (list, tuple)):
        _record_generation(span, inputs, result, _ids(response_ids) or [])
        return
    if "parameters" in inputs and isinstance(result, tuple) and len(result) == 3:
        _record_tool(span, instance, inputs, result)
        return
    prompt = _raw_prompt(inputs)
    if prompt is not None:
        _record_agent(span, instance, prompt, result, held[0] if len(held) == 1 else None)
        return
    span.set_attribute("input.value", json_text(inputs))
    span.set_attribute("input.mime_type", "application/json")
    span.set_attribute("output.value", json_text(result))
    span.set_attribute("output.mime_type", "application/json")


_SAMPLING = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "max_tokens": "gen_ai.request.max_tokens",
}


def _record_generation(
    span: Span, inputs: Mapping[str, Any], result: Any, response_ids: list[int]
) -> None:
    span.set_attribute("gen_ai.operation.name", "text_completion")
    prompt_ids = _ids(inputs.get("prompt_ids"))
    if prompt_ids is not None:
        span.set_attribute(PROMPT_IDS, prompt_ids)
        span.set_attribute("gen_ai.usage.input_tokens", len(prompt_ids))
    if response_ids:
        span.set_attribute(RESPONSE_IDS, response_ids)
    span.set_attribute("gen_ai.usage.output_tokens", len(response_ids))
    params = inputs.get("sampling_params")
    if isinstance(params, Mapping):
        for key, attribute in _SAMPLING.items():
            value = params.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                span.set_attribute(attribute, value)
    stop = _field(result, "stop_reason")
    if isinstance(stop, str):
        span.set_attribute("gen_ai.response.finish_reasons", [stop])


def _record_tool(
    span: Span, instance: Any, inputs: Mapping[str, Any], result: tuple[Any, ...]
) -> None:
    response, reward, metrics = result
    span.set_attribute("gen_ai.operation.name", "execute_tool")
    name = getattr(instance, "name", None)
    if isinstance(name, str):
        span.set_attribute("gen_ai.tool.name", name)
    span.set_attribute("gen_ai.tool.call.arguments", json_text(inputs.get("parameters")))
    text = _field(response, "text")
    span.set_attribute(
        "gen_ai.tool.call.result", text if isinstance(text, str) else json_text(response)
    )
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        span.set_attribute("verl.tool_reward", float(reward))
    if metrics:
        span.set_attribute("verl.tool_metrics", json_text(metrics))


def _raw_prompt(inputs: Mapping[str, Any]) -> list[Any] | None:
    kwargs = inputs.get("kwargs")
    for holder in (kwargs, inputs):
        prompt = holder.get("raw_prompt") if isinstance(holder, Mapping) else None
        if prompt is not None and not isinstance(prompt, (str, bytes)):
            messages = list(prompt)
            if messages and all(isinstance(m, Mapping) and "role" in m for m in messages):
                return messages
    return None


def _reply(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """An assistant turn as the loop held it, without the stop token verl's tool parser leaves
    in its text (it decodes the reply's ids whole)."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, str):
        return message
    return {**message, "content": chat_markup.without_end_tokens(content)}


def _record_agent(
    span: Span, instance: Any, prompt: list[Any], result: Any, held: list[Any] | None
) -> None:
    """The agent span: the prompt as its input messages and, when the loop's state held the
    conversation (``ToolAgentLoop``), the turns the loop added after the prompt as its output
    messages: the conversation as the loop held it, not as decoded from token ids."""
    span.set_attribute("gen_ai.operation.name", "invoke_agent")
    span.set_attribute("gen_ai.agent.name", type(instance).__name__)
    span.set_attribute(
        "gen_ai.input.messages",
        json.dumps([otel_genai.from_chat_message(m) for m in prompt], default=str),
    )
    if held is not None and len(held) > len(prompt):
        added = [
            otel_genai.from_chat_message(_reply(m))
            for m in held[len(prompt) :]
            if isinstance(m, Mapping)
        ]
        span.set_attribute("gen_ai.output.messages", json.dumps(added, default=str))
    turns = _field(result, "num_turns")
    if isinstance(turns, int):
        span.set_attribute("verl.num_turns", turns)
    reward = _field(result, "reward_score")
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        span.set_attribute("reward", float(reward))


# -- wrapping verl's module -----------------------------------------------------------------------


def _verl_config_value(name: str) -> Any:
    module = _verl_module(import_it=False)
    if module is None:
        return None
    return getattr(module.RolloutTraceConfig.get_instance(), name, None)


def _verl_module(import_it: bool = True) -> Any:
    name = "verl.utils.rollout_trace"
    if not import_it:
        import sys

        return sys.modules.get(name)
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def install() -> bool:
    """Wrap ``verl.utils.rollout_trace`` so that ``trace.backend=otel`` emits OTel spans (done
    on import; idempotent). False when verl is not installed."""
    module = _verl_module()
    if module is None:
        return False
    if getattr(module, "_otel_trackio_installed", False):
        return True
    config = module.RolloutTraceConfig
    verl_attr, verl_op, verl_init = module.rollout_trace_attr, module.rollout_trace_op, config.init

    def otel_selected() -> bool:
        return bool(config.get_backend() == BACKEND)

    @functools.wraps(verl_attr)  # verl's signature (both take the same arguments)
    def attr(*args: Any, **kwargs: Any) -> Any:
        return (rollout_trace_attr if otel_selected() else verl_attr)(*args, **kwargs)

    def op(func: F) -> F:
        _hold_agent_state(func)
        ours, theirs = rollout_trace_op(func), verl_op(func)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_dispatch(*args: Any, **kwargs: Any) -> Any:
                return await (ours if otel_selected() else theirs)(*args, **kwargs)

            return async_dispatch  # type: ignore[return-value]

        @functools.wraps(func)
        def dispatch(*args: Any, **kwargs: Any) -> Any:
            return (ours if otel_selected() else theirs)(*args, **kwargs)

        return dispatch  # type: ignore[return-value]

    def init(
        cls: Any,
        project_name: str,
        experiment_name: str,
        backend: str,
        token2text: bool = False,
        max_samples_per_step_per_worker: int | None = None,
    ) -> None:
        if backend != BACKEND:
            verl_init.__func__(
                cls,
                project_name,
                experiment_name,
                backend,
                token2text,
                max_samples_per_step_per_worker,
            )
            return
        if not cls.get_instance()._initialized:
            setup(
                project_name,
                experiment_name,
                token2text=token2text,
                max_samples_per_step_per_worker=max_samples_per_step_per_worker,
            )
        # verl's own random pick off: the StepSampler decides which samples are kept.
        verl_init.__func__(cls, project_name, experiment_name, backend, token2text, None)

    module.rollout_trace_attr = attr
    module.rollout_trace_op = op
    config.init = classmethod(init)
    module._otel_trackio_installed = True
    _install_tracking()
    return True


#: the class in which verl's agent loops keep a sample's state, ``messages`` among it
_AGENT_STATE = "AgentData"


def _hold_agent_state(func: Callable[..., Any]) -> None:
    """When ``func`` is defined in a module with verl's agent state class (``AgentData``, in
    ``tool_agent_loop.py``: defined before the loop whose ``run`` is being decorated), each new
    state hands its ``messages`` list to the traced call it is made in, which records what the
    list holds when the call returns (:func:`_record_agent`)."""
    import sys

    cls: Any = getattr(sys.modules.get(getattr(func, "__module__", ""), None), _AGENT_STATE, None)
    if not isinstance(cls, type) or getattr(cls, "_otel_trackio_held", False):
        return
    original = cls.__init__  # type: ignore[misc]

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        held = _held_messages.get()
        messages = getattr(self, "messages", None)
        if held is not None and isinstance(messages, list):
            held.append(messages)

    cls.__init__ = init  # type: ignore[misc]
    cls._otel_trackio_held = True  # type: ignore[attr-defined]


def _install_tracking() -> None:
    """verl's ``Tracking`` with the ``trackio`` logger continues the run its Traces go to (when
    its config says ``trace.backend=otel``): verl's own ``trackio.init`` would start a second run
    of the same name, its metrics and validation generations apart from the samples. The run is
    made to exist under the same lock the workers use, then opened with ``resume="allow"``
    before verl's ``__init__`` runs (which then keeps the active run, as it does for one the
    user opened), whichever of them comes first."""
    try:
        tracking = importlib.import_module("verl.utils.tracking")
    except ImportError:
        return
    cls = tracking.Tracking
    if getattr(cls, "_otel_trackio_installed", False):
        return
    verl_init = cls.__init__

    @functools.wraps(verl_init)
    def init(
        self: Any,
        project_name: str,
        experiment_name: str,
        default_backend: str | list[str] = "console",
        config: Any = None,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        backends = [default_backend] if isinstance(default_backend, str) else default_backend
        if "trackio" in backends and _traces_backend(config) == BACKEND:
            from otel_trackio._trackio.runs import continue_run_by_name

            continue_run_by_name(project_name, experiment_name, config)
        verl_init(self, project_name, experiment_name, default_backend, config, *args, **kwargs)

    cls.__init__ = init
    cls._otel_trackio_installed = True


def _traces_backend(config: Any) -> Any:
    """``actor_rollout_ref.rollout.trace.backend`` of verl's config (a dict or an OmegaConf
    config), or None."""
    node = config
    for key in ("actor_rollout_ref", "rollout", "trace", "backend"):
        try:
            node = node[key]
        except (KeyError, TypeError, IndexError, AttributeError):
            return None
        if node is None:
            return None
    return node


install()
