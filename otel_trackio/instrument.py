"""Rollout instrumentation on the plain OTel API: ``rollout()`` for a sample, ``@traced`` for steps.

``rollout(step, sample_index)`` starts the sample's root span and makes it current; everything
started inside (nested spans, asyncio tasks, threads that copy the context) is that sample.
``@traced`` records a function call as a span with its arguments and return value in
OpenInference form (``input.value``/``output.value`` JSON, ``openinference.span.kind``), so any
OTel backend reads them and ``TrackioSpanExporter`` shows them in the Trace.

Rollout-thread cost is bounded: values are made JSON-safe with caps on string length, items,
depth and total size, and nothing is serialised for a span that is not recorded (a sample
dropped by a sampler).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider

from otel_trackio._core.values import MAX_ITEMS, MAX_STRING_CHARS, json_safe, json_text, parse_step
from otel_trackio._engine.open_samples import OPEN_SAMPLES
from otel_trackio._engine.steps import latest_step
from otel_trackio._settings import active_settings

__all__ = ["MAX_STRING_CHARS", "rollout", "traced"]

_SCOPE = "otel_trackio"

_KINDS = {"generation": "LLM", "llm": "LLM", "tool": "TOOL", "span": "CHAIN", "chain": "CHAIN"}

F = TypeVar("F", bound=Callable[..., Any])

# The provider of the innermost rollout(): traced() spans inside it go to the same one.
_provider_var: contextvars.ContextVar[TracerProvider | None] = contextvars.ContextVar(
    "otel_trackio_provider", default=None
)
_tracers: weakref.WeakKeyDictionary[Any, Tracer] = weakref.WeakKeyDictionary()
_tracers_lock = threading.Lock()


def _tracer(provider: TracerProvider | None = None) -> Tracer:
    # The global provider may be a proxy: its tracer follows the real provider once set.
    provider = provider or _provider_var.get() or trace.get_tracer_provider()
    tracer = _tracers.get(provider)
    if tracer is None:
        with _tracers_lock:
            tracer = _tracers.get(provider)
            if tracer is None:
                tracer = provider.get_tracer(_SCOPE)
                _tracers[provider] = tracer
    return tracer


# -- recorded values --------------------------------------------------------------------------


def _attribute_value(value: Any) -> Any:
    """A valid OTel attribute value: primitives and homogeneous primitive lists as is (numpy
    scalars as numbers), anything else as JSON text."""
    if isinstance(value, (str, bool, int, float)):
        return value
    value = json_safe(value)
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and value:
        kinds = {type(v) for v in value}
        if len(kinds) == 1 and kinds <= {str, bool, int, float}:
            return list(value)
    return json_text(value)


# -- rollout() --------------------------------------------------------------------------------


def start_sample(
    name: str, attributes: Mapping[str, Any], provider: TracerProvider | None = None
) -> Span:
    """Start a sample's root span without making it current, registered as an open sample (so
    an exporter that must flush early keeps its identity): for code that holds several samples
    open at once (a batch generated together). End it with :func:`end_sample`."""
    span = _tracer(provider).start_span(name, attributes=attributes)
    if span.is_recording():
        ctx = span.get_span_context()
        OPEN_SAMPLES.register(ctx.trace_id, ctx.span_id, attributes)
    return span


def end_sample(span: Span, exc: BaseException | None = None) -> None:
    """End a sample's root span (an error when ``exc`` is given) and forget it as open."""
    recording = span.is_recording()
    if exc is not None and recording:
        _record_error(span, exc)
    span.end()
    if recording:
        ctx = span.get_span_context()
        OPEN_SAMPLES.unregister(ctx.trace_id, ctx.span_id)


