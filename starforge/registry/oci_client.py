"""A small client for the OCI distribution API (blobs, manifests, tags, catalog, referrers).

Laptop side (httpx). Knows nothing about plugins: :mod:`starforge.registry.oci` maps plugin
versions onto what this client moves. Where the registry is: :mod:`.oci_location`; whose
credentials: :mod:`.oci_credentials`; how a 401 is answered: :mod:`.oci_auth`.

- Connection errors, 429 and 5xx are retried with exponential backoff, a bounded number of
  times; an interrupted blob upload starts again in a fresh upload session.
- Downloads are hashed while they stream and cut off at the declared size.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import httpx

from ..cluster.jsonload import loads as load_json
from ..errors import RegistryError
from .oci_auth import USER_AGENT, Authorizer
from .oci_credentials import Credentials
from .oci_location import OciLocation
from .oci_tls import RegistryTrust, is_tls_refusal, ssl_context, tls_hint

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"

MANIFEST_MAX = 4 << 20  # what registries must accept; we refuse to read more
DEFAULT_CHUNK = 16 << 20

Update = Callable[[int], None]  # called with the number of bytes just moved (negative: restarted)


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> tuple[str, int]:
    """``(sha256:<hex>, size)`` of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return "sha256:" + h.hexdigest(), size


# -- the client -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Fetched:
    """A manifest as the registry returned it."""

    body: bytes
    media_type: str
    digest: str  # sha256 of body, computed here

    def json(self) -> dict:
        try:
            data = load_json(self.body)
        except ValueError:
            raise RegistryError(f"manifest {self.digest} is not JSON") from None
        if not isinstance(data, dict):
            raise RegistryError(f"manifest {self.digest} is not a JSON object")
        return data


class _Retry(Exception):
    """A transient failure worth another attempt."""


class TransientRegistryError(RegistryError):
    """Unreachable registry, 429 or 5xx: the same request may succeed later."""


