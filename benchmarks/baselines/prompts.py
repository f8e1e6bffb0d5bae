"""The prompts of the hand-written baselines, as a researcher writes them: Python strings.

They say what prompts/memagent/*.j2 and prompts/toolorchestra/*.j2 say, character for character,
so the baselines send the graph's requests; tests/benchmarks checks that they still do.
"""

from __future__ import annotations

from collections.abc import Iterable

MEMORIZE = """You are reading a long document one section at a time in order to answer a question later. You
cannot see earlier sections again: your memory is the only record of what you have read.

<problem>
{question}
</problem>

<memory>
{memory}
</memory>

<section>
{chunk}
</section>

Rewrite the memory so that it helps answer the problem. Keep every fact from the old memory that
still matters, add what this section contributes (names, dates, numbers, links between facts), and
drop what is irrelevant. Write only the new memory.

Updated memory:
"""

MEMAGENT_ANSWER = """You have read a long document and kept the notes below. Answer the problem from them.

<problem>
{question}
</problem>

<memory>
{memory}
</memory>

Give a short answer (a name, a number, a phrase) inside \\boxed{{}}, for example \\boxed{{1987}}.
"""

ORCHESTRATOR = """You are an orchestrator. You do not solve problems yourself: you delegate the work to tools and
expert models and combine what they return. Every reply must call exactly one tool.

- search: an expert writes a search query and a retrieval service returns relevant documents.
- enhance_reasoning: an expert works on the problem step by step and may run Python code.
- call_expert: the conversation so far is handed to an expert, whose reply is returned to you.
- answer: an expert writes the final answer from what has been gathered. This ends the task.

Each tool takes a `model` argument naming the expert to use: one of
{aliases}. Experts differ in skill, price and speed;
prefer a cheaper or faster expert when it is likely to be right, and call `answer` as soon as the
information gathered is enough.
"""

EXPERT = """You are an expert consulted by a coordinator who is working on a problem with the help of tools.
Read the conversation, including the tool results in it, and give your own solution. Be precise and
state your final answer explicitly.
"""

CONSULT = "Solve the problem above. Show the key steps and state the answer clearly."


def _gathered(results: Iterable[str], none: str) -> str:
    lines = [f"[{i}] {r}\n" for i, r in enumerate(results, 1)]
    return "".join(lines) if lines else f"{none}\n"


def search_query(problem: str, results: list[str]) -> str:
    return (
        "A question is being researched with a document search engine.\n\nQuestion:\n"
        f"{problem}\n\nFound so far:\n{_gathered(results, '(nothing yet)')}\n"
        "Write one search query that is likely to find the information still missing. Reply with the\n"
        "query only, inside <query></query> tags.\n"
    )


def reason(problem: str, results: list[str]) -> str:
    return (
        "Work on the question below, using the information gathered so far.\n\nQuestion:\n"
        f"{problem}\n\nInformation gathered:\n{_gathered(results, '(none)')}\n"
        "Reason carefully and concisely. If a calculation or a check would help, include one Python program\n"
        "in a ```python code block that prints its results; it will be run and its output reported.\n"
    )


def final_answer(problem: str, results: list[str]) -> str:
    return (
        "Give the final answer to the question below, based on the information gathered.\n\nQuestion:\n"
        f"{problem}\n\nInformation gathered:\n{_gathered(results, '(none)')}\n"
        "Think it through, then write only the final answer, as short as possible, between <answer> and\n"
        "</answer>.\n"
    )


JUDGE = (
    "Is the predicted answer correct, given the reference answer(s)? Minor wording differences are fine; "
    "a different entity, number or date is not.\n"
    "Question: {question}\nPredicted answer: {prediction}\nReference answer(s): {label}\n"
    'Reply with JSON only: {{"correct": true}} or {{"correct": false}}.'
)
