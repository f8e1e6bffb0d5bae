"""Deterministic text material shared by the dataset and the simulated model.

Input: a `random.Random` (seeded by the caller). Output: English-like sentences, search
queries, answers. `gold_answer(question)` is the one fact both sides agree on: the dataset puts
it in the label (and the document), the simulated model derives it from the question it is shown.

Invariants: pure functions of their arguments (no global state); ASCII text only, so every
sentence tokenises the same wherever it is placed after a space.
"""

from __future__ import annotations

import random
import zlib

NAMES = (
    "Aldermoor",
    "Brisvale",
    "Calderon",
    "Dunmere",
    "Elsworth",
    "Farrowgate",
    "Glenhaven",
    "Harrowby",
    "Ivanhoe Quay",
    "Jarrow",
    "Kestrel Point",
    "Larkspur",
    "Merriton",
    "Northwick",
    "Oakhurst",
    "Pemberly",
    "Quillon",
    "Ravensholt",
    "Stonebridge",
    "Thornbury",
    "Umberton",
    "Valemont",
    "Westmarch",
    "Yarrowdale",
)
SUBJECTS = (
    "the harbour master",
    "a river merchant",
    "the city council",
    "an old surveyor",
    "the guild of clockmakers",
    "a travelling physician",
    "the northern garrison",
    "the cathedral chapter",
    "a shipwright",
    "the toll collector",
    "the archivist",
    "a salt trader",
    "the mill owners",
    "the bridge wardens",
)
VERBS = (
    "recorded",
    "rebuilt",
    "sold",
    "inspected",
    "mapped",
    "taxed",
    "defended",
    "abandoned",
    "restored",
    "described",
    "visited",
    "measured",
    "founded",
    "renamed",
)
OBJECTS = (
    "the east granary",
    "a stone bridge",
    "the lower quay",
    "two windmills",
    "the toll road",
    "the chapel roof",
    "a ferry crossing",
    "the market hall",
    "the canal locks",
    "a lighthouse",
    "the wool exchange",
    "the old ramparts",
    "the town well",
)
PLACES = NAMES
KEYS = (
    "birthplace of the cartographer",
    "town where the treaty was signed",
    "seat of the salt guild",
    "home port of the Swift Heron",
    "village that built the first lock",
    "town of the great fire",
    "place where the bells were cast",
    "origin of the river charter",
)
REASONS = (
    "The question asks for a single place name.",
    "I should check the gathered documents first.",
    "Two of the sources agree on the date.",
    "The earlier note is consistent with this record.",
    "This needs a lookup before answering.",
    "The ledger entry settles the question.",
    "An expert can verify the chain of facts.",
    "The documents mention the guild twice.",
)


def sentence(rng: random.Random) -> str:
    """One declarative sentence (about 14-22 tokens)."""
    return (
        f"In {rng.randint(1500, 1899)}, {rng.choice(SUBJECTS)} {rng.choice(VERBS)} "
        f"{rng.choice(OBJECTS)} near {rng.choice(PLACES)}."
    )


def gold_answer(question: str) -> str:
    """The gold answer of a benchmark question (a function of its text)."""
    return NAMES[zlib.crc32(question.encode()) % len(NAMES)]


def wrong_answer(question: str, rng: random.Random) -> str:
    gold = gold_answer(question)
    return rng.choice([n for n in NAMES if n != gold])


def question(rng: random.Random, case: int) -> str:
    return f"Which place is the {rng.choice(KEYS)}? (case {case})"


def fact(q: str) -> str:
    """The sentence of a document that answers `q`."""
    key = q.split("the ", 1)[1].split("?", 1)[0]
    return f"The records agree that the {key} was {gold_answer(q)}."


def seeded(*parts: object) -> random.Random:
    """A Random whose stream is a function of `parts` (stable across processes)."""
    return random.Random(zlib.crc32("|".join(map(str, parts)).encode()))


ALIASES = ("expert-1", "expert-2", "expert-3")  # the expert aliases every ToolOrchestra row maps
EXPERT_MODELS = (
    "Qwen/Qwen3-32B",
    "Qwen/Qwen2.5-Coder-32B-Instruct",
    "Qwen/Qwen2.5-Math-72B-Instruct",
    "Qwen/Qwen3-14B",
)  # the frozen models graphs/toolorchestra.yaml declares
TOOLS = ("search", "enhance_reasoning", "call_expert", "answer")
