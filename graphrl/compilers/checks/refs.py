"""Reference checks: models, threads, tools, rewards, custom parsers.

Input: `Graph` + `Flow`. Output: diagnostics E301-E309 (E309: the environment used without one). User `module:function` references are
imported (from the graph's directory first) and their signatures bound against the arguments given.

Call conventions the runtime uses (and these checks bind):
  tool           fn(**args)                      (sync or async; a parameter named env gets the environment)
  environment    Class(**args)                   (then reset / step / reward / close, each optional)
  parser         fn(text) -> dict | None
  reward         fn(**args) -> float | dict
  group reward   fn(rewards: list, **args) -> list[float]
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

from ...spec.builtins import BUILTIN_GROUP_REWARDS, BUILTIN_REWARDS, BUILTIN_TOOLS, NEEDS_ENVIRONMENT, Signature
from ...spec.diagnostics import Diagnostic, did_you_mean
from ...spec.imports import ImportProblem, resolve_callable, signature_problem
from ...spec.load import Graph
from ...spec.model import POLICY, LLMNode, Parse, ToolNode
from ..flow import Flow


def _models(g: Graph) -> set[str]:
    return set(g.spec.models) | {POLICY}


def check_models(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    models = _models(g)
    for nid, n in g.nodes.items():
        if isinstance(n, LLMNode) and not n.dynamic_model and n.llm not in models:
            yield Diagnostic(
                "E301",
                f"model '{n.llm}' is not declared",
                g.span("nodes", nid, "llm"),
                did_you_mean(n.llm, models) or "declare it under models: with a url: or serve:",
            )
    r = g.spec.reward
    if r and r.judge and r.judge not in models:
        yield Diagnostic(
            "E301",
            f"judge model '{r.judge}' is not declared",
            g.span("reward", "judge"),
            did_you_mean(r.judge, models) or "declare it under models:",
        )
    for name, m in g.spec.models.items():
        if name != POLICY and m.url is None and m.serve is None:
            yield Diagnostic(
                "E003",
                f"frozen model '{name}' needs url: or serve:",
                g.span("models", name, key=True),
                "url: http://HOST:PORT of an SGLang server, or serve: {model_path: ...} for slime",
            )


def check_threads(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    threads = set(g.spec.threads)
    for nid, n in g.nodes.items():
        refs = []
        if isinstance(n, LLMNode) and n.thread:
            refs.append((n.thread, ("nodes", nid, "thread")))
        if n.append_to:
            refs.append((n.append_to.thread, ("nodes", nid, "append_to")))
        for t, path in refs:
            if t not in threads:
                yield Diagnostic(
                    "E306",
                    f"thread '{t}' is not declared",
                    g.span(*path),
                    did_you_mean(t, threads) or "declare it under threads: with its opening prompt",
                )
        if isinstance(n, LLMNode) and n.sample_mode == "thread" and not n.thread:
            yield Diagnostic(
                "E003",
                f"node '{nid}' has sample: thread but no thread:",
                g.span("nodes", nid, "sample"),
                "add thread: NAME, or use sample: call",
            )
        if isinstance(n, LLMNode) and not n.thread and not n.prompt:
            yield Diagnostic(
                "E006", f"llm node '{nid}' needs a prompt: (or a thread: to continue)", g.span("nodes", nid, key=True)
            )


def check_state_writes(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    """E307: `update:` writes only declared state variables (a typo would fail at run time)."""
    declared = set(g.spec.state)
    for nid, n in g.nodes.items():
        for name in n.update:
            if name not in declared:
                yield Diagnostic(
                    "E307",
                    f"node '{nid}' writes '{name}', which is not a state variable",
                    g.span("nodes", nid, "update", name, key=True),
                    did_you_mean(str(name), declared) or f"declare it under state:, e.g. state: {{{name}: null}}",
                )


def _check_builtin(sig: Signature, args: dict[str, Any], what: str, path: tuple, g: Graph) -> Iterator[Diagnostic]:
    for k in args:
        if k not in sig.names:
            yield Diagnostic(
                "E304",
                f"{what} has no argument '{k}'",
                g.span(*path, k, key=True),
                did_you_mean(k, sig.names) or f"its arguments: {', '.join(sig.names)}",
            )
    for k in sig.required:
        if k not in args:
            yield Diagnostic("E304", f"{what} needs argument '{k}'", g.span(*path), f"add {k}: under args:")


def parameter_names(fn: Any) -> list[str]:
    """The keyword-passable parameter names of a user function ([] when it has no signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _check_user(
    ref: str, positional: int, args: dict[str, Any], code: str, path: tuple, g: Graph, env_ok: bool = False
) -> Iterator[Diagnostic]:
    fn = resolve_callable(ref, [g.base_dir])
    if isinstance(fn, ImportProblem):
        yield Diagnostic("E303", fn.message, g.span(*path), fn.hint)
        return
    if env_ok and "env" in parameter_names(fn) and "env" not in args:  # the runtime passes the environment
        if g.spec.environment is None:
            if _required(fn, "env"):
                yield Diagnostic(
                    "E309",
                    f"'{ref}' takes the rollout's environment (a parameter named env), but the graph has no environment:",
                    g.span(*path),
                    "declare environment: {class: module:Class}, or rename the parameter",
                )
                return
        else:
            args = {**args, "env": None}
    problem = signature_problem(fn, positional, args)
    if problem:
        names = parameter_names(fn)
        hint = next((h for k in args if k not in names for h in [did_you_mean(k, names)] if h), None)
        yield Diagnostic("E304", f"'{ref}' does not accept the arguments given: {problem}", g.span(*path), hint)


def _required(fn: Any, name: str) -> bool:
    try:
        p = inspect.signature(fn).parameters.get(name)
    except (TypeError, ValueError):
        return False
    return p is not None and p.default is inspect.Parameter.empty


def _no_environment(g: Graph, name: str, what: str, path: tuple) -> Iterator[Diagnostic]:
    if name in NEEDS_ENVIRONMENT and g.spec.environment is None:
        yield Diagnostic(
            "E309",
            f"{what} '{name}' uses the rollout's environment, but the graph has no environment:",
            g.span(*path),
            "declare environment: {class: module:Class, args: {...}} at the top level",
        )


def check_environment(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    """The environment class imports and accepts its arguments (E303/E304)."""
    env = g.spec.environment
    if env is not None:
        yield from _check_user(env.class_, 0, env.args, "E303", ("environment", "class"), g)


def check_tools(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    for nid, n in g.nodes.items():
        if isinstance(n, ToolNode):
            path = ("nodes", nid, "tool")
            if n.tool in BUILTIN_TOOLS:
                yield from _no_environment(g, n.tool, "tool", path)
                yield from _check_builtin(BUILTIN_TOOLS[n.tool], n.args, f"tool '{n.tool}'", ("nodes", nid, "args"), g)
            elif ":" in n.tool:
                yield from _check_user(n.tool, 0, n.args, "E303", path, g, env_ok=True)
            else:
                yield Diagnostic(
                    "E302",
                    f"unknown tool '{n.tool}'",
                    g.span(*path),
                    did_you_mean(n.tool, BUILTIN_TOOLS)
                    or f"built-in tools: {', '.join(BUILTIN_TOOLS)}; or module:function",
                )
        if isinstance(n, LLMNode) and n.parse:
            yield from _check_parser(g, n.parse, ("nodes", nid, "parse"))


def _check_parser(g: Graph, p: Parse, path: tuple) -> Iterator[Diagnostic]:
    if p.function:
        yield from _check_user(p.function, 1, {}, "E303", path + ("function",), g)
    for pattern_name, pattern in (p.regex or {}).items():
        try:
            re.compile(pattern)
        except re.error as exc:
            yield Diagnostic(
                "E003", f"regex '{pattern_name}' does not compile: {exc}", g.span(*path, "regex", pattern_name)
            )
    if p.fallback:
        yield from _check_parser(g, p.fallback, path + ("fallback",))


def check_node_rewards(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    """A node's own reward: a known reward with fitting arguments, on a node whose tokens are trained (E311)."""
    for nid, n in g.nodes.items():
        nr = getattr(n, "reward", None)
        if nr is None:
            continue
        path = ("nodes", nid, "reward")
        if not (isinstance(n, LLMNode) and n.trained and n.sample_mode != "none"):
            yield Diagnostic(
                "E311",
                f"node '{nid}' has a reward but trains no tokens: there is no sample for it to score",
                g.span(*path, key=True),
                "put the reward on a trained policy node (train: true), or score this in the graph's reward:",
            )
            continue
        if nr.fn in BUILTIN_REWARDS:
            yield from _no_environment(g, nr.fn, "reward", path + ("fn",))
            # rule-based only: node rewards are scored without a judge model
            yield from _check_builtin(BUILTIN_REWARDS[nr.fn], nr.args, f"reward '{nr.fn}'", path + ("args",), g)
        elif ":" in nr.fn:
            yield from _check_user(nr.fn, 0, nr.args, "E303", path + ("fn",), g, env_ok=True)
        else:
            yield Diagnostic(
                "E305",
                f"unknown reward '{nr.fn}'",
                g.span(*path, "fn"),
                did_you_mean(nr.fn, BUILTIN_REWARDS) or f"built-in rewards: {', '.join(BUILTIN_REWARDS)}",
            )


def check_rewards(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    r = g.spec.reward
    if r is None:
        return
    judged = False
    for args_path, fn, args in r.items():
        fn_path = args_path[:-1] + ("fn",)
        if fn in BUILTIN_REWARDS:
            sig = BUILTIN_REWARDS[fn]
            judged |= sig.judge
            yield from _no_environment(g, fn, "reward", fn_path)
            yield from _check_builtin(sig, args, f"reward '{fn}'", args_path, g)
            if fn == "judge" and not r.judge:
                yield Diagnostic("E006", "reward 'judge' needs judge: MODEL", g.span("reward", key=True))
        elif ":" in fn:
            judged = True  # a user reward may ask the judge
            yield from _check_user(fn, 0, args, "E303", fn_path, g, env_ok=True)
        else:
            yield Diagnostic(
                "E305",
                f"unknown reward '{fn}'",
                g.span(*fn_path),
                did_you_mean(fn, BUILTIN_REWARDS) or f"built-in rewards: {', '.join(BUILTIN_REWARDS)}",
            )
    if r.judge and not judged:
        yield Diagnostic(
            "E304",
            f"reward '{r.fn or ', '.join(r.terms or ())}' takes no judge",
            g.span("reward", "judge"),
            f"rewards with a judge: {', '.join(k for k, s in BUILTIN_REWARDS.items() if s.judge)}",
        )
    if r.group:
        if r.group.fn in BUILTIN_GROUP_REWARDS:
            yield from _check_builtin(
                BUILTIN_GROUP_REWARDS[r.group.fn],
                r.group.args,
                f"group reward '{r.group.fn}'",
                ("reward", "group", "args"),
                g,
            )
        elif ":" in r.group.fn:
            yield from _check_user(r.group.fn, 1, r.group.args, "E303", ("reward", "group", "fn"), g)
        else:
            yield Diagnostic(
                "E305",
                f"unknown group reward '{r.group.fn}'",
                g.span("reward", "group", "fn"),
                did_you_mean(r.group.fn, BUILTIN_GROUP_REWARDS)
                or f"built-in group rewards: {', '.join(BUILTIN_GROUP_REWARDS)}",
            )
