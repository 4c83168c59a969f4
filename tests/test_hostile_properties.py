"""Property tests: whatever text a user (or an attacker) puts in plugin.yaml, forge.yaml,
the user config.yaml or a --set, only StarForge's own errors come out — never a parser's,
a recursion or a number-conversion exception. Bounded to run in seconds."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from starforge.errors import ForgeError
from starforge.experiment.config import parse_experiment
from starforge.experiment.overrides import build_hyperparams
from starforge.package_format.manifest import PluginManifest
from starforge.package_format.yamlio import load_yaml
from starforge.state.userconfig import load_user_config

BOUNDED = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces that broke parsers before: control characters, huge numbers, deep nesting, YAML
# features we refuse (aliases, tags, merge keys), and ordinary structure around them.
FRAGMENTS = st.sampled_from([
    "\x01", "\x1b", "\x00", "\x7f", "\ufeff", "\t", "\n", "  ", ": ", "- ", "[", "]", "{", "}", ",", "'", '"',
    "&a ", "*a", "!!python/object:os.system ", "!x ", "<<: ", "? ", "|", ">", "#", "%YAML 1.2\n", "---\n", "...\n",
    "1" * 4400, "0x" + "f" * 4000, "0o" + "7" * 5000, "9" * 400, "1e999", "-.inf", ".nan", "[" * 1200, "{a: " * 300,
    "- " * 500, "null", "true", "1.5", "~", "é", "\U0001f600",
])
HOSTILE_TEXT = st.lists(st.one_of(FRAGMENTS, st.text(max_size=12)), max_size=12).map("".join)


def only_forge_errors(fn, *args):
    try:
        return fn(*args)
    except ForgeError:
        return None


def _plugin_yaml(text: str):
    doc = load_yaml(text, "plugin.yaml")
    return PluginManifest.from_mapping(doc.data, source="plugin.yaml", lines=doc.line)


PLUGIN_BASE = "schema: forge/plugin/v1\nname: fuzz\nversion: '1.0.0'\nkind: algorithm\nentrypoint: fuzz:install\n"


@BOUNDED
@given(HOSTILE_TEXT)
def test_plugin_yaml_any_text(text):
    only_forge_errors(_plugin_yaml, text)


@BOUNDED
@given(st.sampled_from(["description", "version", "params", "requires", "targets", "load"]), HOSTILE_TEXT)
def test_plugin_yaml_hostile_value_in_a_valid_document(key, value):
    only_forge_errors(_plugin_yaml, PLUGIN_BASE + f"{key}: {value}\n")
    only_forge_errors(_plugin_yaml, PLUGIN_BASE + f"params:\n  lr: {{type: float, default: {value}}}\n")


FORGE_BASE = "schema: forge/job/v1\nname: fuzz\nentrypoint: python -m trainer\n"


@BOUNDED
@given(st.sampled_from(["config", "plugins", "name", "entrypoint", "recipe", "backend"]), HOSTILE_TEXT)
def test_forge_yaml_hostile_value(key, value):
    def parse(text):
        return parse_experiment(load_yaml(text, "forge.yaml"), Path("/nonexistent/exp"))

    only_forge_errors(parse, FORGE_BASE + f"{key}: {value}\n")
    only_forge_errors(parse, value)


@BOUNDED
@given(HOSTILE_TEXT)
def test_user_config_any_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    only_forge_errors(load_user_config, path)
    path.write_text(f"registry: {text}\nowner: {text}\n", encoding="utf-8", errors="surrogatepass")
    only_forge_errors(load_user_config, path)


DECLARED = {"lr": {"type": "float", "default": 0.1}, "n": {"type": "int", "default": 1},
            "name": {"type": "str", "default": "x"}, "flag": {"type": "bool", "default": False}}


@BOUNDED
@given(st.sampled_from(["lr", "n", "name", "flag", "+new", "cfg.list", "+"]), HOSTILE_TEXT)
def test_set_any_value_gives_printable_hyperparams_or_a_forge_error(key, value):
    hyper = only_forge_errors(build_hyperparams, DECLARED, {"cfg.list": [1, 2]}, [f"{key}={value}"])
    if hyper is not None:
        # What comes out must travel in the JobSpec: JSON without NaN or infinities.
        text = json.dumps(hyper, allow_nan=False)
        assert all(not (isinstance(v, float) and not math.isfinite(v)) for v in hyper.values())
        assert json.loads(text) == hyper
