"""The JobSpec example in docs/jobspec.md is the one the code writes."""

from __future__ import annotations

import json
import re

import pytest
from launch_jobs import REPO

from starforge.cluster.jobspec import JobSpec, example


def test_jobspec_doc_example_matches_the_writer():
    doc = REPO / "docs" / "jobspec.md"
    if not doc.exists():
        pytest.skip("docs/ is not next to the tests (installed package only)")
    block = re.search(r"```json\n(.*?)```", doc.read_text(), re.S).group(1)
    assert json.loads(block) == json.loads(JobSpec.from_dict(example()).to_json())
    assert block == JobSpec.from_dict(example()).to_json()
