"""Credentials inside URLs: masked in messages, dropped from anything stored.

A registry URL may carry ``user:password@`` (someone pasted it so); whatever forge prints
masks that part, and whatever it writes down (the lock, the JobSpec, a bundle) keeps the
URL without it. Standard library only.

>>> mask_url("error: 'oci://ci:S3cret@127.0.0.1:5000/forge' is not an OCI registry URL")
"error: 'oci://***@127.0.0.1:5000/forge' is not an OCI registry URL"
>>> strip_userinfo("oci://ci:S3cret@registry.example/forge")
'oci://registry.example/forge'
"""

from __future__ import annotations

import re

# scheme://userinfo@ — userinfo runs to the last '@' before the path, a blank or a quote.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s'\"]*@")


def mask_url(text: str) -> str:
    """*text* with the userinfo of every URL in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: m.group("scheme") + "***@", text)


def strip_userinfo(url: str) -> str:
    """*url* without its ``user:password@`` part (unchanged when it has none)."""
    return _USERINFO.sub(lambda m: m.group("scheme"), url)