class ManifestBlobUnknownError(RegistryError):
    """A manifest PUT refused with ``MANIFEST_BLOB_UNKNOWN``: the registry did not find, or
    could not read, a blob the manifest names. ``digests`` are the blobs it named (may be empty).

    Besides a blob that was never pushed, this is what a registry answers while another
    client commits the same blob: Debian's docker-registry (distribution 2.8, filesystem
    storage) rewrites the repository's link file of a blob in place on every commit
    (truncate, then write), and a manifest PUT that reads the link in between finds it
    empty (``DIGEST_INVALID`` + ``MANIFEST_BLOB_UNKNOWN``). Pushing the blob again rewrites
    the link; the caller decides whether to (a bounded number of times).
    """

    def __init__(self, message: str, *, digests: tuple = (), hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.digests = digests


class OciClient:
    """Talks to one registry host. ``retries`` bounds every retry loop; ``backoff`` is the first delay."""

    def __init__(
        self,
        location: OciLocation,
        *,
        insecure: bool = False,
        credentials: Credentials | None | Callable[[], Credentials | None] = None,
        trust: RegistryTrust | None = None,
        retries: int = 4,
        backoff: float = 0.25,
        chunk_size: int = DEFAULT_CHUNK,
        timeout: float = 60.0,
    ) -> None:
        self.location = location
        self.insecure = insecure
        self.trust = trust or RegistryTrust()
        self.retries = max(1, retries)
        self.backoff = backoff
        self.chunk_size = max(1 << 16, chunk_size)
        self._http = httpx.Client(
            verify=ssl_context(self.trust, verify=not insecure),
            timeout=httpx.Timeout(timeout, connect=10.0),
            headers={"User-Agent": USER_AGENT},
            follow_redirects=False,
        )
        self.auth = Authorizer(location, self._http, credentials, insecure=insecure, retries=self.retries,
                               sleep=self._sleep)
        self.catalog_page = 1000  # repositories asked for per catalog page
        self._base: str | None = None

    def close(self) -> None:
        self._http.close()

    @property
    def credentials(self) -> Credentials | None:
        """Resolved on first use, so an anonymous registry never runs a credential helper."""
        return self.auth.credentials

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def base(self) -> str:
        """``https://host`` or, for loopback/insecure hosts that do not speak TLS, ``http://host``."""
        if self._base is None:
            https = f"https://{self.location.host}"
            if not (self.location.is_loopback or self.insecure):
                self._base = https
            else:
                try:
                    self._http.get(f"{https}/v2/", timeout=5.0)
                    self._base = https
                except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.ConnectTimeout) as exc:
                    if is_tls_refusal(exc):
                        self._base = https  # it speaks TLS: let the certificate error surface
                    else:
                        # Not TLS (or not up at all: then http fails the same way and says so).
                        self._base = f"http://{self.location.host}"
        return self._base

    def _url(self, path: str) -> str:
        return f"{self.base}{path}"

    def _absolute(self, location: str) -> str:
        return str(httpx.URL(self.base + "/").join(location))

    def _sleep(self, attempt: int, response: httpx.Response | None) -> None:
        delay = self.backoff * (2 ** attempt)
        if response is not None and response.headers.get("retry-after", "").isdigit():
            delay = max(delay, min(float(response.headers["retry-after"]), 30.0))
        time.sleep(delay)

    def _unreachable(self, exc: Exception) -> RegistryError:
        tls = tls_hint(self.location.host, exc, self.trust)
        if tls is not None:  # it answered, and the TLS handshake failed: not worth retrying
            return RegistryError(f"registry {self.location.host}: TLS handshake failed: {exc}", hint=tls)
        hint = "is the registry running and reachable?"
        if self.base.startswith("https://") and not self.location.is_loopback and not self.insecure:
            hint += " a registry that speaks plain HTTP needs --insecure"
        return TransientRegistryError(f"cannot reach registry {self.location.host}: {exc}", hint=hint)

    def request(
        self,
        method: str,
        url: str,
        *,
        scope: str,
        headers: dict | None = None,
        content: bytes | None = None,
        ok: tuple = (200,),
        allow: tuple = (),
        retry: bool = True,
    ) -> httpx.Response:
        """Send with auth and retries; return a response whose status is in *ok* or *allow*."""
        attempts = self.retries if retry else 1
        auth_rounds = 0
        attempt = 0
        while True:
            hdrs = dict(headers or {})
            authz = self.auth.header(scope)
            if authz:
                hdrs["Authorization"] = authz
            try:
                r = self._http.request(method, url, headers=hdrs, content=content)
            except httpx.TransportError as exc:
                attempt += 1
                if attempt >= attempts or is_tls_refusal(exc):
                    raise self._unreachable(exc) from None
                self._sleep(attempt - 1, None)
                continue
            if r.status_code == 401 and auth_rounds < 2:
                auth_rounds += 1
                self.auth.answer(r, scope)
                continue
            if r.status_code in ok or r.status_code in allow:
                return r
            if (r.status_code >= 500 or r.status_code == 429) and attempt + 1 < attempts:
                attempt += 1
                self._sleep(attempt - 1, r)
                continue
            raise self.error(r, f"{method} {httpx.URL(url).path}")

    def error(self, r: httpx.Response, what: str) -> RegistryError:
        if r.status_code in (401, 403):
            return self.auth.denied(r)
        detail = ""
        errors: list = []
        try:
            errors = [e for e in r.json().get("errors") or [] if isinstance(e, dict)]
            detail = "; ".join(f"{e.get('code')}: {e.get('message')}"
                               + (f" {e['detail']}" if isinstance(e.get("detail"), str) and e["detail"] else "")
                               for e in errors)
        except (ValueError, AttributeError):
            pass
        message = f"{self.location.host}: {what} failed with HTTP {r.status_code}" + (f" ({detail})" if detail else "")
        if r.status_code == 400 and what.startswith("PUT ") and "/manifests/" in what and any(e.get("code") == "MANIFEST_BLOB_UNKNOWN" for e in errors):
            named = tuple(e["detail"] for e in errors if e.get("code") == "MANIFEST_BLOB_UNKNOWN"
                          and isinstance(e.get("detail"), str) and e["detail"].startswith("sha256:"))
            return ManifestBlobUnknownError(message, digests=named)
        cls = TransientRegistryError if r.status_code >= 500 or r.status_code == 429 else RegistryError
        return cls(message)

    @staticmethod
    def scope(repository: str, actions: str = "pull") -> str:
        return f"repository:{repository}:{actions}"

    # -- API ----------------------------------------------------------------------------------

    def ping(self) -> None:
        """``GET /v2/``: reachable, speaks the API, and our credentials (if asked) work."""
        self.request("GET", self._url("/v2/"), scope="")

    def blob_size(self, repo: str, digest: str) -> int | None:
        """Size of a blob present in *repo*, or None."""
        r = self.request("HEAD", self._url(f"/v2/{repo}/blobs/{digest}"), scope=self.scope(repo),
                         ok=(200,), allow=(404,))
        if r.status_code == 404:
            return None
        return int(r.headers.get("content-length", "-1"))

    def push_blob(self, repo: str, source: bytes | Path, digest: str, size: int,
                  progress: Update | None = None, *, again: bool = False) -> bool:
        """Upload a blob unless the registry has it; return True when bytes were sent.

        Up to ``chunk_size`` bytes go in one POST + PUT; larger blobs as PATCH chunks and a
        closing PUT with the digest. An upload interrupted by a connection error or a 5xx
        starts again from byte 0 in a new session, at most ``retries`` times. ``again``
        uploads without asking first (the registry said it could not see the blob; its
        commit of our upload checks the digest and rewrites its own records of the blob).
        """
        if not again and self.blob_size(repo, digest) == size:
            if progress:
                progress(size)
            return False
        scope = self.scope(repo, "pull,push")
        for attempt in range(self.retries):
            sent = 0

            def counting(n: int) -> None:
                nonlocal sent
                sent += n
                if progress:
                    progress(n)

            try:
                self._upload_once(repo, source, digest, size, scope, counting)
                return True
            except _Retry as exc:
                if progress and sent:
                    progress(-sent)  # the bar goes back: the bytes are sent again
                if attempt + 1 >= self.retries:
                    raise exc.args[0] from None
                self._sleep(attempt, None)
        raise AssertionError("unreachable")

    def _upload_once(self, repo, source, digest, size, scope, progress) -> None:
        try:
            r = self.request("POST", self._url(f"/v2/{repo}/blobs/uploads/"), scope=scope,
                             headers={"Content-Length": "0"}, ok=(202,), retry=False)
            location = self._absolute(r.headers["location"])
            chunk_size = self.chunk_size
            if r.headers.get("oci-chunk-min-length", "").isdigit():
                chunk_size = max(chunk_size, int(r.headers["oci-chunk-min-length"]))
            if size <= chunk_size:
                data = source if isinstance(source, bytes) else Path(source).read_bytes()
                # Data goes with the PUT: a POST body with ?digest= is dropped by some registries.
                url = str(httpx.URL(location).copy_merge_params({"digest": digest}))
                self.request("PUT", url, scope=scope, content=data, ok=(201,), retry=False,
                             headers={"Content-Type": "application/octet-stream"})
                progress(len(data))
                return
            offset = 0
            for chunk in _chunks(source, chunk_size):
                end = offset + len(chunk) - 1
                r = self.request("PATCH", location, scope=scope, content=chunk, ok=(202,), retry=False,
                                 headers={"Content-Type": "application/octet-stream",
                                          "Content-Range": f"{offset}-{end}"})
                location = self._absolute(r.headers.get("location", location))
                offset = end + 1
                progress(len(chunk))
            if offset != size:
                raise RegistryError(f"blob source changed while uploading ({offset} bytes read, {size} expected)")
            url = str(httpx.URL(location).copy_merge_params({"digest": digest}))
            self.request("PUT", url, scope=scope, headers={"Content-Length": "0"}, ok=(201,), retry=False)
        except TransientRegistryError as exc:
            raise _Retry(exc) from None

    def fetch_blob(self, repo: str, digest: str, size: int, out, progress: Update | None = None) -> None:
        """Stream a blob into the binary file *out*, refusing bytes beyond *size* or a wrong digest.

        Restarts from the beginning on a dropped connection (``out`` is truncated first).
        """
        scope = self.scope(repo)
        url = self._url(f"/v2/{repo}/blobs/{digest}")
        algo, _, want = digest.partition(":")
        if algo != "sha256":
            raise RegistryError(f"unsupported digest algorithm in {digest}")
        for attempt in range(self.retries):
            out.seek(0)
            out.truncate()
            h = hashlib.sha256()
            got = 0
            try:
                r = self._open_stream(url, scope)
                try:
                    for chunk in r.iter_bytes(1 << 20):
                        got += len(chunk)
                        if got > size:
                            raise RegistryError(f"blob {digest} is larger than the {size} bytes the manifest declares",
                                                hint="the registry serves altered content; report it to its operator")
                        h.update(chunk)
                        out.write(chunk)
                        if progress:
                            progress(len(chunk))
                finally:
                    r.close()
            except httpx.TransportError as exc:
                if progress and got:
                    progress(-got)
                if attempt + 1 >= self.retries or is_tls_refusal(exc):
                    raise self._unreachable(exc) from None
                self._sleep(attempt, None)
                continue
            if got != size:
                raise RegistryError(f"blob {digest} is truncated: {got} of {size} bytes",
                                    hint="the registry serves altered content; report it to its operator")
            if h.hexdigest() != want:
                raise RegistryError(f"blob {digest} does not match its digest (got sha256:{h.hexdigest()})",
                                    hint="the registry serves altered content; report it to its operator")
            return
        raise AssertionError("unreachable")

    def _open_stream(self, url: str, scope: str) -> httpx.Response:
        """GET with auth, following redirects (blob storage behind a CDN), as an open stream."""
        auth_rounds = 0
        attempt = 0
        while True:
            hdrs = {}
            authz = self.auth.header(scope)
            if authz:
                hdrs["Authorization"] = authz
            target = url
            for _ in range(6):
                r = self._http.send(self._http.build_request("GET", target, headers=hdrs), stream=True)
                if r.status_code not in (301, 302, 303, 307, 308):
                    break
                r.close()
                new = httpx.URL(target).join(r.headers["location"])
                if new.host != httpx.URL(target).host or new.port != httpx.URL(target).port:
                    hdrs.pop("Authorization", None)  # never hand the token to the storage host
                target = str(new)
            if r.status_code == 200:
                return r
            r.read()
            r.close()
            if r.status_code == 401 and auth_rounds < 2:
                auth_rounds += 1
                self.auth.answer(r, scope)
                continue
            if (r.status_code >= 500 or r.status_code == 429) and attempt + 1 < self.retries:
                attempt += 1
                self._sleep(attempt - 1, r)
                continue
            if r.status_code == 404:
                raise RegistryError(f"{self.location.host}: blob missing: {httpx.URL(url).path}",
                                    hint="the registry lost content a manifest refers to")
            raise self.error(r, f"GET {httpx.URL(url).path}")

    def read_blob(self, repo: str, digest: str, size: int, limit: int) -> bytes:
        """A small blob (config, signature) as bytes, checked like :meth:`fetch_blob`."""
        if size > limit or size < 0:
            raise RegistryError(f"blob {digest} declares {size} bytes; more than the {limit} allowed here")
        with tempfile.TemporaryFile() as f:
            self.fetch_blob(repo, digest, size, f)
            f.seek(0)
            return f.read()

    def get_manifest(self, repo: str, reference: str, accept: tuple = (OCI_MANIFEST,)) -> Fetched | None:
        """The manifest at a tag or digest, or None when absent."""
        r = self.request("GET", self._url(f"/v2/{repo}/manifests/{reference}"), scope=self.scope(repo),
                         headers={"Accept": ", ".join(accept)}, ok=(200,), allow=(404,))
        if r.status_code == 404:
            return None
        body = r.content
        if len(body) > MANIFEST_MAX:
            raise RegistryError(f"manifest {repo}:{reference} is larger than {MANIFEST_MAX} bytes")
        digest = sha256_digest(body)
        if reference.startswith("sha256:") and digest != reference:
            raise RegistryError(f"manifest {reference} does not match its digest (got {digest})",
                                hint="the registry serves altered content; report it to its operator")
        media_type = r.headers.get("content-type", "").split(";", 1)[0].strip()
        return Fetched(body=body, media_type=media_type, digest=digest)

    def manifest_digest(self, repo: str, reference: str, accept: tuple = (OCI_MANIFEST,)) -> str | None:
        """Digest of the manifest at *reference* (computed from its bytes), or None."""
        got = self.get_manifest(repo, reference, accept)
        return got.digest if got else None

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> httpx.Response:
        """PUT a manifest under a tag or its digest; the body is stored byte for byte."""
        return self.request("PUT", self._url(f"/v2/{repo}/manifests/{reference}"),
                            scope=self.scope(repo, "pull,push"), content=body,
                            headers={"Content-Type": media_type}, ok=(201,))

    def delete_manifest(self, repo: str, digest: str) -> bool:
        """Delete by digest (registries refuse deletes by tag); False when absent."""
        r = self.request("DELETE", self._url(f"/v2/{repo}/manifests/{digest}"), scope=self.scope(repo, "delete"),
                         ok=(202,), allow=(404,))
        return r.status_code == 202

    def tags(self, repo: str) -> list[str]:
        """Every tag of *repo* ([] when it does not exist), following ``Link`` pages."""
        return list(self._paged(self._url(f"/v2/{repo}/tags/list"), "tags", self.scope(repo)))

    def catalog(self) -> list[str]:
        """Every repository name, following ``Link`` pages."""
        return list(self._paged(self._url(f"/v2/_catalog?n={self.catalog_page}"), "repositories", "registry:catalog:*"))

    def _paged(self, url: str, key: str, scope: str) -> Iterator[str]:
        seen = 0
        catalog = key == "repositories"
        while url:
            r = self.request("GET", url, scope=scope, ok=(200,), allow=(401, 403, 404) if catalog else (404,))
            if r.status_code == 401 and catalog and self.auth.credentials_refused(r, scope):
                # still 401 after our credentials were sent: they are wrong, as publish and
                # pull would say; not a catalog restricted to other accounts
                raise self.auth.denied(r)
            if r.status_code in (401, 403, 404) and catalog:
                # GHCR has no catalog; Harbor shows it to administrators only.
                raise RegistryError(
                    f"{self.location.host} does not list its repositories to this account (HTTP {r.status_code})",
                    hint="name the plugin instead: forge plugin show OWNER/NAME")
            if r.status_code == 404:
                return
            try:
                items = r.json().get(key) or []
            except (ValueError, AttributeError):
                raise RegistryError(f"{self.location.host}: {key} listing is not JSON") from None
            yield from items
            seen += 1
            url = _next_link(r.headers.get("link", ""))
            url = self._absolute(url) if url else ""
            if seen > 10_000:
                raise RegistryError(f"{self.location.host}: {key} listing does not end")

    def referrers(self, repo: str, digest: str, artifact_type: str | None = None) -> list[dict] | None:
        """Descriptors of manifests whose ``subject`` is *digest*, or None without a referrers API."""
        url = self._url(f"/v2/{repo}/referrers/{digest}")
        if artifact_type:
            url = str(httpx.URL(url).copy_merge_params({"artifactType": artifact_type}))
        r = self.request("GET", url, scope=self.scope(repo), headers={"Accept": OCI_INDEX}, ok=(200,),
                         allow=(404, 405, 400))
        if r.status_code != 200:
            return None
        try:
            manifests = r.json().get("manifests") or []
        except (ValueError, AttributeError):
            return None
        return [m for m in manifests if isinstance(m, dict)]


def _chunks(source: bytes | Path, size: int) -> Iterator[bytes]:
    if isinstance(source, bytes):
        for i in range(0, len(source), size):
            yield source[i:i + size]
        return
    with open(source, "rb") as f:
        while chunk := f.read(size):
            yield chunk


def _next_link(header: str) -> str:
    """The ``rel="next"`` target of an RFC 5988 Link header, or ''."""
    for part in header.split(","):
        m = re.match(r'\s*<([^>]*)>\s*;(.*)', part)
        if m and re.search(r'rel\s*=\s*"?next"?', m.group(2)):
            return m.group(1)
    return ""
