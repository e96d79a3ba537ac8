"""Look at built HTML pages in headless Chromium: fail on any console error, save screenshots.

    python docs/browser_check.py OUTDIR PAGE.html [PAGE.html ...]
    python docs/browser_check.py --selftest OUTDIR

Each page is opened in Debian's ``chromium`` (headless, driven over the DevTools protocol with a small
stdlib WebSocket client: no Python package needed) at 1280×1600. Everything the page reports as an error
is collected: uncaught exceptions (``Runtime.exceptionThrown``), ``console.error`` / ``console.assert``
calls (``Runtime.consoleAPICalled``) and the browser's own error log entries (``Log.entryAdded``:
resources that fail to load, blocked requests, ...). A screenshot of each page is written to OUTDIR as
``<page stem>.png``. Exit status 0: every page loaded without an error; 1: some error (each printed);
2: usage, or Chromium could not be started.

``--selftest`` checks the checker: a page with a JavaScript error, a ``console.error`` and a missing
script must be reported (three errors), and a clean page must pass.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WIDTH, HEIGHT = 1280, 1600
SETTLE_SECONDS = 0.5     # after the load event, for errors of scripts that run late
TIMEOUT = 60.0


class WebSocket:
    """The client side of RFC 6455, as much as the DevTools protocol needs (text frames, no extensions)."""

    def __init__(self, url: str, timeout: float = TIMEOUT) -> None:
        match = re.fullmatch(r"ws://([^/:]+):(\d+)(/.*)", url)
        if not match:
            raise ValueError(f"not a ws:// URL: {url}")
        host, port, path = match.group(1), int(match.group(2)), match.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the DevTools endpoint closed the connection during the handshake")
            response += chunk
        head, self.buffer = response.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"WebSocket handshake refused: {head.decode(errors='replace')}")

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytearray([0x81])                       # FIN, text frame
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes(header) + mask + masked)

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the DevTools connection closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            opcode, n = first & 0x0F, second & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._read(8))
            mask = self._read(4) if second & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise ConnectionError("the DevTools connection closed")
            if opcode == 0x9:                                 # ping: answer, keep reading
                continue
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if first & 0x80:
                    return message.decode()


class Browser:
    """A headless Chromium and one page target attached through a flat session."""

    def __init__(self, chromium: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="fastdeconv-chromium-")
        self.process = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", f"--window-size={WIDTH},{HEIGHT}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + TIMEOUT
        url = None
        lines = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                url = found.group(1)
                break
        if url is None:
            self.close()
            raise RuntimeError("Chromium did not start its DevTools endpoint:\n" + "".join(lines[-20:]))
        self.ws = WebSocket(url)
        self.next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=WIDTH, height=HEIGHT,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.receive())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = TIMEOUT) -> None:
        self.ws.sock.settimeout(timeout)
        while True:
            event = json.loads(self.ws.receive())
            self.events.append(event)
            if event.get("method") == method:
                return

    def settle(self, seconds: float) -> None:
        """Collect the events of the next ``seconds``."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.ws.sock.settimeout(left)
            try:
                self.events.append(json.loads(self.ws.receive()))
            except (socket.timeout, TimeoutError):
                break
        self.ws.sock.settimeout(TIMEOUT)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def _errors(events: list[dict]) -> list[str]:
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            found.append(f"uncaught exception: {text.splitlines()[0] if text else details}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            found.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            found.append(f"{entry.get('source', 'log')} error: {entry.get('text', '')} {entry.get('url', '')}".rstrip())
    return found


def check(pages: list[Path], outdir: Path, chromium: str) -> dict[Path, list[str]]:
    """{page: its errors} for each page, with a screenshot of each in outdir."""
    outdir.mkdir(parents=True, exist_ok=True)
    browser = Browser(chromium)
    results = {}
    try:
        for page in pages:
            browser.events.clear()
            browser.call("Page.navigate", session=True, url=page.resolve().as_uri())
            browser.wait_for("Page.loadEventFired")
            browser.settle(SETTLE_SECONDS)
            shot = browser.call("Page.captureScreenshot", session=True, format="png")
            target = outdir / f"{page.stem}.png"
            target.write_bytes(base64.b64decode(shot["data"]))
            results[page] = _errors(browser.events)
    finally:
        browser.close()
    return results


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("browser_check: no chromium on the PATH (Debian: apt-get install chromium)")


def selftest(outdir: Path, chromium: str) -> int:
    with tempfile.TemporaryDirectory() as folder:
        bad = Path(folder, "bad.html")
        bad.write_text("<!doctype html><html><body><p>errors</p>"
                       "<script src='missing-script.js'></script>"
                       "<script>console.error('a console error'); undefinedFunction();</script>"
                       "</body></html>")
        good = Path(folder, "good.html")
        good.write_text("<!doctype html><html><body><p>fine</p><script>console.log('ok')</script></body></html>")
        results = check([bad, good], outdir, chromium)
    errors = results[bad]
    wanted = ("uncaught exception", "console.error", "missing-script.js")
    missing = [w for w in wanted if not any(w in e for e in errors)]
    for error in errors:
        print(f"  selftest page reports: {error}")
    if missing or results[good]:
        print(f"browser_check selftest FAILED: not reported {missing}; on the clean page {results[good]}")
        return 1
    print(f"browser_check selftest passed: the page with errors gave {len(errors)}, the clean page none")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "--selftest":
        return selftest(Path(argv[1]), _chromium())
    if len(argv) < 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    outdir, pages = Path(argv[0]), [Path(p) for p in argv[1:]]
    for page in pages:
        if not page.is_file():
            print(f"browser_check: {page} does not exist", file=sys.stderr)
            return 2
    try:
        results = check(pages, outdir, _chromium())
    except (RuntimeError, ConnectionError, OSError) as error:
        print(f"browser_check: {error}", file=sys.stderr)
        return 2
    failed = 0
    for page, errors in results.items():
        shot = outdir / f"{page.stem}.png"
        if errors:
            failed += 1
            print(f"FAIL {page}: {len(errors)} console error(s); screenshot {shot}")
            for error in errors:
                print(f"  {error}")
        else:
            print(f"ok   {page}: no console error; screenshot {shot}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
