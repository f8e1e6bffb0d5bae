"""The ChatML chat template graphrl gives the Qwen tokenizer (a Jinja string, HF chat-template dialect).

Input (when rendered by `tokenizer.apply_chat_template`): `messages` (system/user/assistant/tool,
assistant messages may carry `tool_calls`), optional `tools` (JSON schemas), `add_generation_prompt`.
Output: the ChatML prompt text; `add_generation_prompt` appends `<|im_start|>assistant\\n`.

Invariants: every turn is `<|im_start|>ROLE\\n...<|im_end|>\\n`; rendering is append-only (the text
for messages[:k] is a prefix of the text for messages, generation prompt aside) except when cutting
between two consecutive tool messages, which share one user turn (as in Qwen's own template). No
default system prompt is inserted (see the comment at the top of the template).
"""

QWEN_CHAT_TEMPLATE = r"""{#- graphrl's ChatML template for the Qwen2 / Qwen2.5 / Qwen3 token ids.

    Roles: system, user, assistant (with optional tool_calls), tool. An optional `tools` list of
    JSON schemas is described in the system turn. The wire format is Qwen's (what the models are
    trained on): <tools> one JSON schema per line </tools>; a call is <tool_call> JSON </tool_call>;
    consecutive tool results become one user turn of <tool_response> blocks.

    On purpose, unlike Qwen2.5's own template: no default system prompt is inserted when the
    conversation has none (Qwen2.5 adds "You are Qwen, created by Alibaba Cloud..."). graphrl renders
    exactly the messages a graph writes; a graph that wants that sentence says so. The instruction
    sentences around the tool list are graphrl's own wording. -#}
{%- macro text(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content -%}
            {%- if part is mapping and part.type == 'text' -%}{{- part.text -}}{%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- set has_system = (messages | length > 0) and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if has_system -%}{{- text(messages[0].content) + '\n\n' -}}{%- endif -%}
    {{- '# Tools\n\nThese functions are available to you. Each line inside <tools></tools> is the JSON schema of one function:\n<tools>' -}}
    {%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
    {{- '\n</tools>\n\nTo call a function, write a JSON object with its name and arguments inside <tool_call></tool_call> tags, one block per call:\n<tool_call>\n{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
    {{- '<|im_start|>system\n' + text(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if loop.first and has_system -%}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
        {{- '\n<tool_response>\n' + text(message.content) + '\n</tool_response>' -}}
        {%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
    {%- elif message.role == 'assistant' -%}
        {%- set body = text(message.content) -%}
        {{- '<|im_start|>assistant\n' + body -}}
        {%- for call in (message.tool_calls or []) -%}
            {%- set fn = call.function if call.function is defined else call -%}
            {%- if body or not loop.first -%}{{- '\n' -}}{%- endif -%}
            {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
            {%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
            {{- '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' + text(message.content) + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}"""
