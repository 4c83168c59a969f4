"""Editing forge.yaml's plugins list as text: comments and layout survive, in both list styles."""

import pytest

from starforge.experiment.edit import set_plugins_text

FLOW = """\
schema: forge/job/v1
name: demo
entrypoint: python -m toy_grpo.train   # the trainer
# platform plugins, in load order
plugins: [alice/opsd-patch@~=1.2, bob/gspo]  # keep opsd first
config:
  opsd: {scale: 1.0}   # tuned
"""

BLOCK = """\
schema: forge/job/v1
name: demo
entrypoint: python -m toy_grpo.train
plugins:            # platform plugins
  - alice/opsd-patch@~=1.2   # keep first
  # gspo is experimental
  - bob/gspo
config:
  opsd: {scale: 1.0}
"""


def test_flow_add_replace_remove():
    added = set_plugins_text(FLOW, ["alice/opsd-patch@~=1.2", "bob/gspo", "carol/dr-grpo@>=1.0,<2"])
    assert added == FLOW.replace(
        "plugins: [alice/opsd-patch@~=1.2, bob/gspo]  # keep opsd first",
        'plugins: [alice/opsd-patch@~=1.2, bob/gspo, "carol/dr-grpo@>=1.0,<2"]  # keep opsd first',
    )
    replaced = set_plugins_text(FLOW, ["alice/opsd-patch@1.3.0", "bob/gspo"], replace_index=0)
    assert replaced == FLOW.replace("[alice/opsd-patch@~=1.2, bob/gspo]", "[alice/opsd-patch@1.3.0, bob/gspo]")
    removed = set_plugins_text(FLOW, ["bob/gspo"])
    assert removed == FLOW.replace("[alice/opsd-patch@~=1.2, bob/gspo]", "[bob/gspo]")
    assert set_plugins_text(removed, []) == FLOW.replace("[alice/opsd-patch@~=1.2, bob/gspo]", "[]")


def test_flow_list_over_several_lines_is_put_on_one():
    text = "schema: forge/job/v1\nname: d\nentrypoint: x\nplugins: [a/b,\n  c/d]\nconfig: {}\n"
    assert set_plugins_text(text, ["a/b"]) == "schema: forge/job/v1\nname: d\nentrypoint: x\nplugins: [a/b]\nconfig: {}\n"


def test_block_add_replace_remove():
    added = set_plugins_text(BLOCK, ["alice/opsd-patch@~=1.2", "bob/gspo", "carol/dr-grpo"])
    assert added == BLOCK.replace("  - bob/gspo\n", "  - bob/gspo\n  - carol/dr-grpo\n")
    replaced = set_plugins_text(BLOCK, ["alice/opsd-patch@1.3.0", "bob/gspo"], replace_index=0)
    assert replaced == BLOCK.replace("  - alice/opsd-patch@~=1.2   # keep first", "  - alice/opsd-patch@1.3.0   # keep first")
    removed = set_plugins_text(BLOCK, ["bob/gspo"])
    assert removed == BLOCK.replace("  - alice/opsd-patch@~=1.2   # keep first\n", "")
    emptied = set_plugins_text(removed, [])
    assert emptied == (
        "schema: forge/job/v1\nname: demo\nentrypoint: python -m toy_grpo.train\n"
        "plugins: []  # platform plugins\nconfig:\n  opsd: {scale: 1.0}\n"
    )


def test_block_items_at_column_zero():
    text = "schema: forge/job/v1\nname: d\nentrypoint: x\nplugins:\n- a/b\nconfig: {}\n"
    assert set_plugins_text(text, ["a/b", "c/d"]) == "schema: forge/job/v1\nname: d\nentrypoint: x\nplugins:\n- a/b\n- c/d\nconfig: {}\n"


def test_absent_or_empty_key():
    text = "schema: forge/job/v1\nname: d\nentrypoint: >-\n  python -m t\n# cfg\nconfig: {}\n"
    assert set_plugins_text(text, ["a/b"]) == (
        "schema: forge/job/v1\nname: d\nentrypoint: >-\n  python -m t\nplugins: [a/b]\n# cfg\nconfig: {}\n"
    )
    assert set_plugins_text("name: d\nentrypoint: x", ["a/b"]) == "name: d\nentrypoint: x\nplugins: [a/b]\n"
    assert set_plugins_text("entrypoint: x\nplugins:   # later\nconfig: {}\n", ["a/b"]) == (
        "entrypoint: x\nplugins: [a/b]  # later\nconfig: {}\n"
    )


def test_crlf_files_stay_crlf():
    text = FLOW.replace("\n", "\r\n")
    out = set_plugins_text(text, ["bob/gspo"])
    assert out == FLOW.replace("[alice/opsd-patch@~=1.2, bob/gspo]", "[bob/gspo]").replace("\n", "\r\n")


def test_not_a_single_edit_is_refused():
    with pytest.raises(ValueError):
        set_plugins_text(BLOCK, ["x/y", "z/w"], replace_index=None)
