"""The launcher's JSON helpers give exactly what the json package gives, without importing it."""

from __future__ import annotations

import json
import math

import pytest

from starforge.cluster.jobspec import format_json, parse_json

VALUES = [
    {},
    [],
    {"a": []},
    {"b": {}, "a": [1, 2.5, -0.0, 1e-06, 1e300, True, False, None, "x"]},
    {"phase": "entrypoint", "code": None, "plugin": "alice/opsd-patch@1.2.0", "message": "héllo \u2603 \"q\" \\ \n\t\x01"},
    {"nested": {"z": [[], [{}], [[1]]], "é": {"k": "\ud83d\ude00"}}, "big": 2**70, "neg": -3},
    ("tuple", ["in", ("tuple",)]),
    "just a string",
    12,
    3.25,
    None,
]


@pytest.mark.parametrize("value", VALUES)
def test_format_json_is_json_dumps_indent_2_sorted(value):
    assert format_json(value) == json.dumps(value, indent=2, sort_keys=True)


def test_format_json_hand_checked_layout():
    assert format_json({"b": [1, {"c": None}], "a": "\u00e9", "e": {}}) == (
        '{\n  "a": "\\u00e9",\n  "b": [\n    1,\n    {\n      "c": null\n    }\n  ],\n  "e": {}\n}'
    )


def test_format_json_special_floats_and_default():
    value = {"n": math.nan, "i": math.inf, "m": -math.inf, "obj": ValueError("x"), "path": {"p": __import__("pathlib").PurePosixPath("/a/b")}}
    assert format_json(value, default=str) == json.dumps(value, indent=2, sort_keys=True, default=str)
    assert '"i": Infinity' in format_json(value, default=str)


def test_format_json_leaves_json_its_own_errors_and_key_conversions():
    with pytest.raises(TypeError, match="not JSON serializable"):
        format_json({"x": object()})
    assert format_json({1: "a", 3: "b"}) == json.dumps({1: "a", 3: "b"}, indent=2, sort_keys=True)
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        format_json(loop)


@pytest.mark.parametrize("value", VALUES)
def test_parse_json_round_trips(value):
    text = json.dumps(value)
    assert parse_json(text) == json.loads(text)
    assert parse_json("  \n" + text + "\r\n\t ") == json.loads(text)


def test_parse_json_constants_and_duplicates_as_json():
    parsed = parse_json('{"a": NaN, "b": Infinity, "c": -Infinity, "a": 1, "d": 1.5e3, "e": 10}')
    assert parsed["a"] == 1 and parsed["b"] == math.inf and parsed["c"] == -math.inf
    assert type(parsed["d"]) is float and type(parsed["e"]) is int


@pytest.mark.parametrize("text", ["", "   ", "{", '{"a": 1} x', '{"a": 1}{}', "\ufeff{}", "[1,]", '{"a" 1}', "nul"])
def test_parse_json_invalid_raises_jsons_error(text):
    with pytest.raises(json.JSONDecodeError) as ours:
        parse_json(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert str(ours.value) == str(theirs.value)


def test_hyperparams_copy_is_a_json_round_trip_keeping_key_order():
    import enum

    from starforge.cluster.hyperparams_and_deferred import freeze as _freeze

    class Level(enum.IntEnum):
        HIGH = 2

    values = {"z": 1, "a": {"y": [1, (2, 3)], "b": None}, "f": 1.5, "t": True}
    frozen = _freeze(values)
    assert list(frozen) == ["z", "a", "f", "t"] and list(frozen["a"]) == ["y", "b"]
    assert dict(frozen) == json.loads(json.dumps(values))
    assert frozen["a"] is not values["a"]
    odd = {"level": Level.HIGH, "keys": {1: "one"}}
    assert dict(_freeze(odd)) == json.loads(json.dumps(odd)) == {"level": 2, "keys": {"1": "one"}}
    assert type(_freeze(odd)["level"]) is int
