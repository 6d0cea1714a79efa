"""Values ↔ bytes for everything a drainer reads back: data only, never code.

Spool entries, the metric memory and the offload writer's config are written by one process and
read by another, maybe after a restart or by another user's drainer. They are MessagePack
(https://msgpack.org), which holds only data: reading a file planted in a spool builds nil, bools,
numbers, strings, bytes, arrays (read back as tuples) and maps, plus the few extension types
below, and nothing else. Nothing in a payload names a function to call.

Every payload is the array ``[FORMAT, value]``: a payload of another format (a pickle, which
development versions before 0.1.0 wrote, or a later format) is refused with
:class:`UnreadablePayload` naming it.

Extension types:

- :data:`BIG_INT` (1): an integer beyond MessagePack's 64 bits (a 128-bit trace id where it is
  not laid out as 16 bytes), as signed big-endian bytes;
- :data:`FROZENSET` (2): a set or frozenset, as the payload of its items' array;
- 16 and up: a dataclass the caller allowed (:class:`Classes`), as the map of its fields; read
  back by calling the class with those fields, so a payload can only build what the reader named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

FORMAT = 2
"""The payload format this version writes and reads (1 was a pickle read back restricted)."""

BIG_INT = 1
FROZENSET = 2
FIRST_CLASS_CODE = 16

_PICKLE_START = 0x80
"""The first byte of every pickle of protocol 2 and later (what format 1 was)."""


class UnreadablePayload(ValueError):
    """A payload that is damaged, of another format, or holds what its reader did not allow."""


class UnpackableValue(ValueError):
    """A value that is not data (an object of a class nobody allowed): it cannot be written."""


@dataclasses.dataclass(frozen=True)
class Classes:
    """The dataclasses a kind of payload may hold, each with its extension code (16 and up).

    ``build``: how a class is made from its fields when the plain ``cls(**fields)`` is not
    enough (an enum field read back as its integer)."""

    codes: Mapping[type, int]
    build: Mapping[type, Callable[[dict[str, Any]], Any]] = dataclasses.field(default_factory=dict)

    @staticmethod
    def of(
        *classes: type, build: Mapping[type, Callable[[dict[str, Any]], Any]] | None = None
    ) -> Classes:
        """``classes`` numbered in the order given (the order is part of the format)."""
        return Classes(
            {cls: FIRST_CLASS_CODE + i for i, cls in enumerate(classes)}, dict(build or {})
        )


NO_CLASSES = Classes({})


def pack(value: Any, classes: Classes = NO_CLASSES) -> bytes:
    """``value`` as a payload of :data:`FORMAT`. Subclasses of plain types (a library's ``str``
    subclass, an ``IntEnum``, a named tuple, any ``Mapping``) are written as their plain type.
    Raises :class:`UnpackableValue` for a value that is not data."""
    codes = classes.codes

    def default(obj: Any) -> Any:
        if obj.__class__ in codes:
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            return msgpack.ExtType(codes[obj.__class__], _packb(fields, default))
        if isinstance(obj, int):  # beyond 64 bits (smaller ones never come here)
            size = (obj.bit_length() + 8) // 8
            return msgpack.ExtType(BIG_INT, obj.to_bytes(size, "big", signed=True))
        if isinstance(obj, (set, frozenset)):
            return msgpack.ExtType(FROZENSET, _packb(list(obj), default))
        if isinstance(obj, Mapping):
            return dict(obj)
        if isinstance(obj, (list, tuple)):
            return list(obj)
        raise TypeError(f"a {type(obj).__qualname__} is not data")

    try:
        try:
            return _packb([FORMAT, value], default)
        except UnicodeEncodeError:
            # A lone surrogate (text decoded with errors="surrogateescape"): kept as it is. Not
            # the first try: MessagePack then copies every string it writes.
            return _packb([FORMAT, value], default, "surrogatepass")
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise UnpackableValue(str(exc)) from None


def _packb(value: Any, default: Callable[[Any], Any], unicode_errors: str | None = None) -> bytes:
    return msgpack.packb(value, default=default, unicode_errors=unicode_errors)  # type: ignore[no-any-return]


def unpack(payload: bytes, classes: Classes = NO_CLASSES) -> Any:
    """The value of a payload :func:`pack` wrote; arrays come back as tuples. Raises
    :class:`UnreadablePayload` when it cannot be read (damaged, of another format, or holding a
    class ``classes`` does not name)."""
    if payload[:1] == bytes((_PICKLE_START,)):
        raise UnreadablePayload(
            "it is a pickle, the format of otel-trackio's development versions before 0.1.0, "
            "which this version does not read: drain that spool with the version that wrote it"
        )
    by_code = {code: cls for cls, code in classes.codes.items()}

    def ext_hook(code: int, data: bytes) -> Any:
        if code == BIG_INT:
            return int.from_bytes(data, "big", signed=True)
        if code == FROZENSET:
            return frozenset(_unpackb(data, ext_hook))
        cls = by_code.get(code)
        if cls is None:
            raise UnreadablePayload(f"it holds extension type {code}, which it may not")
        fields = _unpackb(data, ext_hook)
        if not isinstance(fields, dict):
            raise UnreadablePayload(f"its {cls.__qualname__} is not a map of fields")
        build = classes.build.get(cls)
        return build(fields) if build is not None else cls(**fields)

    try:
        outer = _unpackb(payload, ext_hook)
    except UnreadablePayload:
        raise
    except Exception as exc:  # noqa: BLE001 - any damage is one kind of failure to the caller
        raise UnreadablePayload(f"it cannot be read: {exc!r}") from None
    if not (isinstance(outer, tuple) and len(outer) == 2):
        raise UnreadablePayload("it is not an otel-trackio payload")
    if outer[0] != FORMAT:
        raise UnreadablePayload(
            f"it is in format {outer[0]!r}; this version of otel-trackio reads format {FORMAT}"
        )
    return outer[1]


def _unpackb(data: bytes, ext_hook: Callable[[int, bytes], Any]) -> Any:
    return msgpack.unpackb(
        data,
        use_list=False,
        strict_map_key=False,
        ext_hook=ext_hook,
        unicode_errors="surrogatepass",
    )
