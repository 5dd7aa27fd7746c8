#!/usr/bin/env python3
"""Measure a server's RSS with N idle keep-alive connections open.

    scripts/bench/idle-conns.py HOST PORT PID [N] [HOLD_SECONDS]

Reads VmRSS of PID (the baseline), opens N (default 500) TCP connections to
HOST:PORT, sends one `GET /v2/` with `Connection: keep-alive` on each and reads
the whole response (must be 200), then holds every socket open and idle for
HOLD_SECONDS (default 2), reads VmRSS again, and checks how many connections
the server still keeps open. Closes them all and prints one line:

  BASELINE_KIB LOADED_KIB OPEN_AFTER_HOLD N

Exits non-zero if a connection fails or a response is not 200.
"""

import select
import socket
import sys
import time


def vmrss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/%d/status" % pid)


def read_response(sock):
    """Reads one HTTP/1.1 response (Content-Length or chunked body); returns the status."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(4096)
        if not data:
            raise RuntimeError("connection closed before the response headers")
        buf += data
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        want = int(headers["content-length"])
        while len(rest) < want:
            data = sock.recv(4096)
            if not data:
                raise RuntimeError("connection closed in the response body")
            rest += data
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while not rest.endswith(b"0\r\n\r\n"):
            data = sock.recv(4096)
            if not data:
                raise RuntimeError("connection closed in the chunked body")
            rest += data
    if headers.get("connection", "").lower() == "close":
        raise RuntimeError("server answered Connection: close")
    return status


def still_open(sock):
    r, _, _ = select.select([sock], [], [], 0)
    if not r:
        return True  # nothing to read: idle and open
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except OSError:
        return False


def main():
    if not 4 <= len(sys.argv) <= 6:
        sys.exit("usage: idle-conns.py HOST PORT PID [N] [HOLD_SECONDS]")
    host, port, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 500
    hold = float(sys.argv[5]) if len(sys.argv) > 5 else 2.0

    baseline = vmrss_kib(pid)
    req = ("GET /v2/ HTTP/1.1\r\nHost: %s:%d\r\nConnection: keep-alive\r\n"
           "User-Agent: airlock-bench-idle\r\n\r\n" % (host, port)).encode()
    socks = []
    try:
        for i in range(n):
            s = socket.create_connection((host, port), timeout=10)
            socks.append(s)
            s.sendall(req)
            status = read_response(s)
            if status != 200:
                raise RuntimeError("connection %d: GET /v2/ answered %d" % (i, status))
        time.sleep(hold)
        loaded = vmrss_kib(pid)
        open_after = sum(1 for s in socks if still_open(s))
    finally:
        for s in socks:
            s.close()
    print(baseline, loaded, open_after, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
