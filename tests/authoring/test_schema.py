"""The JSON Schema shipped for editors agrees with the manifest validator."""

import json
import re
from pathlib import Path

import pytest

import starforge
from starforge.errors import ManifestError
from starforge.package_format import manifest as m

SCHEMA_PATH = Path(starforge.__file__).parent / "schemas" / "plugin.schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
PROPS = SCHEMA["properties"]


# -- a small validator for the keywords the schema uses (jsonschema is used too when installed)

_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
KNOWN = {"$schema", "title", "description", "type", "const", "enum", "pattern", "maxLength", "minimum", "required",
         "properties", "additionalProperties", "propertyNames", "items", "allOf", "anyOf", "if", "then", "default"}


def valid(schema: dict, value) -> bool:
    assert set(schema) <= KNOWN, set(schema) - KNOWN
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            return False
    if "const" in schema and value != schema["const"]:
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return False
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return False
    if _TYPES["number"](value) and "minimum" in schema and value < schema["minimum"]:
        return False
    if isinstance(value, list) and "items" in schema:
        if not all(valid(schema["items"], item) for item in value):
            return False
    if isinstance(value, dict):
        if any(key not in value for key in schema.get("required", [])):
            return False
        props = schema.get("properties", {})
        for key, item in value.items():
            if "propertyNames" in schema and not valid(schema["propertyNames"], key):
                return False
            if key in props:
                if not valid(props[key], item):
                    return False
            elif schema.get("additionalProperties") is False:
                return False
            elif isinstance(schema.get("additionalProperties"), dict) and not valid(schema["additionalProperties"], item):
                return False
    for sub in schema.get("allOf", []):
        if not valid(sub, value):
            return False
    if "anyOf" in schema and not any(valid(sub, value) for sub in schema["anyOf"]):
        return False
    if "if" in schema and valid(schema["if"], value) and not valid(schema.get("then", {}), value):
        return False
    return True


def schema_accepts(data) -> bool:
    ours = valid(SCHEMA, data)
    try:
        import jsonschema
    except ImportError:
        return ours
    theirs = jsonschema.Draft202012Validator(SCHEMA).is_valid(data)
    assert theirs == ours, "the test's validator and jsonschema disagree"
    return ours


def validator_accepts(data) -> bool:
    try:
        m.PluginManifest.from_mapping(data)
    except ManifestError:
        return False
    return True


# -- structure ----------------------------------------------------------------------------

def test_same_keys_required_keys_and_enums():
    assert list(PROPS) == list(m.TOP_KEYS)
    assert SCHEMA["required"] == list(m.REQUIRED_KEYS)
    assert SCHEMA["additionalProperties"] is False
    assert PROPS["schema"]["const"] == m.SCHEMA
    assert PROPS["kind"]["enum"] == list(m.KINDS)
    assert PROPS["load"]["enum"] == list(m.LOADS)
    assert list(PROPS["requires"]["properties"]) == list(m.REQUIRES_KEYS)
    decl = PROPS["params"]["additionalProperties"]
    assert list(decl["properties"]) == list(m.PARAM_DECL_KEYS)
    assert decl["required"] == ["type"]
    assert decl["properties"]["type"]["enum"] == list(m.PARAM_TYPES)
    assert [rule["if"]["properties"]["type"]["const"] for rule in decl["allOf"]] == list(m.PARAM_TYPES)


def test_same_patterns_and_limits():
    assert PROPS["name"]["pattern"] == m.NAME_RE.pattern
    assert PROPS["name"]["maxLength"] == m.NAME_MAX
    assert PROPS["entrypoint"]["pattern"] == m.ENTRYPOINT_RE.pattern
    assert PROPS["targets"]["items"]["pattern"] == m.MODULE_RE.pattern
    assert PROPS["params"]["propertyNames"]["pattern"] == m.PARAM_KEY_RE.pattern
    assert PROPS["requires"]["properties"]["packages"]["propertyNames"]["pattern"] == m.DIST_RE.pattern


# -- behaviour: a table both must agree on --------------------------------------------------

BASE = {"schema": "forge/plugin/v1", "name": "opsd-patch", "version": "1.2.0", "kind": "algorithm", "entrypoint": "opsd_patch:install"}


def with_(**changes):
    data = dict(BASE)
    for key, value in changes.items():
        if value is KeyError:
            data.pop(key)
        else:
            data[key] = value
    return data


TABLE = [
    ("minimal", BASE, True),
    ("full", with_(load="deferred", targets=["nemo_rl.algorithms.grpo"],
                   requires={"core": ">=0.1,<1", "python": ">=3.10", "packages": {"nemo-rl": ">=0.4", "torch": None}},
                   params={"opsd.scale": {"type": "float", "default": 1, "description": "x"},
                           "opsd.on": {"type": "bool", "default": False}, "opsd.tags": {"type": "list"}},
                   description="Scale GRPO advantages"), True),
    ("integer version", with_(version=3), True),
    ("prerelease version", with_(version="1.0rc1.post2.dev3"), True),
    ("null description", with_(description=None), True),
    ("null default", with_(params={"a": {"type": "int", "default": None}}), True),
    ("unknown key", with_(entry_point="x:y"), False),
    ("missing kind", with_(kind=KeyError), False),
    ("wrong schema", with_(schema="forge/plugin/v2"), False),
    ("bad name", with_(name="Opsd_Patch"), False),
    ("double dash", with_(name="opsd--patch"), False),
    ("long name", with_(name="a" * 65), False),
    ("float version", with_(version=1.2), False),
    ("bool version", with_(version=True), False),
    ("bad version", with_(version="banana"), False),
    ("epoch", with_(version="1!2.0"), False),
    ("local", with_(version="1.0+abc"), False),
    ("bad kind", with_(kind="algorithms"), False),
    ("bad entrypoint", with_(entrypoint="opsd_patch.install"), False),
    ("bad load", with_(load="lazy"), False),
    ("targets not a list", with_(targets="nemo_rl"), False),
    ("bad target", with_(targets=["not a module"]), False),
    ("requires unknown key", with_(requires={"pyhton": ">=3.10"}), False),
    ("bad specifier", with_(requires={"core": "banana"}), False),
    ("packages as list", with_(requires={"packages": ["torch"]}), False),
    ("bad dist name", with_(requires={"packages": {"-torch": ">=2"}}), False),
    ("param without type", with_(params={"a": {"default": 1}}), False),
    ("param bad type", with_(params={"a": {"type": "double"}}), False),
    ("param unknown key", with_(params={"a": {"type": "int", "typ": "x"}}), False),
    ("float default not a number", with_(params={"a": {"type": "float", "default": "fast"}}), False),
    ("int default is bool", with_(params={"a": {"type": "int", "default": True}}), False),
    ("str default is int", with_(params={"a": {"type": "str", "default": 1}}), False),
    ("bad param key", with_(params={"a b": {"type": "int"}}), False),
    ("description list", with_(description=["a"]), False),
]


@pytest.mark.parametrize("label, data, expected", TABLE, ids=[row[0] for row in TABLE])
def test_schema_and_validator_agree(label, data, expected):
    assert validator_accepts(data) is expected
    assert schema_accepts(data) is expected


def test_templates_validate_against_the_schema(tmp_path):
    from starforge.authoring.init import TEMPLATES, init_plugin
    from starforge.package_format.yamlio import load_yaml_file

    for (kind, load), template in TEMPLATES.items():
        root = init_plugin("opsd-patch", kind, load, tmp_path / template)
        assert schema_accepts(load_yaml_file(root / "plugin.yaml").data), template
