"""The on-disk queue: append-only segment files of framed entries, a checkpoint, a size bound.

Layout of a spool directory::

    000000000001.seg   entries: header (magic, kind, length, crc32, append time) + payload
    000000000002.seg   a producer starts a new segment when it starts and past SEGMENT_BYTES
    checkpoint.json    where the drainer is (see :class:`Checkpoint`), written atomically
    producer.lock      flock held by the one producer process appending here
    drain.lock         flock held by the one drainer reading here

One producer process (any number of its threads) appends; one drainer reads. An append is one
``write`` to the OS: it survives the producer process being killed (not a power loss). A producer
only creates segment N+1 once it has finished writing segment N, so a drainer that finds N+1 knows
N is complete; a torn entry at the end of a finished segment (a producer killed mid-write) is
skipped and counted. A segment is deleted once every span in it is durable in Trackio.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

HEADER = struct.Struct("<2sBBIIQ")  # magic, kind, flags, payload length, crc32, append time ns
MAGIC = b"OT"
SEGMENT_BYTES = 8 * 1024 * 1024
_SUFFIX = ".seg"


class SpoolFull(Exception):
    """The spool is at its size bound: the entry was not appended."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A place in the spool: segment number and byte offset in it."""

    seq: int
    offset: int


@dataclass(frozen=True, slots=True)
class Entry:
    """One framed entry read back: where it starts and ends, its kind, payload and append time."""

    start: Position
    end: Position
    kind: int
    payload: bytes
    appended_ns: int


@dataclass(slots=True)
class Checkpoint:
    """Where the drainer is.

    ``oldest``: replay starts here after a restart (the oldest entry with a span that is only in
    the drainer's memory). ``processed``: every entry before it was handed to the pipeline.
    ``inflight``: a drain cycle in progress up to here — after a crash, samples completed while
    replaying entries before it may already be in Trackio and are checked first. ``flushed``: the
    last flush request served. ``stats``: the drainer's counters, for the producer to show.
    """

    oldest: Position = Position(0, 0)
    processed: Position = Position(0, 0)
    inflight: Position | None = None
    flushed: int = 0
    stats: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The checkpoint as a JSON document (positions as ``[seq, offset]``)."""
        return json.dumps(
            {
                "oldest": [self.oldest.seq, self.oldest.offset],
                "processed": [self.processed.seq, self.processed.offset],
                "inflight": None
                if self.inflight is None
                else [self.inflight.seq, self.inflight.offset],
                "flushed": self.flushed,
                "stats": self.stats,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        """A checkpoint from :meth:`to_json`'s text."""
        data = json.loads(text)
        inflight = data.get("inflight")
        return cls(
            oldest=Position(*data["oldest"]),
            processed=Position(*data["processed"]),
            inflight=None if inflight is None else Position(*inflight),
            flushed=int(data.get("flushed", 0)),
            stats=dict(data.get("stats") or {}),
        )


def segment_path(spool: Path, seq: int) -> Path:
    """The file of segment ``seq``."""
    return spool / f"{seq:012d}{_SUFFIX}"


