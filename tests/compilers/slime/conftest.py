"""Fixtures for the slime target's tests (helpers live in slime_testkit.py, importable by name)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest
from slime_testkit import REPO, SlimeKit, free_port

from graphrl.models.tokenizer import qwen_tokenizer


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)


@pytest.fixture(scope="session")
def qwen_tok():
    return qwen_tokenizer()


@pytest.fixture
def slime_kit(tmp_path, qwen_tok) -> SlimeKit:
    return SlimeKit(tmp_path, qwen_tok)


@pytest.fixture(scope="session")
def tiny_server():
    """`graphrl serve --model tiny` in a subprocess (the real SGLang-protocol server); yields its URL."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphrl.cli", "serve", "--model", "tiny", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            ),
        },
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"graphrl serve exited: {proc.stderr.read()}")
        try:
            if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        raise RuntimeError("graphrl serve did not become healthy")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """The tiny model exported as a Hugging Face directory (what --hf-checkpoint points at)."""
    pytest.importorskip("torch")
    from graphrl.models.registry import export

    return export("tiny", tmp_path_factory.mktemp("tiny-hf") / "tiny")
