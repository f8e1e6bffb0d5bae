"""Trajectory -> a terminal preview: per rollout its path and calls, per training sample its tokens
coloured by node (trained: on the node's colour; masked: dim, in the node's colour).

Input: a `Trajectory`, a `Vocab`, options (colour, tokens per sample, prompt shown or not).
Output: text; with `color=False` it has no escape codes and marks each span as
`[node#visit trained|masked]` instead, so it reads the same in a log file.

Invariants: pure; tokens are looked up, never re-tokenised; at most `max_tokens` response tokens
per sample are printed, and the line after says how many were left out.
"""

from __future__ import annotations

from .payload import display_spans
from .tokens import Vocab, join_texts
from .trajectory import Rollout, Sample, Trajectory, final_answer, scalar_reward

PALETTE = (208, 33, 34, 135, 214, 37, 160, 98, 112, 162, 26, 245)  # xterm-256 colours, as the HTML palette
RESET = "\x1b[0m"


def _paint(text: str, style: str, color: bool) -> str:
    if not color or not text:
        return text
    return "\n".join(style + part + RESET if part else "" for part in text.split("\n"))


def _style(node_colour: int, mask: int) -> str:
    return f"\x1b[48;5;{node_colour}m\x1b[30m" if mask else f"\x1b[2m\x1b[38;5;{node_colour}m"


def _reward(v) -> str:
    x = scalar_reward(v)
    return "-" if x is None else f"{x:.4g}"


def _sample_text(
    s: Sample, vocab: Vocab, colours: dict[str, int], color: bool, max_tokens: int, show_prompt: bool
) -> list[str]:
    table = vocab.lookup(s.tokens)
    texts = join_texts(s.tokens, table)
    out = [
        f"  -- training sample {s.index}: {s.status}, reward {_reward(s.reward)}; prompt {s.prompt_length} "
        f"tokens, response {s.response_length} (trained {s.trained}, masked {s.response_length - s.trained})"
    ]
    if show_prompt and s.prompt_length:
        out.append(_paint("".join(texts[: s.prompt_length]), "\x1b[2m", color))
    parts: list[str] = []
    shown = 0
    for node, visit, a, b, mask, _kind in display_spans(s):
        if shown >= max_tokens:
            break
        b = min(b, a + max_tokens - shown)
        shown += b - a
        text = "".join(texts[s.prompt_length + a : s.prompt_length + b])
        colour = colours.setdefault(node, PALETTE[len(colours) % len(PALETTE)])
        if color:
            parts.append(_paint(text, _style(colour, mask), True))
        else:
            parts.append(f"[{node}#{visit} {'trained' if mask else 'masked'}]{text}")
    out.append("".join(parts))
    if shown < s.response_length:
        out.append(f"  ... {s.response_length - shown} more tokens (raise --max-tokens to see them)")
    return out


def _rollout_text(
    r: Rollout, vocab: Vocab, colours: dict[str, int], color: bool, max_tokens: int, show_prompt: bool
) -> list[str]:
    bold = "\x1b[1m" if color else ""
    reset = RESET if color else ""
    out = [
        f"{bold}== group {r.group} · sample {r.n} · rollout {r.rollout_id} · {r.status} · reward "
        f"{_reward(r.reward)} · {len(r.samples)} training sample(s) · {r.elapsed_s:.3f} s =={reset}"
    ]
    if r.error:
        out.append(f"  error: {r.error}")
    if r.path:
        out.append("  path: " + " -> ".join(f"{n}#{v}" for n, v in r.path))
    for c in r.calls:
        out.append(
            f"  call {c.get('node')}#{c.get('visit')} {c.get('endpoint', '')}: {float(c.get('latency_s') or 0):.3f} s, "
            f"in {c.get('prompt_tokens', 0)}, out {c.get('completion_tokens', 0)}, cached {c.get('cached_tokens', 0)}, "
            f"{c.get('finish_reason', '')}" + (f", error: {c['error']}" if c.get("error") else "")
        )
    answer = final_answer(r)
    if answer:
        out.append(f"  answer: {answer[:200]!r}")
    for s in r.samples:
        out += _sample_text(s, vocab, colours, color, max_tokens, show_prompt)
    return out


def text_view(
    traj: Trajectory,
    vocab: Vocab,
    *,
    color: bool = True,
    max_tokens: int = 2000,
    show_prompt: bool = False,
    notices: tuple[str, ...] = (),
) -> str:
    colours: dict[str, int] = {}
    lines = [
        f"graphrl trajectory · {traj.graph or 'unknown graph'} · {traj.source} · "
        f"{len(traj.groups())} group(s), {len(traj.rollouts)} rollout(s)"
    ]
    lines += [f"note: {n}" for n in notices]
    for r in traj.rollouts:
        lines += _rollout_text(r, vocab, colours, color, max_tokens, show_prompt)
    if color and colours:
        legend = "  ".join(f"\x1b[48;5;{c}m\x1b[30m {n} {RESET}" for n, c in colours.items())
        lines.append(f"nodes: {legend}   trained: on colour · masked: \x1b[2mdim{RESET}")
    return "\n".join(lines) + "\n"