def segments(spool: Path) -> list[int]:
    """The segment numbers present, in order."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(spool):
            if entry.name.endswith(_SUFFIX) and entry.name[: -len(_SUFFIX)].isdigit():
                out.append(int(entry.name[: -len(_SUFFIX)]))
    return sorted(out)


def bytes_from(spool: Path, position: Position) -> int:
    """Bytes of the entries from ``position`` on (``Position(0, 0)``: all the segments)."""
    total = 0
    for seq in segments(spool):
        if seq < position.seq:
            continue
        with contextlib.suppress(FileNotFoundError):
            size = segment_path(spool, seq).stat().st_size
            total += size - (position.offset if seq == position.seq else 0)
    return max(0, total)


class Lock:
    """An exclusive ``flock`` on a file of the spool, held until :meth:`release`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO | None = None

    def acquire(self) -> bool:
        """Take the lock without waiting; False when another process holds it."""
        handle = open(self.path, "ab")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._file = handle
        return True

    def release(self) -> None:
        """Let the lock go (idempotent)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._file is not None


def is_locked(path: Path) -> bool:
    """True when some process holds the ``flock`` on ``path``."""
    if not path.exists():
        return False
    probe = Lock(path)
    if probe.acquire():
        probe.release()
        return False
    return True


class Producer:
    """Appends entries to a spool; thread-safe. One producer process per spool directory.

    Args:
        path: the spool directory (created if missing).
        max_bytes: the bound: an append that would take the entries still needed (from the
            drainer's checkpoint on) past it raises :class:`SpoolFull`; the drainer moving on
            makes room again. Segments are at most an eighth of it, so the disk holds at most
            about the bound plus one segment.
    """

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._owner = Lock(self.path / "producer.lock")
        if not self._owner.acquire():
            raise RuntimeError(f"another process is appending to the spool {self.path}")
        existing = segments(self.path)
        # Never append to an old segment: it may end in an entry torn by a killed producer.
        self._seq = (existing[-1] + 1) if existing else 1
        self._file = open(segment_path(self.path, self._seq), "ab", buffering=0)
        self._in_segment = 0
        self._segment_bytes = min(SEGMENT_BYTES, max(64 * 1024, max_bytes // 8))
        self._on_disk = self._needed_bytes()
        self._measured = time.monotonic()
        self.appended_entries = 0
        self.appended_bytes = 0
        self.closed = False

    def append(self, kind: int, payload: bytes) -> None:
        """Frame and append one entry (one write to the OS). Raises :class:`SpoolFull`."""
        header = HEADER.pack(MAGIC, kind, 0, len(payload), zlib.crc32(payload), time.time_ns())
        size = len(header) + len(payload)
        with self._lock:
            if self.closed:
                raise RuntimeError("the spool producer is closed")
            if self._on_disk + size > self.max_bytes:
                self._on_disk = self._needed_bytes()  # the drainer may have made room
                self._measured = time.monotonic()
                if self._on_disk + size > self.max_bytes:
                    raise SpoolFull(
                        f"spool {self.path} holds {self._on_disk} bytes (bound {self.max_bytes})"
                    )
            _write_all(self._file, header, payload)
            self._in_segment += size
            self._on_disk += size
            self.appended_entries += 1
            self.appended_bytes += size
            if self._in_segment >= self._segment_bytes:
                self._rotate()
            elif time.monotonic() - self._measured > 1.0:
                self._on_disk = self._needed_bytes()
                self._measured = time.monotonic()

    def _needed_bytes(self) -> int:
        """Bytes of the entries the drainer still needs (from its checkpoint's oldest on)."""
        checkpoint = load_checkpoint(self.path)
        return bytes_from(self.path, checkpoint.oldest if checkpoint else Position(0, 0))

    def _rotate(self) -> None:
        self._file.close()
        self._seq += 1
        self._file = open(segment_path(self.path, self._seq), "ab", buffering=0)
        self._in_segment = 0

    def close(self) -> None:
        """Stop appending and release the producer lock (idempotent)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._file.close()
        self._owner.release()


def _write_all(handle: BinaryIO, header: bytes, payload: bytes) -> None:
    fd = handle.fileno()
    buffers = [memoryview(header), memoryview(payload)]
    while buffers:
        written = os.writev(fd, buffers)
        while buffers and written >= len(buffers[0]):
            written -= len(buffers[0])
            buffers.pop(0)
        if buffers and written:
            buffers[0] = buffers[0][written:]


class Reader:
    """Reads entries of a spool in order, from a position; skips (and counts) torn entries."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.torn_entries = 0
        self.torn_tail: Position | None = None

    def first_position(self) -> Position:
        """The start of the oldest segment present."""
        present = segments(self.path)
        return Position(present[0], 0) if present else Position(1, 0)

    def read(self, start: Position, max_bytes: int, *, finished: bool = False) -> list[Entry]:
        """Complete entries from ``start`` on, up to about ``max_bytes`` of payload.

        ``finished``: the producer is gone, so an incomplete entry at the very end is torn (it
        is counted, and :meth:`skip_torn_tail` moves past it) rather than still being written.
        """
        out: list[Entry] = []
        position: Position | None = self._present(start)
        taken = 0
        finished_segment = False  # the segment at ``position`` is known to be complete
        while position is not None and taken < max_bytes:
            entries, position, remainder = self._read_segment(position, max_bytes - taken)
            out.extend(entries)
            taken += sum(len(e.payload) for e in entries)
            if taken >= max_bytes:
                break
            if entries:
                finished_segment = False
            following = self._next_segment(position.seq)
            if following is None:
                if finished and remainder:
                    self.torn_tail = position  # the producer died mid-append
                break  # the producer may still be writing this segment: wait for more
            if remainder and not finished_segment:
                # A later segment exists, so the producer finished this one: read it again.
                finished_segment = True
                continue
            if remainder:
                self.torn_entries += 1  # a finished segment ending in a torn or corrupt entry
            position, finished_segment = following, False
        return out

    def _read_segment(self, position: Position, budget: int) -> tuple[list[Entry], Position, int]:
        """(complete entries from ``position`` in its segment, where they end, bytes left)."""
        out: list[Entry] = []
        try:
            handle = open(segment_path(self.path, position.seq), "rb")
        except FileNotFoundError:
            return out, position, 0
        with handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(position.offset)
            taken = 0
            while taken < budget:
                header = handle.read(HEADER.size)
                if len(header) < HEADER.size:
                    break
                magic, kind, _, length, crc, appended = HEADER.unpack(header)
                if magic != MAGIC:
                    break
                payload = handle.read(length)
                if len(payload) != length or zlib.crc32(payload) != crc:
                    break
                end = Position(position.seq, position.offset + HEADER.size + length)
                out.append(Entry(position, end, kind, payload, appended))
                taken += length
                position = end
        return out, position, max(0, size - position.offset)

    def _present(self, position: Position) -> Position | None:
        """``position``, or the start of the next segment present when its own is gone."""
        present = segments(self.path)
        if position.seq in present:
            return position
        later = [seq for seq in present if seq > position.seq]
        return Position(later[0], 0) if later else None

    def _next_segment(self, seq: int) -> Position | None:
        later = [other for other in segments(self.path) if other > seq]
        return Position(later[0], 0) if later else None

    def backlog(self, position: Position) -> tuple[int, int | None]:
        """(bytes of entries from ``position`` on, append time in ns of the entry there)."""
        waiting = bytes_from(self.path, position)
        first = self._present(position)
        appended = None
        if first is not None:
            with contextlib.suppress(FileNotFoundError, struct.error):
                with open(segment_path(self.path, first.seq), "rb") as handle:
                    handle.seek(first.offset)
                    header = handle.read(HEADER.size)
                    if len(header) == HEADER.size:
                        appended = HEADER.unpack(header)[5]
        return waiting, appended


def load_checkpoint(path: Path) -> Checkpoint | None:
    """The spool's checkpoint, or None before the first one."""
    try:
        return Checkpoint.from_json((Path(path) / "checkpoint.json").read_text())
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Write the checkpoint atomically (a reader sees the old or the new one, never half)."""
    target = Path(path) / "checkpoint.json"
    temporary = target.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(checkpoint.to_json())
    os.replace(temporary, target)


def delete_before(path: Path, seq: int) -> None:
    """Delete the segments numbered below ``seq`` (their spans are all durable in Trackio)."""
    for old in segments(path):
        if old < seq:
            with contextlib.suppress(FileNotFoundError):
                segment_path(path, old).unlink()


def holds_segments(path: Path | str) -> bool:
    """True when the spool at ``path`` still has segments: what a spool left by an unclean
    stop (a crash, SIGKILL, a drain timeout) has, and a cleanly stopped one never has."""
    folder = Path(path)
    return folder.is_dir() and any(folder.glob(f"*{_SUFFIX}"))
