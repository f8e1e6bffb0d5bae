"""Per-rollout environments: a graph's `environment:` -> one live user object per rollout.

Input: the plan's `EnvironmentDecl` (a `module:Class`, arguments rendered over the rollout's inputs,
constants and row, a timeout). Output: the instance, registered in the rollout's `RolloutResources`
under `KEY` (so it is closed when the rollout ends, whatever ended it), and the value its `reset()`
returned (`env` in templates; {} when it returns None).

Call conventions (each method optional, sync ones run in a worker thread, async ones awaited, every
call bounded by the declaration's `timeout`):
  Class(**args)        made once per rollout, never shared between rollouts
  reset() -> value     right after; its value is `{{ env }}` (e.g. a task description)
  step(action)         the `env_step` tool: a str, a dict (text / done / reward / info / ok), or a
                       gym-style tuple (observation, reward, done, info)
  reward() -> value    the `env_reward` reward: a float or a dict
  close()              at the rollout's end; its errors are kept, never raised into the result
User tools and rewards with a parameter named `env` receive the instance.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..plan import Plan
from .deadline import within
from .rollout import RolloutFault
from .services import RolloutResources, ToolResult

KEY = "environment"


class EnvironmentFailure(RolloutFault):
    """The environment could not be made or reset: the rollout ends `failed` with this message."""


async def call_method(obj: Any, name: str, *args: Any, timeout: float) -> Any:
    """`obj.name(*args)` (sync in a thread, async awaited) within `timeout`; None when it has no such method."""
    fn = getattr(obj, name, None)
    if fn is None:
        return None
    return await within(_call(fn, *args), timeout)


async def _call(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kw)
    value = await asyncio.to_thread(fn, *args, **kw)
    return await value if inspect.isawaitable(value) else value


async def open_environment(
    plan: Plan, cls: Callable[..., Any], args: dict[str, Any], resources: RolloutResources
) -> Any:
    """Make the rollout's environment, register it for closing, reset it; the reset value ({} if None)."""
    decl = plan.environment
    assert decl is not None
    try:
        env = await within(_call(cls, **args), decl.timeout)
    except asyncio.TimeoutError:
        raise EnvironmentFailure(f"environment {decl.class_}: making it took over {decl.timeout:g} s") from None
    except Exception as exc:
        raise EnvironmentFailure(f"environment {decl.class_}({_short(args)}): {type(exc).__name__}: {exc}") from exc
    resources.put(KEY, LiveEnvironment(env, decl.timeout))
    try:
        value = await call_method(env, "reset", timeout=decl.timeout)
    except asyncio.TimeoutError:
        raise EnvironmentFailure(f"environment {decl.class_}: reset() took over {decl.timeout:g} s") from None
    except Exception as exc:
        raise EnvironmentFailure(f"environment {decl.class_}: reset(): {type(exc).__name__}: {exc}") from exc
    return {} if value is None else value


async def env_reward(live: LiveEnvironment | None) -> Any:
    """The `env_reward` reward: `env.reward()` (raises: a reward failure fails the rollout, as any reward's)."""
    if live is None:
        raise ValueError("env_reward: this graph has no environment:")
    if getattr(live.env, "reward", None) is None:
        raise ValueError(f"env_reward: {type(live.env).__name__} has no reward()")
    return await call_method(live.env, "reward", timeout=live.timeout)


def environment_of(resources: RolloutResources | None) -> LiveEnvironment | None:
    """The rollout's live environment (the user object is `.env`), or None."""
    holder = resources.get(KEY) if resources is not None else None
    return holder if isinstance(holder, LiveEnvironment) else None


class LiveEnvironment:
    """The user object and its timeout, held in `RolloutResources`; closed within the timeout."""

    def __init__(self, env: Any, timeout: float):
        self.env = env
        self.timeout = timeout

    async def close(self) -> None:
        await call_method(self.env, "close", timeout=self.timeout)


async def step(live: LiveEnvironment | None, action: Any) -> ToolResult:
    """The `env_step` tool: `env.step(action)` as an observation (never raises)."""
    if live is None:
        return ToolResult("[env_step: this graph has no environment:]", ok=False, error="no environment")
    env, timeout = live.env, live.timeout
    if getattr(env, "step", None) is None:
        return ToolResult(f"[env_step: {type(env).__name__} has no step()]", ok=False, error="no step()")
    try:
        value = await call_method(env, "step", action, timeout=timeout)
    except asyncio.TimeoutError:
        return ToolResult(f"[env_step timed out after {timeout:g} s]", ok=False, error="timeout")
    except Exception as exc:
        return ToolResult(
            f"[env_step failed: {type(exc).__name__}: {exc}]", ok=False, error=f"{type(exc).__name__}: {exc}"
        )
    return as_step_result(value)


def as_step_result(value: Any) -> ToolResult:
    """str / dict / gym-style (observation, reward, done, info[, ...]) -> ToolResult with done/reward/info data."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, tuple) and len(value) >= 3:
        obs, reward, done = value[0], value[1], value[2]
        info = value[3] if len(value) > 3 else {}
        data = {"done": bool(done), "reward": reward, "info": info}
        return ToolResult(str(obs), True, None, data)
    if isinstance(value, dict):
        text = value.get("text", value.get("observation"))
        data = {"done": bool(value.get("done", False)), "reward": value.get("reward"), "info": value.get("info", {})}
        data.update({k: v for k, v in value.items() if k not in data})
        ok = bool(value.get("ok", True))
        return ToolResult("" if text is None else str(text), ok, value.get("error"), data)
    return ToolResult("" if value is None else str(value), True, None, {"done": False, "reward": None, "info": {}})


def _short(args: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return text if len(text) <= 120 else text[:117] + "..."


def with_env(fn: Callable[..., Any], args: dict[str, Any], live: LiveEnvironment | None) -> dict[str, Any]:
    """`args` plus env=<the user object> when `fn` has a parameter named `env` that `args` does not set."""
    if live is None or "env" in args or not _takes_env(fn):
        return args
    return {**args, "env": live.env}


@functools.lru_cache(maxsize=256)  # a tool or reward function is asked on every call: inspect it once
def _takes_env(fn: Callable[..., Any]) -> bool:
    try:
        return "env" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
