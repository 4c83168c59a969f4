"""The token flow: a registry's 401 challenge answered with Basic credentials or a Bearer token.

Laptop side (httpx). A request goes out with the ``Authorization`` value held for its
scope (:meth:`Authorizer.header`); a 401 is answered once (:meth:`Authorizer.answer`): a
``Basic`` challenge with the credentials themselves, a ``Bearer`` challenge with a token
fetched from the challenge's realm for the request's scope (an identity token is
exchanged through the OAuth2 ``refresh_token`` grant). Credentials are looked up on the
first challenge, so an anonymous registry never runs a credential helper.

>>> parse_challenge('Bearer realm="https://auth.example.com/token",service="registry"')
('bearer', {'realm': 'https://auth.example.com/token', 'service': 'registry'})
"""

from __future__ import annotations

import base64
import re
from typing import Callable
from urllib.parse import urlsplit

import httpx

from ..errors import RegistryError
from .oci_credentials import Credentials
from .oci_location import OciLocation, is_loopback_url

USER_AGENT = "starforge-oci"
LOGIN_HINT = "set FORGE_REGISTRY_USER and FORGE_REGISTRY_PASSWORD, or add the host to the Docker config.json"

_CHALLENGE_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


def parse_challenge(header: str) -> tuple[str, dict]:
    """``('bearer', {'realm': ..., 'service': ..., 'scope': ...})`` from a WWW-Authenticate value."""
    scheme, _, rest = header.strip().partition(" ")
    params = {}
    for m in _CHALLENGE_PARAM.finditer(rest):
        value = m.group(2) if m.group(2) is not None else m.group(3)
        params[m.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
    return scheme.lower(), params


def says_denied(response: httpx.Response) -> bool:
    """Whether an error body carries the distribution spec's ``DENIED`` code (access to
    the resource refused to an account the registry accepted)."""
    try:
        errors = response.json().get("errors") or []
    except (ValueError, AttributeError):
        return False
    return any(isinstance(e, dict) and str(e.get("code", "")).upper() == "DENIED" for e in errors)


class Authorizer:
    """The ``Authorization`` values for one registry host, per scope, and the answers to its challenges.

    *credentials* may be a callable, resolved on first use. *http* is the client's
    connection pool; *sleep(attempt, response)* its backoff, used with *retries* when the
    token endpoint is unreachable or answers 429/5xx.
    """

    def __init__(
        self,
        location: OciLocation,
        http: httpx.Client,
        credentials: Credentials | None | Callable[[], Credentials | None],
        *,
        insecure: bool,
        retries: int,
        sleep: Callable[[int, httpx.Response | None], None],
    ) -> None:
        self.location = location
        self.insecure = insecure
        self.retries = retries
        self._http = http
        self._credentials = credentials
        self._sleep = sleep
        self._basic: str | None = None  # Authorization value once a Basic challenge was met
        self._tokens: dict[str, str] = {}  # scope -> "Bearer <token>"

    @property
    def credentials(self) -> Credentials | None:
        """Resolved on first use, so an anonymous registry never runs a credential helper."""
        if callable(self._credentials):
            self._credentials = self._credentials()
        return self._credentials

    def header(self, scope: str) -> str | None:
        """The ``Authorization`` value for a request of *scope*, or None before any challenge."""
        return self._tokens.get(scope) or self._basic

    def answer(self, response: httpx.Response, scope: str) -> None:
        """Answer a 401 challenge once; raise when it cannot be answered."""
        header = response.headers.get("www-authenticate", "")
        scheme, params = parse_challenge(header)
        creds = self.credentials
        where = self.location.host
        if scheme == "basic":
            if creds is None:
                raise RegistryError(f"{where} requires a login", hint=LOGIN_HINT)
            if creds.identity_token:
                raise RegistryError(f"{where} asks for a password but {creds.source} holds only an identity token")
            raw = f"{creds.username}:{creds.password}".encode("utf-8")
            self._basic = "Basic " + base64.b64encode(raw).decode("ascii")
            return
        if scheme == "bearer":
            # Fetched afresh each time: a second 401 may be an expired token.
            self._tokens[scope] = "Bearer " + self._fetch_token(params, scope)
            return
        raise RegistryError(f"{where} answered 401 with an unsupported challenge '{header or 'none'}'")

    def credentials_refused(self, response: httpx.Response, scope: str) -> bool:
        """Whether a final 401 means the user's credentials were sent and refused.

        Only under Basic auth: there the credentials go with every request, so a 401 after
        them refuses them (unless the body says ``DENIED``, a refusal for this account).
        Under Bearer auth wrong credentials are refused by the token endpoint already; a
        401 with a token (``insufficient_scope``) is a resource this account may not see.
        """
        if self.credentials is None or self.header(scope) is None:
            return False
        scheme, _ = parse_challenge(response.headers.get("www-authenticate", ""))
        return scheme == "basic" and not says_denied(response)

    def denied(self, response: httpx.Response) -> RegistryError:
        """The error for a 401/403: anonymous access refused, or these credentials refused."""
        creds = self.credentials
        if creds is None:
            return RegistryError(
                f"{self.location.host} refused anonymous access (HTTP {response.status_code})",
                hint=LOGIN_HINT,
            )
        return RegistryError(
            f"{self.location.host} refused the credentials {creds.label} (HTTP {response.status_code})",
            hint=f"check the user name and password from {creds.source}",
        )

    def _fetch_token(self, params: dict, scope: str) -> str:
        realm = params.get("realm")
        if not realm:
            raise RegistryError(f"{self.location.host} sent a Bearer challenge without a realm")
        if urlsplit(realm).scheme != "https" and not (self.insecure or is_loopback_url(realm)):
            raise RegistryError(f"token endpoint {realm} is not HTTPS", hint="use --insecure only for a registry you trust")
        scopes = [s for s in (params.get("scope") or scope).split(" ") if s]
        creds = self.credentials
        for attempt in range(self.retries):
            try:
                if creds is not None and creds.identity_token:
                    form = {"grant_type": "refresh_token", "refresh_token": creds.password,
                            "service": params.get("service", ""), "scope": " ".join(scopes), "client_id": USER_AGENT}
                    r = self._http.post(realm, data=form)
                else:
                    query = [("service", params["service"])] if params.get("service") else []
                    query += [("scope", s) for s in scopes]
                    auth = (creds.username, creds.password) if creds is not None else None
                    r = self._http.get(realm, params=query, auth=auth)
            except httpx.TransportError as exc:
                if attempt + 1 >= self.retries:
                    raise RegistryError(f"cannot reach token endpoint {realm}: {exc}") from None
                self._sleep(attempt, None)
                continue
            if r.status_code >= 500 or r.status_code == 429:
                if attempt + 1 < self.retries:
                    self._sleep(attempt, r)
                    continue
            break
        if r.status_code in (401, 403):
            raise self.denied(r)
        if r.status_code != 200:
            raise RegistryError(f"token endpoint {realm} answered HTTP {r.status_code}")
        try:
            body = r.json()
            token = body.get("token") or body.get("access_token")
        except ValueError:
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"token endpoint {realm} returned no token")
        return token
