"""JobSpec.from_dict on input of any shape: a SpecError, never another exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from starforge.cluster.errors import SpecError
from starforge.cluster.jobspec import JobSpec, example

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def spec_with(path: tuple, value) -> dict:
    data = json.loads(json.dumps(example()))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    "data",
    [
        [1],
        "jobspec",
        None,
        spec_with(("extra",), []),
        spec_with(("hyperparams",), [1]),
        spec_with(("recipe",), "x"),
        spec_with(("plugins", 0, "requires"), "x"),
        spec_with(("plugins", 0, "files"), [["a", "b"]]),
        spec_with(("plugins", 0, "params"), 3),
        spec_with(("plugins", 0), [1]),
    ],
    ids=lambda d: json.dumps(d)[:40],
)
def test_a_non_object_where_an_object_belongs_is_a_spec_error(data):
    with pytest.raises(SpecError):
        JobSpec.from_dict(data)


FIELDS = [("extra",), ("hyperparams",), ("recipe",), ("plugins",), ("entrypoint",), ("id",), ("core_version",),
          ("strict_deferred",), ("plugins", 0), ("plugins", 0, "requires"), ("plugins", 0, "files"),
          ("plugins", 0, "targets"), ("plugins", 0, "top_level"), ("plugins", 0, "name"), ("plugins", 0, "signature")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIELDS), JSON)
def test_any_json_in_any_field_gives_a_spec_or_a_spec_error(path, value):
    try:
        spec = JobSpec.from_dict(spec_with(path, value))
    except SpecError:
        return
    assert JobSpec.from_dict(json.loads(spec.to_json())) == spec


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_any_json_document_gives_a_spec_error(value):
    with pytest.raises(SpecError):
        JobSpec.from_dict(value)
