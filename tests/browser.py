"""A real headless Chromium, driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages ended by NUL on file descriptors 3 and 4), with nothing but the standard library.

:func:`chromium` finds the browser; a test without it skips with a reason, and fails instead
when the environment variable CI is set (.ci/run installs it), so CI can never pass without
having loaded the page.

    with Browser() as b:
        page = b.load(Path("report.html"), width=1280)
        page.console_errors, page.requests, page.evaluate("document.title"), page.screenshot()
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--disable-default-apps", "--mute-audio", "--remote-debugging-pipe")


def chromium() -> str:
    """The Chromium executable; skips the test (fails it under CI) when there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    why = "no Chromium on PATH (apt-get install -y chromium) for the HTML report's browser test"
    if os.environ.get("CI"):
        pytest.fail(why + "; CI must have it")
    pytest.skip(why)


@dataclass
class Page:
    """What loading a page gave: console errors, uncaught exceptions, failed loads, every
    request's URL, and a session to query it with."""

    browser: "Browser"
    session: str
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        reply = self.browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                  self.session)
        return reply["result"]["value"]

    def screenshot(self) -> bytes:
        """A PNG of the whole page, at the width it was loaded with."""
        reply = self.browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                                  self.session)
        return base64.b64decode(reply["data"])


class Browser:
    """One headless Chromium with a fresh profile, closed on exit."""

    def __init__(self, timeout: float = 60) -> None:
        self.timeout = timeout
        self._next = 0
        self._events: list[dict] = []
        self._buf = b""

    def __enter__(self) -> "Browser":
        self.profile = tempfile.mkdtemp(prefix="gapscope-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds() -> None:  # the child's fd 3 reads commands, fd 4 writes replies
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        # close_fds=False: subprocess would close 3 and 4 after fds() ran; the other descriptors
        # of this process are not inheritable, so nothing else leaks into the browser.
        self.proc = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=fds, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # noqa: BLE001 - closing a browser that already went
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read(self) -> dict:
        import select

        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._from_chrome], [], [], self.timeout)
            if not ready:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise ConnectionError("Chromium closed the pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one command and wait for its reply (events that come first are kept)."""
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def _wait_for(self, method: str, session: str) -> None:
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self._events):
            self._events.append(self._read())

    def load(self, path: Path, width: int = 1280, height: int = 900) -> Page:
        """Open ``path`` in a fresh tab ``width`` CSS pixels wide and wait for its load event."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", {}, session)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
        self.call("Emulation.setScrollbarsHidden", {"hidden": True}, session)  # all ``width`` is the page's
        self._events.clear()
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, session)
        self._wait_for("Page.loadEventFired", session)
        page = Page(self, session)
        for e in self._events:
            if e.get("sessionId") != session:
                continue
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
                page.console_errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif e["method"] == "Runtime.exceptionThrown":
                page.console_errors.append(p["exceptionDetails"].get("text", "exception"))
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                page.console_errors.append(p["entry"].get("text", ""))
            elif e["method"] == "Network.loadingFailed":
                page.console_errors.append(f"failed to load: {p.get('errorText')}")
            elif e["method"] == "Network.requestWillBeSent":
                page.requests.append(p["request"]["url"])
        return page
