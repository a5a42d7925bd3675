"""@frozen: memmath's value classes, frozen dataclasses whose __eq__, __hash__ and __repr__ are written once here.

A class is built by dataclasses with eq=False and repr=False, then given these three, which compare, hash and
print the same tuples of fields as the methods dataclasses would generate for @dataclass(frozen=True): __eq__
compares the fields with compare=True of two instances of the same class (else NotImplemented), __hash__ hashes
the fields with hash=True (or hash=None and compare=True), __repr__ writes ClassName(field=repr, ...) of the
fields with repr=True, and "..." for an instance met again inside its own repr. dataclasses.fields, replace,
asdict and FrozenInstanceError are dataclasses' own.

Why: Python 3.11's dataclasses compile each generated method from source text as the class is defined
(dataclasses._create_fn); __eq__, __hash__ and __repr__ were about 40% of that time, which every command line
run pays at import (benchmarks/cli_speed.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter
from reprlib import recursive_repr


def frozen(cls=None, /, **options):
    """@dataclass(frozen=True, **options) with the shared __eq__, __hash__ and __repr__; a method the class
    defines itself is kept."""

    def wrap(cls):
        cls = dataclass(frozen=True, eq=False, repr=False, **options)(cls)
        every = fields(cls)
        cls._compared = staticmethod(_getter([f.name for f in every if f.compare]))
        cls._hashed = staticmethod(_getter([f.name for f in every if (f.compare if f.hash is None else f.hash)]))
        cls._shown = tuple(f.name for f in every if f.repr)
        for name, method in (("__eq__", _eq), ("__hash__", _hash), ("__repr__", _repr)):
            if name not in cls.__dict__:
                setattr(cls, name, method)
        return cls

    return wrap if cls is None else wrap(cls)


def _getter(names):
    """The tuple of these attributes of an instance (attrgetter returns a bare value for one name)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda self: (one(self),)
    return lambda self: ()


def _eq(self, other):
    if other.__class__ is self.__class__:
        return self._compared(self) == self._compared(other)
    return NotImplemented


def _hash(self):
    return hash(self._hashed(self))


@recursive_repr()
def _repr(self):
    return f"{self.__class__.__qualname__}({', '.join(f'{name}={getattr(self, name)!r}' for name in self._shown)})"
