"""``Record``: the frozen-value base of the cluster side's JobSpec and plugin entries."""

from __future__ import annotations

import copy
import pickle

import pytest

from starforge.cluster.record import Record


class Point(Record):
    __slots__ = ("x", "y", "tags")

    def __init__(self, x: int, y: int = 0, tags: tuple = ()) -> None:
        self._set(x, y, tags)


class OtherPoint(Record):
    __slots__ = ("x", "y", "tags")

    def __init__(self, x: int, y: int = 0, tags: tuple = ()) -> None:
        self._set(x, y, tags)


def test_fields_follow_the_slots_in_order():
    assert Point._fields == ("x", "y", "tags")
    p = Point(3, 4, ("a",))
    assert (p.x, p.y, p.tags) == (3, 4, ("a",))


def test_fields_cannot_be_assigned_deleted_or_added():
    p = Point(1, 2)
    with pytest.raises(AttributeError, match="cannot assign to field 'x'"):
        p.x = 5
    with pytest.raises(AttributeError, match="cannot delete field 'y'"):
        del p.y
    with pytest.raises(AttributeError):
        p.z = 1
    assert (p.x, p.y) == (1, 2)


def test_set_refuses_a_wrong_number_of_values():
    class Bad(Record):
        __slots__ = ("a", "b")

        def __init__(self) -> None:
            self._set(1)

    with pytest.raises(TypeError, match="Bad has 2 fields, got 1 values"):
        Bad()


def test_equality_is_by_value_and_by_exact_class():
    assert Point(1, 2, ("t",)) == Point(1, 2, ("t",))
    assert Point(1, 2) != Point(1, 3)
    assert Point(1, 2) != OtherPoint(1, 2)  # same fields, another class
    assert Point(1, 2) != (1, 2, ())
    assert Point(1, 2).__eq__((1, 2, ())) is NotImplemented


def test_hash_follows_the_values_and_a_list_field_is_unhashable():
    assert hash(Point(1, 2, ("a",))) == hash(Point(1, 2, ("a",)))
    assert len({Point(1, 2), Point(1, 2), Point(2, 1)}) == 2
    with pytest.raises(TypeError):
        hash(Point(1, 2, ["a"]))  # type: ignore[arg-type]


def test_repr_names_the_class_and_every_field():
    assert repr(Point(1, 2, ("a",))) == "Point(x=1, y=2, tags=('a',))"
    assert repr(OtherPoint(0)) == "OtherPoint(x=0, y=0, tags=())"


def test_pickle_and_copy_rebuild_through_init():
    p = Point(7, 8, ("u", "v"))
    for other in (pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)):
        assert other == p
        assert type(other) is Point
        with pytest.raises(AttributeError):
            other.x = 0


def test_the_jobspec_records_are_records():
    from starforge.cluster.jobspec import JobSpec, PluginEntry

    e = PluginEntry("p", "1.0.0", "sf1:" + "0" * 64, "algorithm", "eager", "p:install", owner="alice")
    assert e == pickle.loads(pickle.dumps(e))
    with pytest.raises(AttributeError):
        e.version = "2.0.0"  # type: ignore[misc]
    spec = JobSpec("j-1", "j", "2026-01-01T00:00:00Z", ["python", "t.py"], plugins=(e,))
    assert spec.plugins[0] is e
    assert spec.hyperparams == {} and spec.extra == {}
