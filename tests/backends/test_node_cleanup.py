"""What `forge jobs show` says about each host's cleanup of its node-local copy, from the
marks a Slurm job's steps leave in ``slurm/cleanup/`` (the two-host tests show the marks
being written by real jobs; this checks the reading, marks planted by hand)."""

from __future__ import annotations

from starforge.jobs.node_cleanup import cleanup_lines, node_cleanup


def prepared(*pairs):
    return [{"role": "launcher", "mode": "verify-only", "host": h, "attempt": a} for a, h in pairs]


def test_a_host_that_left_no_mark_is_reported_and_what_removed_its_copy_later(tmp_path):
    marks = tmp_path / "slurm" / "cleanup"
    marks.mkdir(parents=True)
    for name in ("a0-n1.done", "a1-n1.done", "a1-n2.done", "a1-n2.swept", "a0-n3.done", "junk", "a0-bad name.done"):
        (marks / name).write_text("")
    records = prepared((0, "n1"), (0, "n2"), (1, "n1"), (1, "n2"), (2, "n1")) + [{"role": "worker", "host": "n9", "attempt": 0}]
    report = node_cleanup(tmp_path, records, final=True)
    assert report["attempts"][:2] == [
        {"attempt": 0, "prepared": ["n1", "n2"], "removed": ["n1"], "not_removed": ["n2"], "removed_later_by": {"n2": 1}},
        {"attempt": 1, "prepared": ["n1", "n2"], "removed": ["n1", "n2"], "not_removed": [], "removed_later_by": {}},
    ]
    assert report["attempts"][2] == {"attempt": 2, "prepared": ["n1"], "removed": [], "not_removed": ["n1"], "removed_later_by": {}}
    assert cleanup_lines(report) == [
        "  cleanup : attempt 0: node-local copy removed on n1; n2 did not remove its node-local copy (the host died or was "
        "killed before its cleanup ran); attempt 1's prepare on n2 removed it",
        "  cleanup : attempt 1: node-local copy removed on n1, n2",
        "  cleanup : attempt 2: n1 did not remove its node-local copy (the host died or was killed before its cleanup ran); "
        "it may still be on n1",
    ]
    # while the job runs, its last attempt has not cleaned up yet: nothing is said of it
    assert [a["attempt"] for a in node_cleanup(tmp_path, records, final=False)["attempts"]] == [0, 1]


def test_a_job_without_cleanup_marks_has_no_report(tmp_path):
    assert node_cleanup(tmp_path, prepared((0, "n1")), final=True) is None
    assert cleanup_lines(None) == []
