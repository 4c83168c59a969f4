"""``jsonload.loads``: JSON from untrusted places, with its nesting bounded."""

from __future__ import annotations

import pytest

from starforge.cluster.jsonload import MAX_DEPTH, NestingError, loads


def nested_lists(depth: int) -> str:
    return "[" * depth + "]" * depth


def nested_objects(depth: int) -> str:
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def test_ordinary_documents_load_as_json_loads_would():
    assert loads('{"schema": "forge/lock/v1", "plugins": [{"name": "p", "files": {"a.py": "00"}}]}') == {
        "schema": "forge/lock/v1", "plugins": [{"name": "p", "files": {"a.py": "00"}}]}
    assert loads(b'[1, 2.5, null, true, "x"]') == [1, 2.5, None, True, "x"]
    assert loads(bytearray(b'"text"')) == "text"
    assert loads("42") == 42


def test_exactly_the_limit_loads_one_more_level_is_refused():
    assert MAX_DEPTH == 100
    loads(nested_lists(100))
    loads(nested_objects(100))
    for text in (nested_lists(101), nested_objects(101), '{"k": [' + nested_lists(100) + "]}"):
        with pytest.raises(NestingError, match="^JSON nested deeper than 100 levels$"):
            loads(text)


def test_depth_counts_the_deepest_branch_not_the_total():
    wide = "[" + ",".join([nested_lists(99)] * 50) + "]"  # 100 deep, 50 wide
    assert len(loads(wide)) == 50


def test_a_custom_limit():
    loads(nested_lists(3), max_depth=3)
    with pytest.raises(NestingError, match="deeper than 3 levels"):
        loads('{"a": {"b": {"c": []}}}', max_depth=3)


def test_nesting_deep_enough_to_exhaust_the_parser_is_one_error_a_value_error_catches():
    with pytest.raises(ValueError) as info:
        loads(nested_lists(100_000))
    assert isinstance(info.value, NestingError)
    assert str(info.value) == "JSON nested deeper than 100 levels"


def test_invalid_json_is_still_a_value_error_and_not_a_nesting_error():
    with pytest.raises(ValueError) as info:
        loads("{not json")
    assert not isinstance(info.value, NestingError)
