"""Reading back what this package pickled, without running code a file could name.

Spool entries, the metric memory and the writer's config are pickles this package wrote. A
plain pickle can name any function to call when it is read; anyone able to write into a spool
folder could then run code as the drainer. :func:`loads` reads them with every global refused
but the few data classes a payload of that kind holds (the documented way to restrict
unpickling: https://docs.python.org/3/library/pickle.html#restricting-globals). A refused or
damaged payload raises :class:`UnreadablePayload`.

:func:`dumps` writes a value of a subclass of a plain type (a library's ``str`` subclass as a
span attribute, an ``IntEnum``, a ``float`` subclass, a named tuple, an ``OrderedDict``) as that
plain type, so what it wrote can always be read back.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Collection
from typing import Any

PROTOCOL = pickle.HIGHEST_PROTOCOL
"""The protocol every payload is written with."""


class UnreadablePayload(ValueError):
    """A payload that is damaged, of another version, or names a global it may not."""


class _Restricted(pickle.Unpickler):
    def __init__(self, payload: bytes, allowed: Collection[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(payload))
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._allowed or (module, name) in PLAIN_TYPES:
            return super().find_class(module, name)
        raise UnreadablePayload(f"it names {module}.{name}, which a payload may not")


def loads(payload: bytes, allowed: Collection[tuple[str, str]] = ()) -> Any:
    """The object pickled in ``payload``; globals other than ``allowed`` (module, name) pairs
    are refused. Raises :class:`UnreadablePayload` when it cannot be read."""
    try:
        return _Restricted(payload, allowed).load()
    except UnreadablePayload:
        raise
    except Exception as exc:  # noqa: BLE001 - any damage is one kind of failure to the caller
        raise UnreadablePayload(f"it cannot be read: {exc!r}") from None


_PLAIN_TYPES: tuple[type, ...] = (str, int, float, bytes, tuple, list, dict, frozenset, set)
PLAIN_TYPES = frozenset(("builtins", t.__name__) for t in _PLAIN_TYPES)
"""The globals every payload may name: plain types, rebuilt from plain values."""


class _PlainPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        # Called for objects of other than the exact plain types only.
        for plain in _PLAIN_TYPES:
            if isinstance(obj, plain):
                return plain, (plain(obj),)
        return NotImplemented


def dumps(value: Any) -> bytes:
    """``value`` pickled (the counterpart of :func:`loads`); subclasses of plain types as
    their plain type."""
    buffer = io.BytesIO()
    _PlainPickler(buffer, PROTOCOL).dump(value)
    return buffer.getvalue()
