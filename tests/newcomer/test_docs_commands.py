"""The README's and the docs' command examples, run as a newcomer would on a fresh clone.

Every `graphrl ...` line of a ```bash block in README.md and docs/*.md is run (in a copy of the
repository's graphs/, data/, prompts/ and docs/, so `graphrl schema -o docs/...` writes no tracked
file), with the substitutions the docs themselves name: `graphrl run` gets `--model tiny` (the
random-weight model; the default SmolLM2 takes minutes) plus `--limit 1 --max-new-tokens-cap 8
--quiet`; `graphrl serve` is started in the background on a free port and the lines that talk to
port 30000 use that port; a trailing `| less -R` is dropped. Lines that cannot run offline or that
name files the docs create elsewhere (`...`, `serve-retrieval`, the tutorial's critique.yaml,
covered by tests/test_tutorial.py) are skipped and listed. Each command must exit 0; the first
trajectory and a graph are also drawn to every visualize format. A renamed flag, a moved file, or a default
that no longer works fails here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN_EXTRA = ["--limit", "1", "--max-new-tokens-cap", "8", "--quiet"]


def doc_commands() -> list[tuple[str, str]]:
    out = []
    for f in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", f.read_text(encoding="utf-8"), re.S):
            for line in block.splitlines():
                line = re.sub(r"\s+#.*$", "", line.strip())
                if line.startswith("graphrl "):
                    out.append((f.name, line))
    return out


def skip_reason(line: str, root: Path) -> str | None:
    if "..." in line or line.endswith("\\"):
        return "a placeholder"
    if line.startswith("graphrl serve-retrieval"):
        return "a long-running service"
    for word in shlex.split(line.split("|")[0]):
        if word.endswith(".yaml") and "*" not in word and not (root / word).exists():
            return f"{word} is made by the doc's own steps"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_documented_command_runs(tmp_path):
    root = tmp_path / "clone"
    for d in ("graphs", "data", "prompts", "docs"):
        shutil.copytree(REPO / d, root / d)
    env = {**os.environ, "GRAPHRL_DEBUG": ""}
    py = [sys.executable, "-m", "graphrl"]
    commands = doc_commands()
    assert len(commands) >= 15, commands
    assert any("serve" in c for _, c in commands) and any("--engine sglang" in c for _, c in commands)
    port = free_port()
    server = None
    ran, skipped, trajectories = [], [], []
    try:
        for doc, line in commands:
            reason = skip_reason(line, root)
            if reason:
                skipped.append((doc, line, reason))
                continue
            args = shlex.split(line.split(" | ")[0])[1:]
            args = [a.replace("/tmp/", f"{tmp_path}/") for a in args]
            if args[0] == "serve":
                args = [a if a != "30000" else str(port) for a in args]
                server = subprocess.Popen(
                    py + args, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                )
                url = server.stdout.readline().strip()  # printed once /health answers 200
                assert url.startswith("http://"), f"{doc}: `{line}` printed {url!r}"
                ran.append(line)
                continue
            if args[0] == "run":
                args = [a.replace(":30000", f":{port}") for a in args]
                if "--engine" not in args and "--model" not in args:
                    args += ["--model", "tiny"]
                args += RUN_EXTRA
                trajectories.append(args[args.index("--out") + 1])
            if any(a.startswith("graphs/*") for a in args):  # the shell's glob, as the docs' shells do
                i = next(i for i, a in enumerate(args) if a.startswith("graphs/*"))
                args[i : i + 1] = sorted(str(p.relative_to(root)) for p in (root / "graphs").glob("*.yaml"))
            p = subprocess.run(py + args, cwd=root, env=env, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, f"{doc}: `{line}` exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
            ran.append(line)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    assert any("--engine sglang" in line for line in ran), "the HTTP example did not run"
    traj = trajectories[0]  # the README's quick start: every trajectory format
    for ext in (".html", ".trace.json", ".txt"):
        p = subprocess.run(
            py + ["visualize", traj, "-o", str(tmp_path / ("v" + ext))],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, f"visualize {traj} {ext}: {p.stderr}"
    for ext in (".html", ".dot", ".mmd", ".txt"):  # .svg is in the docs' own lines
        p = subprocess.run(
            py + ["visualize", "graphs/agentflow.yaml", "-o", str(tmp_path / ("g" + ext))],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, f"visualize graph {ext}: {p.stderr}"
    print(f"ran {len(ran)} documented commands; skipped: {skipped}")
