"""Hostile inputs, measured: each case in its own process, wall time and peak RSS, against bounds.

Run: `python -m benchmarks.hostile_inputs` (about 10 s). Prints a table; the targets (memory under
1 GiB, time under 10 s per case) are checked here, never as timed assertions in the test suite.

Cases: YAML nested 100,000 flow brackets deep; YAML 1,500 block levels deep; a merge-key alias bomb
(24 levels of `<<: [*prev, *prev]`); a 50 MB data row read by `graphrl run`'s reader; a 50 MB
prompt rendered by an llm node (`limits.max_prompt_tokens` refuses it before tokenising).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "yaml: 100k flow brackets": """
from graphrl.spec.yamlsrc import load_yaml
loc = load_yaml("a: " + "[" * 100_000 + "]" * 100_000, "deep.yaml")
print(loc.diagnostics[0].code, loc.diagnostics[0].message)
""",
    "yaml: 1,500 block levels": """
from graphrl.spec.yamlsrc import load_yaml
text = "".join("  " * i + f"k{i}:\\n" for i in range(1500)) + "  " * 1500 + "v: 1\\n"
loc = load_yaml(text, "deep.yaml")
print(loc.diagnostics[0].code, loc.diagnostics[0].message)
""",
    "yaml: merge-key bomb (24 levels)": """
from graphrl.spec.yamlsrc import load_yaml
text = "a0: &a0 {x: 1, y: 2}\\n" + "".join(f"a{i}: &a{i}\\n  <<: [*a{i-1}, *a{i-1}]\\n  k{i}: 1\\n" for i in range(1, 25))
loc = load_yaml(text, "bomb.yaml")
print(loc.diagnostics[0].code, loc.diagnostics[0].message[:80])
""",
    "data: a 50 MB row": """
from graphrl.runtime.runner import read_rows
try:
    read_rows(ROWS)
except ValueError as exc:
    print(str(exc)[:100])
""",
    "prompt: 50 MB rendered": """
import asyncio
from graphrl.compilers.lower import plan_from_path
from graphrl.engines.scripted import ScriptedEngineForTests
from graphrl.models.tokenizer import qwen_tokenizer
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.chat import ChatRenderer
from graphrl.runtime.executor import Executor, RolloutInput
from graphrl.runtime.services import StaticEndpoints
from graphrl.tools.registry import ToolBox
plan, _ = plan_from_path(GRAPH)
tok = qwen_tokenizer()
ex = Executor(plan, StaticEndpoints({"policy": ScriptedEngineForTests(["x"], tokenizer=tok)}, ChatRenderer(tok)),
              tools=ToolBox(), rewards=RewardBox())
res = asyncio.run(ex.run(RolloutInput(row={"prompt": "w " * 25_000_000}, rollout_id=0)))
print(res.status, res.error[:100])
""",
}


def _run(code: str) -> tuple[float, float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            code + "\nimport resource, sys\n"
            "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    wall = time.perf_counter() - t0
    rss_kib = next((int(x.split()[1]) for x in r.stderr.splitlines() if x.startswith("RSS ")), -1)
    out = (r.stdout.strip() or r.stderr.strip().splitlines()[-1])[:90]
    return wall, rss_kib / 1024, out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = Path(tmp) / "rows.jsonl"
        rows.write_text(json.dumps({"prompt": "x" * 50_000_000}) + "\n")
        graph = Path(tmp) / "g.yaml"
        graph.write_text(
            "name: huge\ninputs: {question: prompt}\nnodes:\n"
            '  solve: {llm: policy, prompt: [{user: "{{ question }}"}]}\n'
        )
        print("| case | wall s | peak RSS MiB | target | result |")
        print("|---|---|---|---|---|")
        for name, code in CASES.items():
            code = code.replace("ROWS", repr(str(rows))).replace("GRAPH", repr(str(graph)))
            wall, rss, out = _run(code)
            ok = wall < 10 and rss < 1024
            print(f"| {name} | {wall:.2f} | {rss:.0f} | {'met' if ok else 'MISSED'} (< 10 s, < 1024 MiB) | {out} |")
    print(
        f"\n(python {sys.version.split()[0]}, RSS includes the interpreter and graphrl's imports; "
        f"this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB)"
    )


if __name__ == "__main__":
    main()
