"""memmath.values.frozen: the value classes compare, hash and print as @dataclass(frozen=True) would make them.

The oracle is dataclasses itself: for each class, a twin built by @dataclass(frozen=True) from the same fields,
whose generated __eq__, __hash__ and __repr__ are applied to memmath's own instances (they read only the fields
and the instance's class). The instances are every value reachable from the plans of a few runs.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
from pathlib import Path

import pytest

import memmath as mm
from memmath import values
from memmath.values import frozen


def _twin(cls):
    """cls rebuilt by @dataclass(frozen=True) from its own fields (the methods dataclasses generates)."""
    names = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": "twin",
             "__annotations__": {f.name: f.type for f in dataclasses.fields(cls)}}
    names.update({f.name: copy.copy(f) for f in dataclasses.fields(cls)})
    params = cls.__dataclass_params__
    return dataclasses.dataclass(frozen=True, kw_only=any(f.kw_only is True for f in dataclasses.fields(cls)),
                                 init=params.init)(type(cls.__name__, (), names))


def _values(root):
    """Every instance of a @frozen class reachable from root through fields, tuples, lists and dicts."""
    seen, found, stack = set(), [], [root]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            if "_compared" in type(item).__dict__:
                found.append(item)
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif isinstance(item, (tuple, list, frozenset)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return found


def _outcome(function, value):
    try:
        return function(value)
    except TypeError as error:
        return str(error)


PLANS = [
    lambda: mm.plan_training(mm.Run("llama-3-8b", method=mm.LoRA(rank=8), batch_size=4, seq_len=2048), "RTX 4090"),
    lambda: mm.plan_training(mm.Run("llama-3-8b", method=mm.QLoRA(), batch_size=2), "RTX 4090"),
    lambda: mm.plan_training(mm.Run("llama-3-8b", method=mm.DPO(base=mm.LoRA()), n_gpus=2, zero_stage=3), "A100 80GB"),
]


@pytest.mark.parametrize("plan", range(len(PLANS)))
def test_eq_hash_and_repr_are_those_dataclasses_generates(plan):
    found = _values(PLANS[plan]())
    classes = {type(v) for v in found}
    assert len(classes) >= 8, classes  # the plan's run, model, method, requirement, memory, verdict, ...
    twins = {cls: _twin(cls) for cls in classes}
    for value in found:
        twin = twins[type(value)]
        if type(value).__repr__ is values._repr:  # not where the class writes its own (Run's)
            assert repr(value) == twin.__repr__(value)
        assert _outcome(hash, value) == _outcome(twin.__hash__, value)  # a dict field: unhashable in both
        same = dataclasses.replace(value) if type(value).__dataclass_params__.init else value
        assert (value == same) is twin.__eq__(value, same) is True
        assert value.__eq__(object()) is NotImplemented is twin.__eq__(value, object())
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, dataclasses.fields(value)[0].name, None)


def test_a_field_left_out_of_compare_is_left_out_of_eq_hash_and_repr_as_dataclasses_do():
    @frozen
    class Pair:
        a: int
        b: int = dataclasses.field(default=0, compare=False)
        c: int = dataclasses.field(default=0, repr=False)

    twin = _twin(Pair)
    one, other = Pair(1, 2, 3), Pair(1, 5, 3)
    assert one == other and hash(one) == hash(other) == twin.__hash__(one)
    assert Pair(1, 2, 3) != Pair(1, 2, 4)
    assert repr(one) == twin.__repr__(one) == "test_a_field_left_out_of_compare_is_left_out_of_eq_hash_and_repr_as_" \
        "dataclasses_do.<locals>.Pair(a=1, b=2)"


def test_one_field_and_no_field_are_tuples_as_dataclasses_hash_them():
    @frozen
    class One:
        a: int

    @frozen
    class Empty:
        pass

    assert hash(One(3)) == hash((3,)) == _twin(One).__hash__(One(3))
    assert hash(Empty()) == hash(()) and Empty() == Empty() and repr(Empty()).endswith("Empty()")


def test_a_repr_that_meets_its_own_instance_writes_dots_as_dataclasses_do():
    @frozen
    class Box:
        items: list

    box, twin = Box([]), _twin(Box)([])
    box.items.append(box)
    twin.items.append(twin)
    assert repr(box) == repr(twin) == f"{Box.__qualname__}(items=[...])"


def test_every_frozen_dataclass_of_memmath_is_built_by_values_frozen():
    package = Path(mm.__file__).parent
    names = sorted("memmath." + ".".join(path.relative_to(package).with_suffix("").parts)
                   for path in package.rglob("*.py") if path.name not in ("__init__.py", "__main__.py"))
    modules = [importlib.import_module(name) for name in names]
    built = [cls for m in modules for cls in vars(m).values()
             if isinstance(cls, type) and cls.__module__ == m.__name__ and dataclasses.is_dataclass(cls)]
    assert len(built) > 60
    assert [cls.__qualname__ for cls in built
            if cls.__dataclass_params__.frozen and "_compared" not in cls.__dict__] == []
