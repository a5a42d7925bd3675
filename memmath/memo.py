"""The same question answered once: a small cache for the calculator's pure, scalar answers.

The planner and the command line ask the same few runs again and again (each candidate change is
costed, then judged, then costed again on the path to a fit); the answer of a run is a frozen
dataclass of integers, so a repeated question can share it. Only calls whose every argument is
hashable are cached (arrays and other sweeps are computed every time), and the key carries each
argument's type, so 1, 1.0 and True stay different questions (validation may treat them apart).
Errors are never cached: a bad call raises the same ValueError every time.
"""

from __future__ import annotations

import functools
from collections import OrderedDict


def _key(value):
    if isinstance(value, tuple):
        return tuple(_key(v) for v in value)
    return type(value), value


def memoized(maxsize: int = 256):
    """Decorator: remember the last `maxsize` answers of a function of hashable arguments."""

    def decorate(function):
        cache: OrderedDict = OrderedDict()

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                key = (_key(args), _key(tuple(sorted(kwargs.items()))))
                hash(key)
            except TypeError:  # an array or another unhashable sweep: computed every time
                return function(*args, **kwargs)
            if key in cache:
                cache.move_to_end(key)
                return cache[key]
            answer = function(*args, **kwargs)
            cache[key] = answer
            if len(cache) > maxsize:
                cache.popitem(last=False)
            return answer

        wrapper.cache_clear = cache.clear
        return wrapper

    return decorate
