"""A real headless browser for the catalogue's tests: Debian's ``chromium``, driven through
``chromedriver`` (W3C WebDriver over HTTP on 127.0.0.1) with the standard library only.

The browser starts with a fresh profile, every background service of its own off (no
update, sync or component checks) and a proxy at a port where nothing listens: a request
to any host but loopback fails there instead of leaving the machine, and every request the
pages make is still recorded (the DevTools ``Network`` events chromedriver logs), so a test
can assert that none was made. Stopped by its own PIDs.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.oci import free_port

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--window-size=1280,900"]
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def need_browser() -> tuple:
    chromium = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        reason = "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver; .ci/setup does)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return chromium, driver


class Browser:
    """One chromedriver and one headless chromium session, shared by a test session."""

    def __init__(self, root: Path) -> None:
        chromium, driver = need_browser()
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.dead_proxy = free_port()  # nothing listens here: non-loopback requests fail at it
        self.log = open(root / "chromedriver.log", "wb")
        self.proc = subprocess.Popen([driver, f"--port={self.port}", "--allowed-ips=127.0.0.1"], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except (OSError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError(f"chromedriver did not start; see {root / 'chromedriver.log'}")
            time.sleep(0.05)
        options = {"binary": chromium, "args": [*FLAGS, f"--user-data-dir={root / 'profile'}",
                                                 f"--proxy-server=127.0.0.1:{self.dead_proxy}"]}
        caps = {"browserName": "chrome", "goog:chromeOptions": options, "goog:loggingPrefs": {"performance": "ALL"}}
        try:
            self.session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["sessionId"]
            self.open("about:blank")
            self.requests()  # the browser's own start-up (its new-tab page), not a page's
        except Exception:
            self.close()
            raise

    # -- the protocol -----------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else (b"{}" if method == "POST" else None)
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())["value"]
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"WebDriver {method} {path}: {exc.read().decode(errors='replace')[:2000]}") from None

    def _s(self, method: str, path: str, body: dict | None = None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def cdp(self, cmd: str, params: dict | None = None):
        """A DevTools protocol command (chromedriver's ``goog/cdp/execute``)."""
        return self._s("POST", "/goog/cdp/execute", {"cmd": cmd, "params": params or {}})

    # -- what tests use ---------------------------------------------------------------------

    def open(self, url: str) -> None:
        self._s("POST", "/url", {"url": url})

    def run(self, script: str, *args):
        """Run *script* (a function body) in the page; its return value."""
        return self._s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css: str) -> dict:
        return self._s("POST", "/element", {"using": "css selector", "value": css})

    def type(self, css: str, keys: str) -> None:
        """Type *keys* into the element *css* as a user does (key events, so ``input`` events fire)."""
        self._s("POST", f"/element/{self.find(css)[ELEMENT]}/value", {"text": keys})

    def clear(self, css: str) -> None:
        self._s("POST", f"/element/{self.find(css)[ELEMENT]}/clear")

    def click(self, css: str) -> None:
        self._s("POST", f"/element/{self.find(css)[ELEMENT]}/click")

    def requests(self) -> list:
        """The URLs of every request the browser made since the last call (the Network events logged)."""
        out = []
        for entry in self._s("POST", "/se/log", {"type": "performance"}):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                out.append(message["params"]["request"]["url"])
        return out

    def emulate(self, width: int, dark: bool) -> None:
        """A viewport *width* pixels wide, in the dark or the light colour scheme."""
        self.cdp("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                         "mobile": width < 600})
        self.cdp("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme",
                                                               "value": "dark" if dark else "light"}]})

    def screenshot(self, path: Path, *, full: bool = True) -> Path:
        """The page as a PNG at *path* (the whole page, not only the viewport, when *full*)."""
        shot = self.cdp("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": full})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        if getattr(self, "session", None):
            try:
                self._call("DELETE", f"/session/{self.session}")
            except (OSError, RuntimeError):
                pass
            self.session = None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
