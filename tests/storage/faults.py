"""A loopback HTTP proxy in front of an S3 server that injects faults.

Every request is forwarded to the upstream server; a fault added with
:meth:`FaultProxy.add` replaces the answer to the next ``times`` matching
requests (a ``GET`` whose ``Range`` starts at ``start``, or any request of
``method``): ``"503"`` (SlowDown), ``"403"`` (AccessDenied), ``"truncate"``
(the full ``Content-Length`` announced, ``keep`` bytes of body sent, then
the connection closed) or ``"reset"`` (``keep`` bytes, then a TCP reset).
``latency`` delays every answer (a round trip to a distant store). Used by
the tests and by benchmarks/remote.py; it listens on 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")

_SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
              b"<Message>Please reduce your request rate.</Message></Error>")
_DENIED = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
           b"<Message>Access Denied</Message></Error>")


@dataclass
class Fault:
    kind: str  # "503", "403", "truncate", "reset"
    method: str = "GET"
    start: int | None = None  # the Range start to match (GET); None: any
    times: int = 1
    keep: int = 0  # body bytes sent before a truncation or reset
    hits: int = 0


@dataclass
class Seen:
    method: str
    path: str
    start: int | None
    end: int | None
    fault: str | None = None


@dataclass
class FaultProxy:
    upstream: tuple[str, int]
    latency: float = 0.0
    faults: list[Fault] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()

    def add(self, kind: str, **kw: object) -> Fault:
        fault = Fault(kind, **kw)  # type: ignore[arg-type]
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()
            self.seen.clear()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()

    # ------------------------------------------------------------------ serving
    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _pick(self, method: str, start: int | None) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.hits < f.times and f.method == method and (f.start is None or f.start == start):
                    f.hits += 1
                    return f
        return None

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = [tuple(x.split(":", 1)) for x in lines[1:] if ":" in x]
                hmap = {k.strip().lower(): v.strip() for k, v in headers}
                length = int(hmap.get("content-length", "0"))
                while len(buf) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                body, buf = buf[:length], buf[length:]
                m = _RANGE.match(hmap.get("range", ""))
                start = int(m.group(1)) if m else None
                end = int(m.group(2)) if m and m.group(2) else None
                fault = self._pick(method, start)
                with self._lock:
                    self.seen.append(Seen(method, target, start, end, fault.kind if fault else None))
                if self.latency:
                    time.sleep(self.latency)
                if fault is not None and fault.kind in ("503", "403"):
                    self._error(conn, fault.kind)
                    continue
                status, reason, rheaders, rbody = self._forward(method, target, headers, body)
                if fault is not None:  # truncate / reset
                    self._send_head(conn, status, reason, rheaders, len(rbody))
                    conn.sendall(rbody[: fault.keep])
                    if fault.kind == "reset":
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                self._send_head(conn, status, reason, rheaders,
                                None if method == "HEAD" else len(rbody))
                if method != "HEAD":
                    conn.sendall(rbody)
        except OSError:
            return
        finally:
            conn.close()

    def _forward(self, method: str, target: str, headers: list[tuple[str, ...]],
                 body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        up = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            up.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                up.putheader(k.strip(), v.strip())
            up.endheaders(body or None)
            resp = up.getresponse()
            rbody = resp.read()
            return resp.status, resp.reason, resp.getheaders(), rbody
        finally:
            up.close()

    @staticmethod
    def _send_head(conn: socket.socket, status: int, reason: str,
                   headers: list[tuple[str, str]], length: int | None) -> None:
        out = [f"HTTP/1.1 {status} {reason}"]
        for k, v in headers:
            if k.lower() in ("transfer-encoding", "connection") or (
                    length is not None and k.lower() == "content-length"):
                continue
            out.append(f"{k}: {v}")
        if length is not None:
            out.append(f"Content-Length: {length}")
        conn.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))

    @staticmethod
    def _error(conn: socket.socket, kind: str) -> None:
        body, status = (_SLOW_DOWN, "503 Slow Down") if kind == "503" else (_DENIED, "403 Forbidden")
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
