"""Open a page in a real headless Chromium and report what rendered (tests only).

Chromium comes from the Debian package (``scripts/setup_browser.sh``, run by ``make test``); it
is driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``: JSON messages
ended by a NUL byte on file descriptors 3 and 4), so no WebSocket client or driver is needed.

:func:`open_page` loads a file, waits for its load event, and returns every image's
``naturalWidth`` / ``naturalHeight``, every console error and uncaught exception, and a PNG
screenshot of the whole page.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def chromium_binary() -> str | None:
    """The Chromium to use: ``$CHROMIUM``, else ``chromium`` / ``chromium-browser`` on PATH."""
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@dataclass
class PageResult:
    images: list[dict]  # {"alt", "complete", "naturalWidth", "naturalHeight"}
    errors: list[str]  # console errors, uncaught exceptions, failed loads
    screenshot: bytes  # PNG of the whole page
    title: str


class _Pipe:
    """One DevTools session over Chromium's debugging pipe."""

    def __init__(self, proc: subprocess.Popen, to_browser: int, from_browser: int) -> None:
        self.proc, self.out, self.inp = proc, to_browser, from_browser
        self.next_id, self.buffer, self.events = 0, b"", []
        self.session: str | None = None

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.inp], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self.inp, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium closed the pipe (exit code {self.proc.poll()})")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, timeout_s: float = 30.0) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self.out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout_s
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)


def _errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                              for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            details = p.get("exceptionDetails", {})
            what = details.get("exception", {}).get("description") or details.get("text", "")
            out.append(f"exception: {what} ({details.get('url', '?')}:{details.get('lineNumber')})")
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append("log: " + p["entry"].get("text", ""))
    return out


def open_page(path: Path, width: int = 1000, timeout_s: float = 60.0) -> PageResult:
    """Load ``path`` in headless Chromium (module docs). RuntimeError when Chromium is missing."""
    binary = chromium_binary()
    if binary is None:
        raise RuntimeError("chromium is not installed: run scripts/setup_browser.sh (make test "
                           "does), or set CHROMIUM to a Chromium binary")
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()

    def wire_fds() -> None:  # in the child: its fd 3 reads our commands, fd 4 writes replies
        high_r = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10)  # out of the way of 3 and 4 first
        high_w = fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
        os.dup2(high_r, 3)  # dup2's copies are inherited across exec
        os.dup2(high_w, 4)

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    proc = subprocess.Popen(
        [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--disable-extensions",
         "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=wire_fds, close_fds=False)
    os.close(to_r)
    os.close(from_w)
    pipe = _Pipe(proc, to_w, from_r)
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"}, timeout_s)["targetId"]
        pipe.session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 timeout_s)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            pipe.call(f"{domain}.enable")
        pipe.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False})
        nav = pipe.call("Page.navigate", {"url": path.resolve().as_uri()}, timeout_s)
        if nav.get("errorText"):
            raise RuntimeError(f"chromium could not open {path}: {nav['errorText']}")
        pipe.wait_event("Page.loadEventFired", timeout_s)
        probe = ("JSON.stringify({title: document.title, images: [...document.images].map(i => "
                 "({alt: i.alt, complete: i.complete, naturalWidth: i.naturalWidth, "
                 "naturalHeight: i.naturalHeight}))})")
        value = json.loads(pipe.call("Runtime.evaluate", {"expression": probe,
                                                          "returnByValue": True})["result"]["value"])
        size = pipe.call("Page.getLayoutMetrics")["cssContentSize"]
        pipe.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": int(size["height"]) + 1, "deviceScaleFactor": 1,
                   "mobile": False})
        shot = pipe.call("Page.captureScreenshot", {"format": "png"}, timeout_s)["data"]
        time.sleep(0.2)  # let late console messages arrive
        try:
            pipe.call("Runtime.evaluate", {"expression": "1"})
        except (TimeoutError, RuntimeError):
            pass
        return PageResult(value["images"], _errors(pipe.events), base64.b64decode(shot),
                          value["title"])
    finally:
        try:
            pipe.call("Browser.close", timeout_s=5)
        except Exception:  # noqa: BLE001 - it is going away either way
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        os.close(to_w)
        os.close(from_r)
        shutil.rmtree(profile, ignore_errors=True)
