"""The catalogue opened where teams open it, in a real headless chromium (SPEC §19): straight from
the file system after the folder was moved, from ``forge catalog serve``, and from a plain web
server under a sub-path; hostile registry text looked at in the DOM; screenshots at 1280 and 400
pixels, light and dark, saved by the run."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.catalog import (
    ANYONES_REASON,
    ATTR_OUT,
    BREAK_OUT,
    CONTROL,
    HOSTILE_FILE,
    NORM,
    YANK_REASON,
    build_world,
    publish_hostile,
)

from starforge.terminal_text import shown

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A catalogue built from the test registry (with mallory's hostile plugin), then moved elsewhere."""
    root = tmp_path_factory.mktemp("catalog-site")
    user, registry = build_world(root)
    publish_hostile(registry, root)
    user.forge("catalog", "build", "--registry", registry, "-o", root / "built")
    moved = root / "moved" / "team-catalogue"
    moved.parent.mkdir()
    shutil.move(root / "built", moved)
    return moved


def key_id(site: Path, owner: str) -> str:
    doc = json.loads((site / "catalog.json").read_text())
    return next(k["key_id"] for k in doc["trust"]["keys"] if k["owner"] == owner)


def in_version(browser, version: str, css: str):
    """The text of the element *css* in the section of *version* (None when there is none)."""
    return browser.run("var e = document.getElementById(arguments[0]).querySelector(arguments[1]);"
                       "return e && e.textContent", "v" + version, css)


def count(browser) -> str:
    return browser.run("return document.getElementById('count').textContent")


def test_from_the_file_system_the_index_lists_filters_and_links_without_a_request(browser, site):
    browser.requests()
    index = (site / "index.html").as_uri()
    browser.open(index)
    names = browser.run("return [...document.querySelectorAll('ul.plugins > li a.name')].map(a => a.textContent)")
    assert names == ["alice/dr-grpo", "bob/env-math", "carol/adv-scale", "mallory/hostile"]
    assert count(browser) == "4 of 4 plugins"

    browser.type("#q", "dr-grpo")  # typed as a user types: one key event at a time
    assert count(browser) == "1 of 4 plugins"
    assert browser.run("return [...document.querySelectorAll('ul.plugins > li:not([hidden]) a.name')]"
                       ".map(a => a.textContent)") == ["alice/dr-grpo"]
    browser.clear("#q")
    browser.click("#f-kind option[value='environment']")
    assert count(browser) == "1 of 4 plugins"
    browser.click("#f-kind option[value='']")
    browser.click("#f-target option[value='toy_grpo.advantages']")
    assert count(browser) == "1 of 4 plugins"
    browser.click("#f-target option[value='']")
    browser.click("#f-owner option[value='alice']")
    assert count(browser) == "1 of 4 plugins"
    browser.click("#f-owner option[value='']")
    browser.click("#f-yanked option[value='yes']")
    assert count(browser) == "2 of 4 plugins"  # alice's 0.1.0, mallory's 0.2.0 (an unverified yank is not one)
    browser.click("#f-yanked option[value='']")

    # the relative link still works in the moved folder, and so does the way back
    browser.click("a.name[href='plugins/alice/dr-grpo.html']")
    assert browser.run("return location.href") == (site / "plugins" / "alice" / "dr-grpo.html").as_uri()
    assert browser.run("return document.querySelector('h1').textContent") == "alice/dr-grpo"
    browser.click("header.top a")
    assert browser.run("return location.href") == index
    # nothing was requested but the two pages themselves: no script, style, font or image file, no fetch
    assert browser.requests() == [index, (site / "plugins" / "alice" / "dr-grpo.html").as_uri(), index]


