"""Real OCI registries: Debian ``docker-registry`` on 127.0.0.1.

Each instance gets a free port, its own storage directory and config; it is stopped by its
own PID. A missing binary fails the test under CI and skips it elsewhere.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REGISTRY_BIN = "docker-registry"


def need_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"{name} is not installed (apt-get install docker-registry apache2-utils skopeo)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RegistryServer:
    """One ``docker-registry serve`` process; restartable on the same port and storage."""

    root: Path
    port: int
    htpasswd: Path | None = None
    user: str | None = None
    password: str | None = None
    # TLS: (certificate, key) of the server, and the CA files whose client certificates it requires
    tls: tuple | None = None
    client_cas: tuple = ()
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def url(self) -> str:
        return f"oci://127.0.0.1:{self.port}/forge"

    @property
    def http(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def write_config(self) -> Path:
        auth = ""
        if self.htpasswd is not None:
            auth = f"auth:\n  htpasswd:\n    realm: forge-test\n    path: {self.htpasswd}\n"
        config = self.root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.storage}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n  secret: forge-test-secret-{self.port}\n"
            + self._tls_config()
            + auth
        )
        return config

    def _tls_config(self) -> str:
        if not self.tls:
            return ""
        cert, key = self.tls
        clients = "".join(f"      - {ca}\n" for ca in self.client_cas)
        return f"  tls:\n    certificate: {cert}\n    key: {key}\n" + (f"    clientcas:\n{clients}" if clients else "")

    def _ready(self) -> bool:
        if self.tls:  # a TCP connection is enough: TLS may require a client certificate
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False
        import httpx  # here, not at the top: every test module's collection imports this one

        try:
            return httpx.get(f"{self.http}/v2/", timeout=1).status_code in (200, 401)
        except httpx.TransportError:
            return False

    def start(self) -> "RegistryServer":
        binary = need_binary(REGISTRY_BIN)
        config = self.write_config()
        log = open(self.root / "registry.log", "ab")
        self.proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {(self.root / 'registry.log').read_text()[-2000:]}")
            if self._ready():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("docker-registry did not become ready in 15 s")

    def kill(self) -> None:
        """SIGKILL: a crash, no chance to finish anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def new_server(root: Path, *, auth: bool = False, tls: tuple | None = None, client_cas: tuple = ()) -> RegistryServer:
    """A started registry; *tls* = (certificate, key) serves HTTPS, *client_cas* then requires client certificates."""
    root.mkdir(parents=True, exist_ok=True)
    server = RegistryServer(root=root, port=free_port(), tls=tls, client_cas=client_cas)
    if auth:
        htpasswd = need_binary("htpasswd")
        server.user, server.password = "alice", "s3cret-pass"
        out = subprocess.run([htpasswd, "-Bbn", server.user, server.password], check=True,
                             capture_output=True, text=True).stdout
        server.htpasswd = root / "htpasswd"
        server.htpasswd.write_text(out)
    return server.start()