class _Rollout:
    """The context manager :func:`rollout` returns (sync ``with`` and ``async with``)."""

    __slots__ = ("_attributes", "_name", "_provider", "_span", "_tokens")

    def __init__(
        self, name: str, attributes: dict[str, Any], provider: TracerProvider | None
    ) -> None:
        self._name = name
        self._attributes = attributes
        self._provider = provider
        self._span: Span | None = None
        self._tokens: tuple[object, contextvars.Token[Any]] | None = None

    def __enter__(self) -> Span:
        if self._span is not None:
            raise RuntimeError("a rollout() context can be entered only once")
        provider = self._provider or _provider_var.get()
        span = start_sample(self._name, self._attributes, provider)
        self._span = span
        otel_token = otel_context.attach(trace.set_span_in_context(span))
        self._tokens = (otel_token, _provider_var.set(provider))
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        if span is None:
            return
        if self._tokens is not None:
            otel_token, provider_token = self._tokens
            self._tokens = None
            try:
                _provider_var.reset(provider_token)
            except ValueError:  # exited in another context than entered: nothing to restore
                pass
            otel_context.detach(otel_token)  # type: ignore[arg-type]
        end_sample(span, exc)

    async def __aenter__(self) -> Span:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def rollout(
    step: int | None,
    sample_index: int | str,
    *,
    rollout_n: int | None = None,
    validate: bool = False,
    name: str = "rollout",
    tracer_provider: TracerProvider | None = None,
    **attributes: Any,
) -> _Rollout:
    """Start one rollout sample: its root span, current until the block ends.

    ``with rollout(step, i, rollout_n=k): ...`` (or ``async with``) gives a span carrying
    ``step``, ``sample_index``, ``rollout_n``, ``validate`` and ``attributes``; everything
    started inside belongs to this sample and becomes one Trackio Trace. The span is returned,
    so you can add attributes (a reward, ...). An exception marks it as error and propagates.
    ``step=None`` takes the current step: the one ``set_step`` declared (a trainer integration
    such as ``otel_trackio.trl`` declares it for you).

    The sample is its own OTel trace unless a span is current when it starts (your step-level
    span, or a remote parent): then it is that span's child. Both assemble the same way.
    ``tracer_provider`` (default: the global one) is also used by ``@traced`` calls inside.
    While open, the sample is registered so an exporter that must flush early keeps its
    identity. The step and sample attributes are named as the latest exporter or
    ``configure()`` of this process says (``step_attribute``, ``sample_attribute``).
    """
    return _Rollout(
        name,
        sample_attributes(step, sample_index, rollout_n=rollout_n, validate=validate, **attributes),
        tracer_provider,
    )


def sample_attributes(
    step: int | None,
    sample_index: int | str,
    *,
    rollout_n: int | None = None,
    validate: bool = False,
    **attributes: Any,
) -> dict[str, Any]:
    """A sample root's attributes, as :func:`rollout` sets them (raises ``ValueError`` for a
    step that is no whole number, or ``None`` while no step was declared)."""
    if step is None:
        step = latest_step()
        if step is None:
            raise ValueError(
                "rollout(step=None) takes the current step, and none was declared: pass a step, "
                "or call otel_trackio.set_step(step) first"
            )
    if isinstance(step, bool) or parse_step(_attribute_value(step)) is None:
        raise ValueError(
            f"rollout(step={step!r}): a step is a whole number (an int, or a string of one), "
            "the Trackio step the sample is logged at"
        )
    names = active_settings()
    attrs: dict[str, Any] = {names.step_attribute: step, names.sample_attribute: sample_index}
    if rollout_n is not None:
        attrs["rollout_n"] = rollout_n
    attrs["validate"] = bool(validate)
    for key, value in attributes.items():
        if value is not None:
            attrs[key] = value
    return {key: _attribute_value(value) for key, value in attrs.items()}


# -- traced() ---------------------------------------------------------------------------------


