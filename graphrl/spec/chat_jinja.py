"""Chat templates as Jinja: compiling one, and probing whether it rewrites a conversation's history.

Input: a chat template's source (a tokenizer's `chat_template`, or a file a model names with
`chat_template:`), optional template variables (`chat_template_kwargs`).
Output: the compiled template (`compile_template`, exactly as transformers compiles chat templates
when it is importable, an equivalent sandbox otherwise), and `history_rewrite` -- the first text a
re-rendering changes after an assistant turn, or None when the template is append-only for it.

Used by the checker (a template file is compiled and probed at `graphrl check`) and by the runtime's
renderer (`graphrl.runtime.chat_template`). Pure: nothing here reads files or imports the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any


def compile_template(source: str) -> Any:
    """The compiled Jinja template, compiled exactly as transformers compiles chat templates."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # transformers absent or reorganised: an equivalent sandbox
        return own_environment().from_string(source)
    return _compile_jinja_template(source)


def own_environment() -> Any:
    """A sandboxed Jinja environment with the filters, globals and extensions chat templates use."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    class Generation(jinja2.ext.Extension):  # `{% generation %}` blocks render their body
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


# The assistant turn of the probe: reasoning in a <think> block, then an answer (what Qwen3-style
# templates drop from earlier turns).
PROBE_OUTPUT = "<think>\nreasoning\n</think>\n\nanswer"


def history_rewrite(
    compiled: Any, roles: Iterable[str], variables: Mapping[str, Any] | None = None
) -> tuple[str, str, str] | None:
    """Does re-rendering a conversation after an assistant turn change text already sent?

    The probe renders [system, user] with the generation prompt, appends a model output (with a
    <think> block), then renders the conversation again with one more message of each role in
    `roles` -- what a thread does at its next turn. Returns (role, the text the thread holds there,
    the text the template renders instead) for the first role that breaks the prefix, or None. A
    template that raises on the probe is not judged (None)."""
    base = [{"role": "system", "content": "system"}, {"role": "user", "content": "question"}]
    kwargs = dict(variables or {})
    for role in roles:
        try:
            first = compiled.render(messages=base, tools=None, documents=None, add_generation_prompt=True, **kwargs)
            history = [*base, {"role": "assistant", "content": PROBE_OUTPUT}, {"role": role, "content": "more"}]
            again = compiled.render(messages=history, tools=None, documents=None, add_generation_prompt=True, **kwargs)
        except Exception:  # a template may refuse the probe (e.g. a strict role order)
            continue
        held = first + PROBE_OUTPUT
        if not again.startswith(held):
            at = next(
                (i for i, (a, b) in enumerate(zip(held, again, strict=False)) if a != b), min(len(held), len(again))
            )
            return role, held[at : at + 40], again[at : at + 40]
    return None
