"""``TrackioSpanExporter``: OTel spans in, one Trackio Trace per rollout sample out.

The data path, in one line: ``export()`` → records → :class:`SampleAssembler` (complete samples)
→ :func:`sample_to_trace` → group by step → one ``run.log({key: [Trace, ...]}, step=s)`` per step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from . import _steps
from ._assembly import Sample, SampleAssembler
from ._convert import ConvertOptions, TraceDict, parse_step, sample_to_trace, storable
from ._records import SpanRecord, record_from_readable_span
from ._sink import TrackioSink
from .conventions import DEFAULT_TOKEN_ID_ATTRIBUTES

_logger = logging.getLogger("otel_trackio")


@dataclass(slots=True)
class ExportStats:
    """Counters of what an exporter did, for summaries, tests and the fault tally."""

    spans_received: int = 0
    samples_logged: int = 0
    partial_samples: int = 0
    log_calls: int = 0
    failed_exports: int = 0
    samples_lost: int = 0
    conversion_errors: int = 0
    evicted_samples: int = 0


class TrackioSpanExporter(SpanExporter):
    """An OTel ``SpanExporter`` that logs each rollout sample as one ``trackio.Trace``.

    Use it behind a ``BatchSpanProcessor``. Spans are grouped into samples (the subtree under the
    outermost span carrying ``sample_index``; a trace without one is one sample), converted into
    Trace dicts with chat ``messages`` and a ``spans`` tree, and logged under ``key`` at the
    sample's ``step`` attribute (else the latest step seen, else 0; never Trackio's auto step).

    Args:
        project, name: the Trackio project and run to log into when no run is given or active.
        run: a ``trackio.Run`` to log into; it is never finished by the exporter.
        key: the Trackio metric key holding the traces.
        step_attribute, sample_attribute: span attribute names for the step and sample index.
        sample_ttl_seconds: a trace idle this long is logged as partial.
        max_buffered_spans: past this many waiting spans the oldest samples go out as partial.
        max_value_chars: longer strings are cut with a visible marker.
        token_decoder: turns token id lists on spans into text (called on the export thread).
        token_id_attributes: which span attributes hold token ids and the side each fills
            (``"input"``/``"output"``); default ``prompt_ids`` → input, ``response_ids`` and
            ``token_ids`` → output.
        **trackio_init_kwargs: passed to ``trackio.init`` (``server_url``, ``resume``, ...).
    """

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        *,
        run: Any = None,
        key: str = "rollout/traces",
        step_attribute: str = "step",
        sample_attribute: str = "sample_index",
        sample_ttl_seconds: float = 300.0,
        max_buffered_spans: int = 100_000,
        max_value_chars: int = 64 * 1024,
        token_decoder: Callable[[Sequence[int]], str] | None = None,
        token_id_attributes: Mapping[str, str] | None = None,
        **trackio_init_kwargs: Any,
    ) -> None:
        self.key = key
        self._sink = TrackioSink(project, name, run=run, **trackio_init_kwargs)
        self._assembler = SampleAssembler(
            step_attribute=step_attribute,
            sample_attribute=sample_attribute,
            ttl_seconds=sample_ttl_seconds,
            max_spans=max_buffered_spans,
        )
        self._options = ConvertOptions(
            step_attribute=step_attribute,
            sample_attribute=sample_attribute,
            max_value_chars=max_value_chars,
            token_decoder=token_decoder,
            token_id_attributes=dict(
                DEFAULT_TOKEN_ID_ATTRIBUTES if token_id_attributes is None else token_id_attributes
            ),
        )
        self._lock = threading.Lock()
        self._shutdown = False
        self._latest_step: int | None = None
        self._warned: set[str] = set()
        self.stats = ExportStats()

    # -- public API ---------------------------------------------------------------------------

    @property
    def run(self) -> Any:
        """The ``trackio.Run`` this exporter logs into."""
        return self._sink.run

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Buffer the spans and log every sample they complete. Never raises."""
        try:
            records = [record_from_readable_span(s) for s in spans]
        except Exception as exc:  # noqa: BLE001 - export() must never raise
            self._warn("read", f"could not read {len(spans)} spans: {exc!r}")
            self.stats.failed_exports += 1
            return SpanExportResult.FAILURE
        return self.export_records(records)

    def export_records(
        self, records: Iterable[SpanRecord], timeout_seconds: float = 30.0
    ) -> SpanExportResult:
        """Like ``export`` for already-decoded span records (the OTLP receiver's entry point)."""
        if self._shutdown:
            return SpanExportResult.FAILURE
        if not self._lock.acquire(timeout=timeout_seconds):
            records = list(records)
            self.stats.failed_exports += 1
            self._warn("busy", f"exporter busy for {timeout_seconds}s; {len(records)} spans lost")
            return SpanExportResult.FAILURE
        try:
            if self._shutdown:
                return SpanExportResult.FAILURE
            records = list(records)
            self.stats.spans_received += len(records)
            samples = self._assembler.add(records)
            samples.extend(self._assembler.expire())
            logged_before = self.stats.samples_logged
            result = self._log_samples(samples)
            logged = self.stats.samples_logged - logged_before
            # Write them now (this is the SDK's export thread): an export that returned SUCCESS
            # survives a crash, and a disk that is full or read-only shows up as FAILURE.
            if logged and not self._flush_storage(timeout_seconds * 1000, logged):
                self.stats.failed_exports += 1
                return SpanExportResult.FAILURE
            return result
        except Exception as exc:  # noqa: BLE001 - export() must never raise
            self.stats.failed_exports += 1
            self._warn("export", f"export failed: {exc!r}")
            return SpanExportResult.FAILURE
        finally:
            self._lock.release()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Log every open sample now, as partial. Returns False when that failed or timed out."""
        if self._shutdown:
            return False
        if not self._lock.acquire(timeout=max(0.0, timeout_millis / 1000)):
            return False
        try:
            logged = self._flush_open_samples() is SpanExportResult.SUCCESS
            # Durable too: Trackio's sender thread would write only within the next 0.5 s.
            return self._flush_storage(timeout_millis) and logged
        finally:
            self._lock.release()

    def shutdown(self, timeout_millis: int = 30000, **kwargs: Any) -> None:
        """Log open samples as partial, then finish the run if this exporter started it.

        Idempotent; waits at most ``timeout_millis`` for an export in progress.
        """
        acquired = self._lock.acquire(timeout=max(0.0, timeout_millis / 1000))
        try:
            if self._shutdown:
                return
            self._shutdown = True
            if acquired:
                self._flush_open_samples()
                self._flush_storage(timeout_millis)
            else:
                self._warn(
                    "shutdown",
                    "shutdown timed out waiting for an export; "
                    f"{self._assembler.buffered_spans} open spans lost",
                )
        finally:
            if acquired:
                self._lock.release()
        self._sink.release()

    # -- the pipeline -------------------------------------------------------------------------

    def _flush_storage(self, timeout_millis: float, unwritten: int | str = "all unflushed") -> bool:
        """Make what was logged durable in Trackio's storage; warn when Trackio failed to write.

        ``unwritten``: how many samples the failed write may have cost, for the warning.
        """
        try:
            ok = self._sink.flush(max(0.0, timeout_millis / 1000))
        except Exception as exc:  # noqa: BLE001 - flushing must not crash the user's program
            self._warn("storage", f"writing to Trackio storage failed: {exc!r}")
            return False
        if not ok:
            failures = ", ".join(sorted(self._sink.last_failures)) or "timed out"
            self._warn(
                "storage",
                f"Trackio could not write to its storage ({failures}); up to {unwritten} samples "
                f"lost ({self.stats.samples_logged} logged by this exporter so far)",
            )
        return ok

    def _flush_open_samples(self) -> SpanExportResult:
        try:
            samples = self._assembler.flush()
            return self._log_samples(samples)
        except Exception as exc:  # noqa: BLE001
            self._warn("flush", f"flushing open samples failed: {exc!r}")
            return SpanExportResult.FAILURE

    def _log_samples(self, samples: list[Sample]) -> SpanExportResult:
        if not samples:
            return SpanExportResult.SUCCESS
        by_step: dict[int, list[TraceDict]] = {}
        evicted = 0
        for sample in samples:
            step = self._step_of(sample)
            by_step.setdefault(step, []).append(self._convert(sample, step))
            # Hand the GIL over between samples: a rollout thread waking from a model call
            # would otherwise wait up to the interpreter's 5 ms switch interval for it.
            time.sleep(0)
            if sample.partial:
                self.stats.partial_samples += 1
                if sample.reason == "capacity":
                    evicted += 1
        if evicted:
            self.stats.evicted_samples += evicted
            self._warn(
                "capacity",
                f"span buffer full ({self._assembler.max_spans} spans): {evicted} open samples "
                f"logged early as partial ({self.stats.evicted_samples} so far)",
            )
        result = SpanExportResult.SUCCESS
        for step, traces in by_step.items():
            try:
                self._sink.log_traces(self.key, traces, step)
            except Exception as exc:  # noqa: BLE001
                self.stats.samples_lost += len(traces)
                self.stats.failed_exports += 1
                self._warn(
                    "log",
                    f"trackio log at step {step} failed: {exc!r}; {len(traces)} samples lost "
                    f"({self.stats.samples_lost} so far)",
                )
                result = SpanExportResult.FAILURE
                continue
            self.stats.log_calls += 1
            self.stats.samples_logged += len(traces)
        return result

    def _step_of(self, sample: Sample) -> int:
        step = parse_step(sample.identity.get(self._options.step_attribute))
        if step is None:
            return self._latest_step if self._latest_step is not None else 0
        if self._latest_step is None or step > self._latest_step:
            self._latest_step = step
            _steps.note_step(step)
        return step

    def _convert(self, sample: Sample, step: int) -> TraceDict:
        try:
            return sample_to_trace(sample, step, self._options)
        except Exception as exc:  # noqa: BLE001 - a bad span must not cost the sample
            self.stats.conversion_errors += 1
            self._warn("convert", f"could not convert a sample fully, logged it bare: {exc!r}")
            return _bare_trace(sample, step, repr(exc))

    def _warn(self, kind: str, message: str) -> None:
        if kind in self._warned:
            _logger.debug("otel-trackio: %s", message)
            return
        self._warned.add(kind)
        _logger.warning("otel-trackio: %s", message)


def _bare_trace(sample: Sample, step: int, error: str) -> TraceDict:
    """The least a sample can be logged as when full conversion failed: its span names and ids."""
    return storable(
        {
            "messages": [],
            "spans": [
                {
                    "id": f"{s.span_id:016x}",
                    "parent_id": None,
                    "name": str(s.name),
                    "kind": "span",
                }
                for s in sample.spans
            ],
            "metadata": {
                "step": step,
                "trace_id": f"{sample.spans[0].trace_id:032x}" if sample.spans else None,
                "partial": sample.partial,
                "conversion_error": error,
            },
        }
    )
