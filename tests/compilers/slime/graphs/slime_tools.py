"""A user tool for the slime target's fixture graphs (sync: runs in a worker thread)."""

CALLS: list[str] = []


def observe(text: str) -> str:
    CALLS.append(text)
    return f"observed {len(text)} characters"
