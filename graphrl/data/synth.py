"""Synthetic MemAgent data: a seed -> multi-hop questions over long distractor documents.

Input: a seed, the number of rows, a target document length in characters.
Output: slime rows {prompt, label, metadata: {context, supporting_facts, seed}} in the HotpotQA-style
shape graphs/memagent.yaml reads (`metadata.context`).

Each question needs two facts that sit in two different paragraphs of a long document ("Who designed
the X?" + "Where was that person born?"), with many distractor paragraphs built from the same
templates about other, invented people and places, so that no fact can be guessed and no distractor
contradicts a gold fact. Everything is invented; nothing is copied from a data set.

Invariants: deterministic (the same arguments give byte-identical rows on every machine and Python
version: only `random.Random(seed)` and fixed word lists); every document is at least `chars`
characters (default 56,000: over 10,000 tokens for common tokenizers, i.e. three 5,000-token
MemAgent chunks); the two gold paragraphs are in different halves of the document.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

FIRST = (
    "Maren",
    "Tobin",
    "Ilse",
    "Casper",
    "Noor",
    "Anselm",
    "Lidia",
    "Oren",
    "Petra",
    "Hugo",
    "Sanne",
    "Emeric",
    "Ysolde",
    "Bram",
    "Katya",
    "Leopold",
    "Runa",
    "Dario",
    "Ottilie",
    "Joris",
)
LAST = (
    "Oduya",
    "Brackwell",
    "Stennholt",
    "Vasquez-Lind",
    "Halloran",
    "Mirecki",
    "Ferreira",
    "Okonkwo",
    "Thorsby",
    "Lindqvist",
    "Achterberg",
    "Delacourt",
    "Nakamura",
    "Pellegrini",
    "Rasmussen",
    "Quill",
)
PLACES = (
    "Tessaly",
    "Port Orrin",
    "Kelder",
    "Amberlee",
    "Vossmark",
    "Saltreach",
    "Dunmerrow",
    "Ilvane",
    "Cragsford",
    "Nethermoor",
    "Gallowmere",
    "Brightwater",
    "Hollin",
    "Ostrava Minor",
    "Windle",
)
WORKS = (
    "Halvard Bridge",
    "Glass Library of Kelder",
    "Saltreach Observatory",
    "Old Mint Tower",
    "Ferrow Aqueduct",
    "Lantern Hall",
    "Copperline Railway Station",
    "Greywater Dam",
    "Museum of Tides",
    "Northgate Opera House",
    "Cinder Market",
    "Amberlee Lighthouse",
)
TRADES = ("architect", "engineer", "stonemason", "master builder")
FILLER = (
    "The records of the period are incomplete, and several accounts disagree on minor details.",
    "Local historians have debated the dates for decades without reaching agreement.",
    "The surrounding district grew quickly during the following years.",
    "Visitors today can still see parts of the original structure.",
    "A later restoration replaced most of the wooden fittings with iron.",
    "The town council commissioned a survey of the site shortly afterwards.",
    "Contemporary newspapers praised the work, though some critics called it extravagant.",
    "The cost of the project was met partly by public subscription.",
    "Heavy winters in the region often delayed construction for months at a time.",
    "Several smaller buildings nearby were modelled on the same design.",
)


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _paragraph(rng: random.Random, title: str, fact: str) -> str:
    extra = rng.sample(FILLER, 4)
    return f"{title}\n{extra[0]} {fact} {extra[1]} {extra[2]} {extra[3]}"


def memagent_rows(n: int = 3, *, seed: int = 0, chars: int = 56_000) -> list[dict[str, Any]]:
    """`n` rows; row i uses Random(seed * 1000 + i)."""
    rows = []
    for i in range(n):
        rng = random.Random(seed * 1000 + i)
        work = WORKS[(seed + i) % len(WORKS)]
        builder, trade = _person(rng), rng.choice(TRADES)
        town = rng.choice([p for p in PLACES if p not in work])  # the question must not hint the answer
        gold_a = _paragraph(rng, work, f"The {work} was designed by the {trade} {builder}.")
        gold_b = _paragraph(rng, builder, f"{builder} was born in {town} and trained there as an apprentice.")
        taken_people, taken_works = {builder}, {work}  # no distractor mentions these
        distractors: list[str] = []
        while sum(len(p) + 2 for p in distractors) + len(gold_a) + len(gold_b) < chars:
            other = _person(rng)
            if other in taken_people:
                continue
            if rng.random() < 0.5:
                fact = f"{other} was born in {rng.choice(PLACES)} and later moved abroad."
                distractors.append(_paragraph(rng, other, fact))
            else:
                other_work = rng.choice([w for w in WORKS if w not in taken_works])
                fact = f"The {rng.choice(TRADES)} {other} worked on the {other_work} for several years."
                distractors.append(_paragraph(rng, other_work, fact))
        half = len(distractors) // 2
        first, second = rng.randrange(0, half + 1), rng.randrange(half, len(distractors) + 1)
        paragraphs = distractors[:first] + [gold_a] + distractors[first:second] + [gold_b] + distractors[second:]
        context = "\n\n".join(f"Document {k}: {p}" for k, p in enumerate(paragraphs, 1))
        rows.append(
            {
                "prompt": f"In which town was the {trade} who designed the {work} born?",
                "label": [town],
                "metadata": {
                    "context": context,
                    "supporting_facts": [work, builder],
                    "seed": seed,
                    "index": i,
                    "source": "graphrl.data.synth",
                },
            }
        )
    return rows


def write_jsonl(rows: list[dict[str, Any]], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":  # python -m graphrl.data.synth OUT.jsonl [N] [SEED]
    out = sys.argv[1] if len(sys.argv) > 1 else "memagent.jsonl"
    write_jsonl(
        memagent_rows(int(sys.argv[2]) if len(sys.argv) > 2 else 3, seed=int(sys.argv[3]) if len(sys.argv) > 3 else 0),
        out,
    )
