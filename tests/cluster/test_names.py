"""The name rules, written once (``starforge/cluster/names.py``): each check accepts exactly
what its documented pattern matches in full, and the manifest and the JobSpec both use them."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from starforge.cluster import jobspec, names
from starforge.errors import ManifestError, SpecError
from starforge.package_format import manifest

RULES = {
    names.is_plugin_name: names.PLUGIN_NAME_PATTERN,
    names.is_module: names.MODULE_PATTERN,
    names.is_entrypoint: names.ENTRYPOINT_PATTERN,
    names.is_job_id: names.JOB_ID_PATTERN,
}
ALPHABET = "az09AZ_.-:\n é١"  # letters, digits, separators, a newline, non-ASCII letter and digit


def corpus():
    for n in range(5):
        for chars in itertools.product(ALPHABET, repeat=n):
            yield "".join(chars)
    rng = random.Random(7)
    for _ in range(3000):
        yield "".join(rng.choice(ALPHABET) for _ in range(rng.randint(5, 12)))
    for n in (63, 64, 65, 127, 128, 129):
        yield "a" * n


def full_match(pattern: str, text: str, max_len: int | None = None) -> bool:
    # the documented patterns are anchored with ^...$; "in full" excludes the newline `$` lets through
    return bool(re.fullmatch(pattern.removeprefix("^").removesuffix("$"), text)) and (max_len is None or len(text) <= max_len)


@pytest.mark.parametrize("check", RULES, ids=lambda f: f.__name__)
def test_each_check_accepts_exactly_what_its_pattern_matches_in_full(check):
    limit = names.NAME_MAX if check is names.is_plugin_name else None
    wrong = [text for text in corpus() if check(text) != full_match(RULES[check], text, limit)]
    assert wrong == []


@pytest.mark.parametrize("check", RULES, ids=lambda f: f.__name__)
def test_a_non_string_is_no_name(check):
    assert [v for v in (None, 1, b"abc", ["a"]) if check(v)] == []


def test_a_plugin_name_is_at_most_64_characters():
    assert names.is_plugin_name("a" * 64) and not names.is_plugin_name("a" * 65)
    assert names.is_plugin_name("opsd-patch") and not names.is_plugin_name("opsd-patch\n")


def test_the_manifest_checks_names_by_these_rules():
    base = {"schema": "forge/plugin/v1", "name": "opsd-patch", "version": "1.2", "kind": "algorithm",
            "entrypoint": "opsd_patch:install", "targets": ["toy_grpo.algorithms"]}
    assert manifest.PluginManifest.from_mapping(base).name == "opsd-patch"
    for key, value in (("name", "opsd-patch\n"), ("name", "a" * 65), ("name", "Opsd"), ("entrypoint", "opsd_patch:install\n"),
                       ("entrypoint", "opsd-patch:install"), ("targets", ["toy_grpo.algorithms\n"])):
        with pytest.raises(ManifestError):
            manifest.PluginManifest.from_mapping({**base, key: value})
    # the compiled patterns the JSON schema shows are these rules' patterns
    assert (manifest.NAME_RE.pattern, manifest.ENTRYPOINT_RE.pattern, manifest.MODULE_RE.pattern) == (
        names.PLUGIN_NAME_PATTERN, names.ENTRYPOINT_PATTERN, names.MODULE_PATTERN)


def test_a_trailing_newline_is_not_part_of_a_name():
    data = jobspec.example()
    data["plugins"][0]["name"] = "opsd-patch\n"
    with pytest.raises(SpecError, match="is not a valid plugin name"):
        jobspec.JobSpec.from_dict(data)
    data = jobspec.example()
    data["id"] = "job-1\n"
    with pytest.raises(SpecError, match="is not a valid job id"):
        jobspec.JobSpec.from_dict(data)
