"""What each run's metric path logged, kept beside the spool that feeds it.

The spans a restarted drainer meets again are looked up in Trackio's storage (span ids are in
every stored Trace). Metric values carry no such identity there: a delta point a client sends
again after a receiver restart (its answer lost), or an entry replayed after a crash, would be
added twice, and a counter would start its increments from zero. So after each metrics entry it
logs, the drainer writes what the run's metric exporter remembers
(:class:`~otel_trackio._core.metric_convert.ConverterMemory`) to ``metrics-<hash>.memory`` in the
spool (atomically: the old file or the new one, never half), and the first time a drainer gives an
entry to a run's exporter it recalls the file. What is left: a crash between Trackio's write
and this file's, a few microseconds, may still log that one entry twice.

The file is ``MAGIC``, a CRC-32 and the memory as data (:mod:`~otel_trackio._codec.packing`);
one that does not check is warned about and ignored (a duplicate beats a crash). A clean stop
removes it with the spool.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
import zlib
from pathlib import Path

from otel_trackio._codec.packing import Classes, UnreadablePayload, pack, unpack
from otel_trackio._core.metric_convert import ConverterMemory
from otel_trackio._engine.metrics import MetricPath
from otel_trackio._spool.segments import write_atomically

MEMORY_SUFFIX = ".memory"
_MEMORY_CLASSES = Classes.of(ConverterMemory)
_MAGIC = b"OTMM2"

_logger = logging.getLogger("otel_trackio")


def memory_path(spool: Path, run_key: str) -> Path:
    """The file holding the metric memory of the run ``run_key`` (project/run) in ``spool``."""
    digest = hashlib.sha256(run_key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return Path(spool) / f"metrics-{digest}{MEMORY_SUFFIX}"


def save_memory(path: Path, memory: ConverterMemory, *, fsync: bool) -> None:
    """Write ``memory`` atomically; ``fsync``: on the disk before it replaces the old file."""
    payload = pack(memory, _MEMORY_CLASSES)
    write_atomically(path, _MAGIC + zlib.crc32(payload).to_bytes(4, "big") + payload, fsync=fsync)


def load_memory(path: Path) -> ConverterMemory | None:
    """The memory saved at ``path``; None when there is none, or it does not check (warned)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _logger.warning("otel-trackio: cannot read the metric memory %s: %r", path, exc)
        return None
    head = len(_MAGIC) + 4
    payload = data[head:]
    if data[: len(_MAGIC)] != _MAGIC or zlib.crc32(payload) != int.from_bytes(
        data[len(_MAGIC) : head], "big"
    ):
        _logger.warning("otel-trackio: the metric memory %s is damaged: ignored", path)
        return None
    try:
        memory = unpack(payload, _MEMORY_CLASSES)
    except UnreadablePayload as exc:  # a damaged file must not stop the drain
        _logger.warning("otel-trackio: the metric memory %s is unreadable: %r", path, exc)
        return None
    return memory if isinstance(memory, ConverterMemory) else None


class MetricMemory:
    """The drainer's side: recall a run's memory before its exporter's first entry, save it
    after each entry. A file that cannot be written is warned about once per run and counted
    (:attr:`failed_saves`): the data is logged all the same, only a resend could be doubled."""

    def __init__(self, spool: Path, *, fsync: bool) -> None:
        self._spool = Path(spool)
        self._fsync = fsync
        self._recalled: weakref.WeakSet[MetricPath] = weakref.WeakSet()
        self._warned: set[str] = set()
        self.failed_saves = 0

    def recall(self, exporter: MetricPath, run_key: str) -> None:
        """Before ``exporter`` logs its first entry from this spool: what was logged before."""
        if exporter in self._recalled:
            return
        self._recalled.add(exporter)
        memory = load_memory(memory_path(self._spool, run_key))
        if memory is not None:
            exporter.recall(memory)

    def save(self, exporter: MetricPath, run_key: str) -> None:
        """After ``exporter`` logged an entry: what it remembers now."""
        try:
            save_memory(memory_path(self._spool, run_key), exporter.memory(), fsync=self._fsync)
        except OSError as exc:
            self.failed_saves += 1
            if run_key not in self._warned:
                self._warned.add(run_key)
                _logger.warning(
                    "otel-trackio: cannot keep the metric memory of %s in %s (%r): a metrics "
                    "request sent again after a restart may be counted twice",
                    run_key,
                    self._spool,
                    exc,
                )
