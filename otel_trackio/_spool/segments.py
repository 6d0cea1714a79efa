"""The on-disk queue: append-only segment files of framed entries, a checkpoint, a size bound.

Layout of a spool directory::

    000000000001.seg   entries: header (magic, kind, length, crc32, append time) + payload
    000000000002.seg   a producer starts a new segment when it starts and past SEGMENT_BYTES
    checkpoint.json    where the drainer is (see :class:`Checkpoint`), written atomically
    producer.lock      flock held by the one producer process appending here
    drain.lock         flock held by the one drainer reading here

One producer process (any number of its threads) appends; one drainer reads. An append (one
entry, or the entries of one request as a unit) is one ``write`` to the OS and all-or-nothing: a
write that fails half-way (disk full, file size limit) is cut back to the last whole entry before
the error reaches the caller, so no acknowledged entry ever follows torn bytes. It survives the
producer process being killed; a power loss is survived per the :data:`FSYNC_POLICIES`. A
producer only creates segment N+1 once it has finished writing segment N, so a drainer that finds
N+1 knows N is complete; a torn entry at the end of a finished segment (a producer killed
mid-write) is skipped and counted once. A segment is deleted once every span in it is durable in
Trackio.
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

from otel_trackio._settings import FSYNC_POLICIES

HEADER = struct.Struct("<2sBBIIQ")  # magic, kind, flags, payload length, crc32, append time ns
MAGIC = b"OT"
#: header flag: the next entry belongs to the same append (one unit: read all of it or none)
CONTINUED = 0x01
SEGMENT_BYTES = 8 * 1024 * 1024
_SUFFIX = ".seg"
_CRC_CHUNK = 4096
"""Bytes per ``zlib.crc32`` call on the append path: above 5 KiB the call lets go of the GIL,
and a thread that lets go of it waits for it again behind a busy event loop (see
:func:`crc32_holding_the_gil`)."""


def crc32_holding_the_gil(data: bytes) -> int:
    """``zlib.crc32(data)``, computed in chunks small enough that the GIL is never let go.

    The producer appends from the rollout's export thread. Each time that thread lets go of the
    GIL (a system call, a large ``crc32``), getting it back means asking the event loop's
    thread to hand it over: the loop stops for a thread switch each time. Chunked, the checksum
    costs a few more microseconds per entry and no hand-over.
    """
    if len(data) <= _CRC_CHUNK:
        return zlib.crc32(data)
    view = memoryview(data)
    crc = 0
    for start in range(0, len(view), _CRC_CHUNK):
        crc = zlib.crc32(view[start : start + _CRC_CHUNK], crc)
    return crc


class SpoolFull(Exception):
    """The spool is at its size bound: the entry was not appended. ``never_fits``: it is larger
    than the bound itself (waiting for room is no use)."""

    def __init__(self, message: str, *, never_fits: bool = False) -> None:
        super().__init__(message)
        self.never_fits = never_fits


class SpoolInUse(RuntimeError):
    """Another process appends to (or drains) this spool: one producer and one drainer each."""


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
    ``closed``: the producer's close entry was handed over (a drainer taking over after that
    knows the producer is done; it will not see the entry again).
    """

    oldest: Position = Position(0, 0)
    processed: Position = Position(0, 0)
    inflight: Position | None = None
    flushed: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    closed: bool = False

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
                "closed": self.closed,
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
            closed=bool(data.get("closed", False)),
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
        handle = open(self.path, "ab", opener=private)
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

    def __init__(self, path: Path, max_bytes: int, *, fsync: str = "cycle") -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy {fsync!r}: expected one of {FSYNC_POLICIES}")
        self.fsync = fsync
        self.path = Path(path)
        make_private_folder(self.path)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._owner = Lock(self.path / "producer.lock")
        if not self._owner.acquire():
            raise SpoolInUse(f"another process is appending to the spool {self.path}")
        existing = segments(self.path)
        # Never append to an old segment: it may end in an entry torn by a killed producer.
        self._seq = (existing[-1] + 1) if existing else 1
        self._file = open(segment_path(self.path, self._seq), "ab", buffering=0, opener=private)
        self._in_segment = 0
        self._segment_bytes = min(SEGMENT_BYTES, max(64 * 1024, max_bytes // 8))
        # What the spool holds, as of the last look, plus what was appended since: never less
        # than what it holds (the drainer only frees). Looked at again only at the bound, so an
        # append makes no system call but its write (see ``crc32_holding_the_gil``).
        self._on_disk = self._needed_bytes()
        self.appended_entries = 0
        self.appended_bytes = 0
        self.failed_appends = 0
        self.closed = False

    def append(self, kind: int, payload: bytes) -> None:
        """Frame and append one entry (one write to the OS). Raises :class:`SpoolFull`, or
        the ``OSError`` of a failed write (nothing of the entry is left in the spool)."""
        self.append_all([(kind, payload)])

    def append_all(self, entries: list[tuple[int, bytes]]) -> None:
        """Append several entries as one unit: all of them, or (on :class:`SpoolFull` or an
        ``OSError``) none of them. One request's entries for several routes go in this way, so
        a refused request never leaves part of itself behind to be stored twice on retry. Every
        entry but the unit's last is flagged :data:`CONTINUED`, so a reader never takes the
        first entries of a unit whose write failed half-way before it was cut back."""
        now = time.time_ns()
        buffers: list[bytes] = []
        last = len(entries) - 1
        for index, (kind, payload) in enumerate(entries):
            flags = CONTINUED if index < last else 0  # a reader takes the unit whole or not at all
            buffers.append(
                HEADER.pack(MAGIC, kind, flags, len(payload), crc32_holding_the_gil(payload), now)
            )
            buffers.append(payload)
        size = sum(len(b) for b in buffers)
        with self._lock:
            if self.closed:
                raise RuntimeError("the spool producer is closed")
            if self._on_disk + size > self.max_bytes:
                self._on_disk = self._needed_bytes()  # the drainer may have made room
                if self._on_disk + size > self.max_bytes:
                    raise SpoolFull(
                        f"spool {self.path} holds {self._on_disk} bytes and {size} more do not "
                        f"fit its bound of {self.max_bytes} (spool_max_mb)",
                        never_fits=size > self.max_bytes,
                    )
            try:
                _write_all(self._file, *buffers)
                if self.fsync == "request":
                    os.fsync(self._file.fileno())
            except OSError:
                self.failed_appends += 1
                self._undo_partial_write()
                raise
            self._in_segment += size
            self._on_disk += size
            self.appended_entries += len(entries)
            self.appended_bytes += size
            if self._in_segment >= self._segment_bytes:
                # The entries are in: a segment that cannot be started now (a full or
                # read-only folder) is tried again after the next append.
                with contextlib.suppress(OSError):
                    self._rotate()

    def _undo_partial_write(self) -> None:
        """After a failed write: cut the segment back to its last whole entry; if that fails
        too, leave the segment (its torn end is skipped once it is finished) for a new one."""
        try:
            os.ftruncate(self._file.fileno(), self._in_segment)
            return
        except OSError:
            pass
        with contextlib.suppress(OSError):
            self._rotate()

    def _needed_bytes(self) -> int:
        """Bytes of the entries the drainer still needs (from its checkpoint's oldest on)."""
        checkpoint = load_checkpoint(self.path)
        return bytes_from(self.path, checkpoint.oldest if checkpoint else Position(0, 0))

    def _rotate(self) -> None:
        """Start the next segment (open it first: when that fails, the current one goes on)."""
        following = open(segment_path(self.path, self._seq + 1), "ab", buffering=0, opener=private)
        if self.fsync != "never":
            with contextlib.suppress(OSError):
                os.fsync(self._file.fileno())
        self._file.close()
        self._seq += 1
        self._file = following
        self._in_segment = 0

    def close(self) -> None:
        """Stop appending and release the producer lock (idempotent)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._file.close()
        self._owner.release()


def _write_all(handle: BinaryIO, *data: bytes) -> None:
    """Write every byte of ``data`` to ``handle`` (the spool's one write; raises OSError)."""
    fd = handle.fileno()
    buffers = [memoryview(b) for b in data]
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
        self.torn_end: Position | None = None
        # Where the last read got to: after its last entry, or past a torn end it skipped.
        self.reached = Position(0, 0)

    def first_position(self) -> Position:
        """The start of the oldest segment present."""
        present = segments(self.path)
        return Position(present[0], 0) if present else Position(1, 0)

    def read(self, start: Position, max_bytes: int, *, finished: bool = False) -> list[Entry]:
        """Complete entries from ``start`` on, up to about ``max_bytes`` of payload.

        ``finished``: the producer is gone, so an incomplete entry at the very end is torn: it
        is recorded in :attr:`torn_tail` (where it starts, and :attr:`torn_end` where the
        segment ends), for the drainer to skip once and persist, rather than waited for.
        """
        out: list[Entry] = []
        position: Position | None = self._present(start)
        self.reached = start
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
                    self.torn_end = Position(position.seq, position.offset + remainder)
                break  # the producer may still be writing this segment: wait for more
            if remainder and not finished_segment:
                # A later segment exists, so the producer finished this one: read it again.
                finished_segment = True
                continue
            if remainder:
                self.torn_entries += 1  # a finished segment ending in a torn or corrupt entry
            position, finished_segment = following, False
        if position is not None:
            self.reached = max(start, position)
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
            unit: list[Entry] = []  # entries of an append whose last entry is not read yet
            cursor = position
            while taken < budget or unit:
                header = handle.read(HEADER.size)
                if len(header) < HEADER.size:
                    break
                magic, kind, flags, length, crc, appended = HEADER.unpack(header)
                if magic != MAGIC:
                    break
                payload = handle.read(length)
                if len(payload) != length or zlib.crc32(payload) != crc:
                    break
                end = Position(cursor.seq, cursor.offset + HEADER.size + length)
                unit.append(Entry(cursor, end, kind, payload, appended))
                cursor = end
                if not flags & CONTINUED:  # the unit is whole: it is read
                    out.extend(unit)
                    taken += sum(len(entry.payload) for entry in unit)
                    unit = []
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
    """The spool's checkpoint, or None when there is none or it cannot be read (empty, torn:
    the drainer then treats every entry present as possibly stored already)."""
    try:
        return Checkpoint.from_json((Path(path) / "checkpoint.json").read_text())
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def save_checkpoint(path: Path, checkpoint: Checkpoint, *, fsync: bool = False) -> None:
    """Write the checkpoint atomically (a reader sees the old or the new one, never half).
    ``fsync``: on the disk before it replaces the old one (survives a power loss)."""
    write_atomically(Path(path) / "checkpoint.json", checkpoint.to_json().encode(), fsync=fsync)


def private(path: str, flags: int) -> int:
    """An ``opener`` for :func:`open`: a file it creates is the owner's alone (``0600``): a
    spool holds prompts and answers."""
    return os.open(path, flags, 0o600)


def make_private_folder(path: Path) -> None:
    """Make ``path`` and its missing parents, each the owner's alone (``0700``); folders that
    exist (a ``--spool`` the user gave) are left as they are."""
    missing: list[Path] = []
    folder = Path(path)
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)


def write_atomically(target: Path, data: bytes, *, fsync: bool = False) -> None:
    """Replace ``target`` with ``data``: a reader sees the old file or the new one, never a
    part. ``fsync``: the data and the rename on the disk before returning (survives a power
    loss). A failed write leaves the old file and no temporary one (raises ``OSError``)."""
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb", opener=private) as handle:
            handle.write(data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporary, target)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    if fsync:
        sync_directory(target.parent)


def sync_directory(path: Path) -> None:
    """Force a directory's entries (a rename, a new segment) to the disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def sync_segments(path: Path, start: Position, end: Position) -> None:
    """Force the segments holding ``start``..``end`` to the disk (before a checkpoint that
    covers them is)."""
    for seq in segments(path):
        if start.seq <= seq <= end.seq:
            with contextlib.suppress(FileNotFoundError):
                descriptor = os.open(segment_path(path, seq), os.O_RDONLY)
                try:
                    os.fsync(descriptor)
                finally:
                    os.close(descriptor)


def end_of_spool(path: Path) -> Position:
    """Where the last segment present ends (``Position(0, 0)`` for an empty spool)."""
    present = segments(path)
    if not present:
        return Position(0, 0)
    try:
        size = segment_path(path, present[-1]).stat().st_size
    except FileNotFoundError:
        size = 0
    return Position(present[-1], size)


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
