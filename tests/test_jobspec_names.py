"""The JobSpec name checks accept exactly what the documented patterns match in full."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from starforge.cluster import jobspec
from starforge.errors import SpecError

PATTERNS = {
    jobspec._is_name: r"[a-z][a-z0-9]*(-[a-z0-9]+)*",
    jobspec._is_module: r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*",
    jobspec._is_entrypoint: r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*",
    jobspec._is_job_id: r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}",
}
ALPHABET = "az09AZ_.-:\n é١"  # letters, digits, separators, a newline, non-ASCII letter and digit


def corpus():
    for n in range(5):
        for chars in itertools.product(ALPHABET, repeat=n):
            yield "".join(chars)
    rng = random.Random(7)
    for _ in range(3000):
        yield "".join(rng.choice(ALPHABET) for _ in range(rng.randint(5, 12)))
    yield "a" * 128
    yield "a" * 129


@pytest.mark.parametrize("check", PATTERNS, ids=lambda f: f.__name__)
def test_check_equals_full_pattern_match(check):
    pattern = re.compile(PATTERNS[check])
    wrong = [text for text in corpus() if check(text) != bool(pattern.fullmatch(text))]
    assert wrong == []


def test_a_trailing_newline_is_not_part_of_a_name():
    data = jobspec.example()
    data["plugins"][0]["name"] = "opsd-patch\n"
    with pytest.raises(SpecError, match="is not a valid plugin name"):
        jobspec.JobSpec.from_dict(data)
    data = jobspec.example()
    data["id"] = "job-1\n"
    with pytest.raises(SpecError, match="is not a valid job id"):
        jobspec.JobSpec.from_dict(data)