def _record_error(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


class _Call:
    """What one decorated function needs at call time, prepared once at decoration."""

    __slots__ = ("drop_first", "kind_attrs", "name", "record_inputs", "record_outputs", "sig")

    def __init__(
        self,
        func: Callable[..., Any],
        name: str | None,
        kind: str | None,
        record_inputs: bool,
        record_outputs: bool,
    ) -> None:
        self.name = name or getattr(func, "__qualname__", None) or repr(func)
        key = (kind or "span").lower()
        if key not in _KINDS:
            raise ValueError(f"traced(kind={kind!r}): use 'generation', 'tool' or 'span'")
        self.kind_attrs: dict[str, Any] = {"openinference.span.kind": _KINDS[key]}
        if _KINDS[key] == "TOOL":
            self.kind_attrs["tool.name"] = self.name
        self.record_inputs = record_inputs
        self.record_outputs = record_outputs
        try:
            self.sig: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            self.sig = None
        params = list(self.sig.parameters) if self.sig is not None else []
        self.drop_first = bool(params) and params[0] in ("self", "cls")

    def start(self) -> Any:
        """A context manager for the call's span (current while the call runs)."""
        return _tracer().start_as_current_span(
            self.name,
            attributes=self.kind_attrs,
            record_exception=False,
            set_status_on_exception=False,
        )

    def inputs(self, span: Span, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self.record_inputs or not span.is_recording():
            return
        try:
            if self.sig is None:
                raise TypeError
            bound = self.sig.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            if self.drop_first:
                arguments.pop(next(iter(self.sig.parameters)), None)
        except TypeError:
            arguments = {"args": list(args), "kwargs": kwargs}  # the call itself will complain
        span.set_attribute("input.value", json_text(arguments))
        span.set_attribute("input.mime_type", "application/json")

    def output(self, span: Span, result: Any) -> None:
        if not self.record_outputs or not span.is_recording():
            return
        span.set_attribute("output.value", json_text(result))
        span.set_attribute("output.mime_type", "application/json")


def _in_dropped_sample() -> bool:
    """True inside a span a sampler dropped: the call then runs bare (no span, nothing recorded).

    Every ParentBased / :class:`~otel_trackio.StepSampler` setup drops such children anyway;
    skipping them keeps a dropped sample's cost to its root span.
    """
    parent = trace.get_current_span().get_span_context()
    return parent.is_valid and not parent.trace_flags.sampled


class _Recording:
    """One call of a traced function: its span (none inside a dropped sample), its arguments
    recorded on entry, an exception as error status on exit, the result by :meth:`done`."""

    __slots__ = ("_call", "_manager", "span")

    def __init__(self, call: _Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._call = call
        self._manager: Any = None
        self.span: Span | None = None
        if not _in_dropped_sample():
            self._manager = call.start()
            self.span = self._manager.__enter__()
            call.inputs(self.span, args, kwargs)

    def done(self, result: Any) -> None:
        """Record the return value (or a generator's first items)."""
        if self.span is not None:
            self._call.output(self.span, result)

    def __enter__(self) -> _Recording:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._manager is None:
            return
        # A consumer stopping a generator early is not an error.
        if exc is not None and not isinstance(exc, GeneratorExit) and self.span is not None:
            if self.span.is_recording():
                _record_error(self.span, exc)
        self._manager.__exit__(exc_type, exc, tb)


def _wrap(func: Callable[..., Any], call: _Call) -> Callable[..., Any]:
    """The wrapper of ``func`` for its kind (coroutine, async generator, generator, plain):
    each runs the call inside one :class:`_Recording`."""
    if inspect.iscoroutinefunction(func):

        async def coroutine(*args: Any, **kwargs: Any) -> Any:
            with _Recording(call, args, kwargs) as recording:
                result = await func(*args, **kwargs)
                recording.done(result)
                return result

        return functools.wraps(func)(coroutine)

    if inspect.isasyncgenfunction(func):

        async def async_generator(*args: Any, **kwargs: Any) -> Any:
            with _Recording(call, args, kwargs) as recording:
                items: list[Any] = []
                async for item in func(*args, **kwargs):
                    if len(items) < MAX_ITEMS:
                        items.append(item)
                    yield item
                recording.done(items)

        return functools.wraps(func)(async_generator)

    if inspect.isgeneratorfunction(func):

        def generator(*args: Any, **kwargs: Any) -> Any:
            with _Recording(call, args, kwargs) as recording:
                items: list[Any] = []
                for item in func(*args, **kwargs):
                    if len(items) < MAX_ITEMS:
                        items.append(item)
                    yield item
                recording.done(items)

        return functools.wraps(func)(generator)

    def plain(*args: Any, **kwargs: Any) -> Any:
        with _Recording(call, args, kwargs) as recording:
            result = func(*args, **kwargs)
            recording.done(result)
            return result

    return functools.wraps(func)(plain)


@overload
def traced(name: F) -> F: ...


@overload
def traced(
    name: str | None = None,
    *,
    kind: str | None = None,
    record_inputs: bool = True,
    record_outputs: bool = True,
) -> Callable[[F], F]: ...


def traced(
    name: str | Callable[..., Any] | None = None,
    *,
    kind: str | None = None,
    record_inputs: bool = True,
    record_outputs: bool = True,
) -> Any:
    """Record each call of a function (sync or async, plain or method) as a span.

    ``@traced``, ``@traced("name")`` or ``@traced(kind="tool")``. ``kind`` is ``"generation"``
    (a model call), ``"tool"`` or ``"span"`` (default), written as ``openinference.span.kind``
    (LLM/TOOL/CHAIN). The bound arguments with their defaults (without ``self``/``cls``) go to
    ``input.value`` and the return value to ``output.value``, as bounded JSON. An exception sets
    error status and an ``exception`` event and is re-raised unchanged. Generators are traced
    over their whole iteration, with the first items as output. Inside :func:`rollout` the span
    belongs to that sample.
    """
    if (kind or "span").lower() not in _KINDS:
        raise ValueError(f"traced(kind={kind!r}): use 'generation', 'tool' or 'span'")
    if callable(name) and not isinstance(name, str):
        return _decorate(name, None, kind, record_inputs, record_outputs)

    def decorator(func: F) -> F:
        decorated: F = _decorate(func, name, kind, record_inputs, record_outputs)
        return decorated

    return decorator


def _decorate(
    func: Any, name: str | None, kind: str | None, record_inputs: bool, record_outputs: bool
) -> Any:
    if isinstance(func, (classmethod, staticmethod)):
        inner = _decorate(func.__func__, name, kind, record_inputs, record_outputs)
        return type(func)(inner)
    call = _Call(func, name, kind, record_inputs, record_outputs)
    return _wrap(func, call)
