"""`graphrl doctor`: what this machine gives graphrl, starting with the python tool's sandbox.

Input: the environment (GRAPHRL_SANDBOX, GRAPHRL_SANDBOX_STRICT). Output: one line per guarantee of
the sandbox backend in force here (read from the report of one trivial sandboxed run, not assumed),
or the same as JSON with --json.

Invariants: it runs one `pass` in the sandbox and nothing else; a bad sandbox setting exits 2.
"""

from __future__ import annotations

import json
import os

import click

from ..tools.sandbox_fork import sandbox_report
from ..tools.sandbox_host import SandboxPolicy, resolve_backend

# report key -> what it means for model-written code, as docs/sandbox.md words it
GUARANTEES = (
    ("network_isolated", "no network (IP and abstract sockets)"),
    ("unix_sockets_blocked", "no unix-domain sockets (socket files on the host unreachable)"),
    ("pid_namespace", "own pid namespace (dies with the run; host processes invisible)"),
    ("ipc_namespace", "own IPC namespace (the host's SysV and POSIX IPC objects out of reach)"),
    ("filesystem_readonly", "read-only file system except its work directory"),
    ("strict_root", "strict root: none of your files visible"),
    ("dev_minimal", "minimal /dev"),
    ("capabilities_dropped", "no capabilities, no_new_privs"),
)


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the sandbox report as JSON.")
def doctor_command(as_json: bool) -> None:
    """Say which sandbox backend the python tool uses here and which guarantees hold.

    \b
    Example:
      graphrl doctor
      GRAPHRL_SANDBOX=launcher GRAPHRL_SANDBOX_STRICT=1 graphrl doctor --json
    """
    policy = SandboxPolicy.from_env(os.environ)
    resolve_backend(policy)  # bubblewrap asked for by name but unusable: exit 2 with the fix
    rep = sandbox_report(policy=policy)
    if as_json:
        click.echo(json.dumps(rep, indent=2, sort_keys=True))
        return
    click.echo(f"python sandbox: backend {rep.get('backend', '?')}{' (strict)' if policy.strict else ''}")
    for key, text in GUARANTEES:
        click.echo(f"  [{'yes' if rep.get(key) else 'NO '}] {text}")
    click.echo(f"  processes: {rep.get('process_limit') or 'no cap'}")
    click.echo(f"  memory:    {rep.get('memory_limit')}")
    click.echo(f"  disk:      {rep.get('disk_limit') or 'per file only (RLIMIT_FSIZE)'}")
    for err in rep.get("errors") or []:
        click.echo(f"  note: {err}")
    if policy.backend == "auto" and rep.get("backend") not in ("bubblewrap", "fork"):
        click.echo("  (install Debian's `bubblewrap` to use it as the backend: docs/sandbox.md)")
