"""`graphrl serve --model tiny` in a subprocess, for tests that speak HTTP (a real server process)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def tiny_server(timeout_s: float = 180.0):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphrl.cli", "serve", "--model", "tiny", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"graphrl serve exited: {proc.stderr.read()}")
            try:
                if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("graphrl serve did not become healthy") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
