"""The name rules, written once: plugin and owner names, dotted module names, entrypoints,
job ids. ``package_format/manifest.py`` (the laptop's ``plugin.yaml``), the lock, the registries and the
JobSpec all check names here.

Each rule is a pattern (``*_PATTERN``: the documented form, also the JSON schema's) and a
plain string test that accepts exactly the strings the pattern matches in full (no
trailing newline, ASCII only). The tests are not regular expressions: every process of a
job reads the JobSpec's names, and a worker's start does not import ``re``
(``tests/cluster/test_names.py`` checks each test against its pattern).

Shared: standard library only.

>>> is_plugin_name("opsd-patch"), is_plugin_name("opsd--patch"), is_plugin_name("opsd-patch\\n")
(True, False, False)
>>> is_entrypoint("opsd_patch.core:install"), is_entrypoint("opsd-patch:install")
(True, False)
"""

from __future__ import annotations

#: A plugin (or owner) name: lowercase letters and digits, single dashes between them, at most NAME_MAX characters.
PLUGIN_NAME_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
NAME_MAX = 64
#: A dotted Python module name (ASCII identifiers).
MODULE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
#: ``module:function``.
ENTRYPOINT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
#: A job id: what ``forge submit`` makes of a job name and a time, and what a directory may be called.
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"

_LOWER_DIGITS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def is_plugin_name(text: object) -> bool:
    """*text* is a valid plugin or owner name (:data:`PLUGIN_NAME_PATTERN`, at most :data:`NAME_MAX` characters)."""
    if not isinstance(text, str) or not text or len(text) > NAME_MAX or not ("a" <= text[0] <= "z"):
        return False
    return all(part and _LOWER_DIGITS.issuperset(part) for part in text.split("-"))


def is_module(text: object) -> bool:
    """*text* is a dotted module name (:data:`MODULE_PATTERN`)."""
    # An ASCII string is an identifier exactly when it matches [A-Za-z_][A-Za-z0-9_]*.
    return isinstance(text, str) and text.isascii() and all(part.isidentifier() for part in text.split("."))


def is_entrypoint(text: object) -> bool:
    """*text* is ``module:function`` (:data:`ENTRYPOINT_PATTERN`)."""
    if not isinstance(text, str):
        return False
    module, colon, func = text.partition(":")
    return bool(colon) and is_module(module) and func.isascii() and func.isidentifier()


def is_job_id(text: object) -> bool:
    """*text* is a job id (:data:`JOB_ID_PATTERN`)."""
    return isinstance(text, str) and 0 < len(text) <= 128 and text[0] not in "._-" and _ID_CHARS.issuperset(text)
