#!/usr/bin/env python3
"""tests/tools/page_check.py URL_OR_FILE SCREENSHOT.png: opens a page in headless Chromium (Debian's chromium) over the
DevTools protocol, and reports as JSON what a reader would meet: console errors (console.error, uncaught exceptions,
the browser's own error log entries such as a resource that failed to load), every <figure class="chart"> with the
size its <svg> was laid out at and its number of text elements, every <img> and whether it decoded, the links, and a
full-page screenshot. Exit 0 when there is no error and every chart has a laid-out SVG, 1 otherwise.

The protocol is spoken over a minimal WebSocket client (RFC 6455: masked text frames out, fragmented frames in,
ping answered), so nothing beyond Python's standard library and Chromium is needed."""
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

BROWSERS = ("chromium", "chromium-browser", "google-chrome")

# What the page shows, measured in the page after it loaded.
PROBE = """(() => {
  const charts = [...document.querySelectorAll('figure.chart')].map(f => {
    const s = f.querySelector('svg'), r = s ? s.getBoundingClientRect() : null;
    return {id: f.id, svg: !!s, width: r ? r.width : 0, height: r ? r.height : 0,
            texts: s ? s.querySelectorAll('text').length : 0,
            caption: (f.querySelector('figcaption') || {}).textContent || ''};
  });
  const images = [...document.images].map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}));
  const links = [...document.querySelectorAll('a')].map(a => a.getAttribute('href'));
  return {title: document.title, charts, images, links, height: document.documentElement.scrollHeight};
})()"""


def browser():
    for b in BROWSERS:
        if shutil.which(b):
            return shutil.which(b)
    return None


class WebSocket:
    def __init__(self, url, timeout):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (u.path, u.hostname, u.port,
                                                                                         key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the browser closed the WebSocket handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError("WebSocket handshake refused: %r" % head.split(b"\r\n")[0])
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def _exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the browser closed the WebSocket")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _frame(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else \
            bytes([0x80 | 127]) + struct.pack(">Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send(self, text):
        self._frame(1, text.encode())

    def recv(self):
        parts = []
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            mask = self._exact(4) if b1 & 0x80 else None
            payload = self._exact(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = b0 & 0x0F
            if opcode == 9:  # ping
                self._frame(10, payload)
                continue
            if opcode == 8:
                raise ConnectionError("the browser closed the WebSocket")
            if opcode in (0, 1, 2):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode()


class Page:
    """One tab of a headless Chromium started for it, driven over the DevTools protocol."""

    def __init__(self, timeout=60, width=1400):
        self.exe = browser()
        if not self.exe:
            raise FileNotFoundError("no Chromium (%s) on PATH" % ", ".join(BROWSERS))
        self.timeout, self.width = timeout, width
        self.profile = tempfile.mkdtemp(prefix="voxscale-chromium-")
        self.log = open(os.path.join(self.profile, "chromium.log"), "w")
        self.proc = subprocess.Popen(
            [self.exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--remote-debugging-port=0", "--user-data-dir=" + self.profile,
             "--window-size=%d,900" % width, "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + timeout
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                raise RuntimeError("Chromium did not open its DevTools port; its log: %s" % self.log.name)
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        targets = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=timeout))
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = WebSocket(page["webSocketDebuggerUrl"], timeout)
        self.next_id, self.events = 0, []
        for m in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(m)

    def call(self, method, params=None):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method):
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if any(e["method"] == method for e in self.events):
                return
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError("no %s within %d s" % (method, self.timeout))

    def errors(self):
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.%s: %s" % (p["type"], " ".join(str(a.get("value", a.get("description", "")))
                                                                   for a in p.get("args", []))))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: %s" % d.get("exception", {}).get("description", d.get("text", "?")))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                en = p["entry"]
                out.append("log (%s): %s %s" % (en.get("source"), en.get("text"), en.get("url", "")))
        return out

    def open(self, url, screenshot):
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")
        probe = self.call("Runtime.evaluate", {"expression": PROBE, "returnByValue": True})["result"]["value"]
        height = max(600, min(int(probe["height"]), 30000))
        self.call("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": height,
                                                         "deviceScaleFactor": 1, "mobile": False})
        shot = self.call("Page.captureScreenshot", {"format": "png"})
        with open(screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        probe["errors"] = self.errors()
        probe["screenshot"] = screenshot
        return probe

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the browser and the helpers it started, its own session
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def check(url, screenshot, timeout=60):
    """The probe of one page (see the module's doc string)."""
    if os.path.exists(url):
        url = "file://" + os.path.abspath(url)
    page = Page(timeout)
    try:
        return page.open(url, screenshot)
    finally:
        page.close()


def problems(probe):
    """What is wrong with a probed page: console errors, charts without a laid-out SVG, images that did not decode."""
    out = list(probe["errors"])
    out += ["chart %s has no SVG laid out (%sx%s px)" % (c["id"], c["width"], c["height"])
            for c in probe["charts"] if not (c["svg"] and c["width"] > 100 and c["height"] > 100 and c["texts"] > 0)]
    out += ["image %s did not load" % i["src"] for i in probe["images"] if not i["ok"]]
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: page_check.py URL_OR_FILE SCREENSHOT.png")
    p = check(sys.argv[1], sys.argv[2])
    print(json.dumps(p, indent=1))
    bad = problems(p)
    for b in bad:
        print("problem: " + b)
    sys.exit(1 if bad else 0)