@pytest.fixture
def served(site):
    """``forge catalog serve`` of the catalogue, as its own process, on a free port; its base URL."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "starforge", "catalog", "serve", str(site), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stderr.readline()
        assert line.startswith(f"serving {site} at http://127.0.0.1:"), line
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()


def test_a_plugin_page_served_by_forge_catalog_serve_shows_choices_default_key_and_yank(browser, site, served):
    browser.requests()
    browser.open(served + "plugins/alice/dr-grpo.html#v0.2.0")
    row = "tr[data-param='dr_grpo.norm']"
    assert in_version(browser, "0.2.0", f"{row} td.choices") == '"token", "sequence"'
    assert in_version(browser, "0.2.0", f"{row} td.default") == json.dumps(NORM["default"])
    # the param is new in 0.2.0: 0.1.0 does not have it, and 0.2.0's change says so
    assert in_version(browser, "0.1.0", row) is None
    change = in_version(browser, "0.2.0", "ul.change")
    assert "params added: dr_grpo.norm" in change and "files added (1): norm.py" in change
    # the signed version's key id and type, verified when built
    sig = in_version(browser, "0.2.0", "dl.facts")
    assert f"verified by {key_id(site, 'alice')} (ed25519)" in sig
    # the yanked version's reason, and whose word it is; the unsigned yank of 0.2.0 shown as changing nothing
    assert in_version(browser, "0.1.0", ".yank .reason") == YANK_REASON
    assert in_version(browser, "0.1.0", ".yank").startswith("Yanked (verified): ")
    assert browser.run("return [...document.querySelectorAll('nav.versions a.yanked')].map(a => a.textContent)") == ["0.1.0"]
    assert in_version(browser, "0.2.0", ".yank") is None
    assert "it changes nothing" in in_version(browser, "0.2.0", ".unverified-yank")
    assert in_version(browser, "0.2.0", ".unverified-yank .reason") == ANYONES_REASON
    copy = browser.run("return document.getElementById('add-v0.2.0').textContent")
    assert copy == "forge plugin add alice/dr-grpo@0.2.0"
    browser.click("button.copy[data-for='add-v0.2.0']")  # selects the line (and copies it where the page may)
    assert browser.run("return window.getSelection().toString()") == copy
    assert all(url.startswith(served) for url in browser.requests())


@pytest.fixture
def sub_path_server(site, tmp_path):
    """A plain static web server whose document root holds the catalogue at /team/catalogue/."""
    root = tmp_path / "www"
    (root / "team").mkdir(parents=True)
    shutil.copytree(site, root / "team" / "catalogue")

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_under_a_sub_path_of_a_web_server_every_link_stays_inside_it(browser, sub_path_server):
    base = sub_path_server + "/team/catalogue/"
    browser.requests()
    browser.open(base + "index.html")
    browser.click("a.name[href='plugins/carol/adv-scale.html']")
    assert browser.run("return location.href") == base + "plugins/carol/adv-scale.html"
    assert browser.run("return document.querySelector('footer a').href") == base + "catalog.json"
    browser.click("header.top a")
    assert browser.run("return location.href") == base + "index.html"
    assert browser.requests() == [base + "index.html", base + "plugins/carol/adv-scale.html", base + "index.html"]


def test_hostile_registry_text_stays_text_in_the_dom(browser, site):
    browser.open((site / "plugins" / "mallory" / "hostile.html").as_uri())
    assert browser.run("return window.pwned") is None
    assert browser.run("return document.scripts.length") == 1  # the page's own
    assert browser.run("return document.images.length") == 0
    assert browser.run("return document.querySelectorAll('[onerror],[onfocus],[autofocus]').length") == 0
    description = browser.run("return document.querySelector('header.top p.desc').textContent")
    assert description == shown(BREAK_OUT + "\n" + CONTROL, keep="\n").replace("\u2028", "\\u2028")
    assert "^[[2J" in description and "\\u202eevil" in description and "LS\\u2028end" in description
    assert not any(c in description for c in "\x1b\x07\u202e\u2028")
    default = in_version(browser, "0.1.0", "tr[data-param='hostile.p'] td.default")
    assert default == json.dumps(ATTR_OUT, ensure_ascii=False)
    added = in_version(browser, "0.2.0", "ul.change")
    assert shown(HOSTILE_FILE) in added
    reason = in_version(browser, "0.2.0", ".yank .reason")  # an unsigned yank's reason is anyone's text
    assert reason == shown(BREAK_OUT + " " + CONTROL).replace("\u2028", "\\u2028")
    # the policy is in force: a script the page did not ship does not run
    assert browser.run("var s = document.createElement('script'); s.textContent = 'window.injected = 1';"
                       "document.body.appendChild(s); return window.injected") is None
    csp = browser.run("return document.querySelector('meta[http-equiv=Content-Security-Policy]').content")
    assert csp.startswith("default-src 'none'; script-src 'sha256-")


@pytest.mark.parametrize("width", [1280, 400])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_at_1280_and_400_pixels_light_and_dark(browser, site, screenshots, width, scheme):
    browser.emulate(width, dark=scheme == "dark")
    try:
        backgrounds = []
        for page in ("index.html", "plugins/alice/dr-grpo.html", "plugins/mallory/hostile.html"):
            browser.open((site / page).as_uri())
            # readable: nothing wider than the window, so nothing needs a sideways scroll
            assert browser.run("return document.documentElement.scrollWidth") <= width, page
            backgrounds.append(browser.run("return getComputedStyle(document.body).backgroundColor"))
            name = page.replace("/", "-").removesuffix(".html")
            assert browser.screenshot(screenshots / f"{name}-{width}-{scheme}.png").stat().st_size > 5000
        assert backgrounds == [{"light": "rgb(251, 251, 250)", "dark": "rgb(21, 23, 27)"}[scheme]] * 3
    finally:
        browser.emulate(1280, dark=False)
