"""Credentials inside URLs: masked in messages, dropped from anything stored, refused when malformed.

A registry URL may carry ``user:password@`` (someone pasted it so); whatever forge prints
masks that part, and whatever it writes down (the lock, the JobSpec, a bundle) keeps the
URL without it. A userinfo holding a character RFC 3986 requires to be percent-encoded
(``/``, ``?``, ``#``, ``@``, a blank, a quote) cannot be told apart from the host and
path, so :func:`check_userinfo` refuses such a URL with the whole authority masked
(SPEC §12). Standard library only.

>>> mask_url("error: 'oci://ci:S3cret@127.0.0.1:5000/forge' is not an OCI registry URL")
"error: 'oci://***@127.0.0.1:5000/forge' is not an OCI registry URL"
>>> mask_url("oci://ci:pa/ss-S3cret@host/x")
'oci://***@host/x'
>>> strip_userinfo("oci://ci:S3cret@registry.example/forge")
'oci://registry.example/forge'
>>> mask_authority("oci://ci:pa ss@host:5000/x")
'oci://***/x'
"""

from __future__ import annotations

import re

# scheme://userinfo@ — userinfo runs to the last '@' before a blank or a quote. A '/' is
# taken in too: in 'oci://ci:pa/ss@host/x' the password holds it unencoded, and masking a
# path that held an '@' (over-masking) is the safe mistake.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s'\"]*@")
# A well-formed userinfo: no character that RFC 3986 requires to be percent-encoded there.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_MUST_BE_ENCODED = frozenset("/?#@[]\"'<>\\`{}|^")


def mask_url(text: str) -> str:
    """*text* with the userinfo of every URL in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: m.group("scheme") + "***@", text)


def strip_userinfo(url: str) -> str:
    """*url* without its ``user:password@`` part (unchanged when it has none)."""
    return _USERINFO.sub(lambda m: m.group("scheme"), url)


def mask_authority(url: str) -> str:
    """*url* with everything from ``scheme://`` to the path after its last ``@`` shown as ``***``."""
    scheme = _SCHEME.match(url)
    if scheme is None:
        return "***"
    rest = url[scheme.end():]
    after = rest[rest.rfind("@") + 1:]
    cut = min((i for i in (after.find(c) for c in "/?#") if i >= 0), default=len(after))
    return scheme.group(0) + "***" + after[cut:]


def malformed_userinfo(url: str) -> bool:
    """Whether *url* has a userinfo holding a character RFC 3986 requires percent-encoded.

    The authority of ``scheme://authority/path`` ends at the first ``/``, ``?`` or ``#``, so
    an ``@`` beyond it can only close a userinfo that holds one of those unencoded (or an
    ``@``, a blank, a quote): the host a reader would see is not the host that is meant.
    """
    scheme = _SCHEME.match(url)
    if scheme is None:
        return False
    rest = url[scheme.end():]
    at = rest.rfind("@")
    if at <= 0 or rest.startswith("/"):  # no userinfo, or no authority (file:///a@b)
        return False
    userinfo = rest[:at]
    return any(c in _MUST_BE_ENCODED or c.isspace() or not c.isprintable() for c in userinfo)


def check_userinfo(url: str, what: str = "URL") -> None:
    """Refuse *url* when :func:`malformed_userinfo`, naming it with its authority masked."""
    if malformed_userinfo(url):
        from .errors import UsageError

        raise UsageError(
            f"{what} '{mask_authority(url)}' holds credentials with a character that must be "
            "percent-encoded ('/', '?', '#', '@', a blank or a quote); the host is hidden because it cannot be told apart",
            hint="keep credentials out of URLs: FORGE_REGISTRY_USER and FORGE_REGISTRY_PASSWORD, or docker login "
                 "(or percent-encode them: %2F %3F %23 %40 %20 %22 %27)",
        )
