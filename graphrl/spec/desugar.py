"""Shorthands -> canonical form, before schema validation.

Input: the plain dict of a graph file. Output: a new dict in canonical form (the input is untouched).

Shorthands (each documented in docs/graph-language.md):
  state:   memory: "text"            -> memory: {default: "text"}
  inputs:  question: prompt          -> question: {from: prompt}
  nodes:   next: verifier            -> next: [{goto: verifier}]
           append_to: main           -> append_to: {thread: main}
           foreach: context          -> foreach: {over: context}
           prompt: "{{ messages }}"  -> prompt: [{messages: "{{ messages }}"}]
           prompt item "text"        -> {messages: "text"}
  threads: prompt and summarize.prompt as a node's prompt
  reward:  reward: exact_match       -> reward: {fn: exact_match}

Invariants: canonical input passes through unchanged; a value of an unexpected type is left as it is
so that schema validation reports it at its own location.
"""

from __future__ import annotations

from typing import Any


def _prompt(value: Any) -> Any:
    if isinstance(value, str):
        return [{"messages": value}]
    if isinstance(value, list):
        return [{"messages": m} if isinstance(m, str) else m for m in value]
    return value


def _node(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if isinstance(node.get("next"), str):
        node["next"] = [{"goto": node["next"]}]
    if isinstance(node.get("append_to"), str):
        node["append_to"] = {"thread": node["append_to"]}
    if isinstance(node.get("foreach"), str):
        node["foreach"] = {"over": node["foreach"]}
    if "prompt" in node:
        node["prompt"] = _prompt(node["prompt"])
    return node


def _thread(thread: Any) -> Any:
    if not isinstance(thread, dict):
        return thread
    thread = dict(thread)
    if "prompt" in thread:
        thread["prompt"] = _prompt(thread["prompt"])
    summ = thread.get("summarize")
    if isinstance(summ, dict) and "prompt" in summ:
        thread["summarize"] = {**summ, "prompt": _prompt(summ["prompt"])}
    return thread


def desugar(doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(doc)
    if isinstance(doc.get("state"), dict):
        doc["state"] = {k: v if isinstance(v, dict) else {"default": v} for k, v in doc["state"].items()}
    if isinstance(doc.get("inputs"), dict):
        doc["inputs"] = {k: {"from": v} if isinstance(v, str) else v for k, v in doc["inputs"].items()}
    if isinstance(doc.get("nodes"), dict):
        doc["nodes"] = {k: _node(v) for k, v in doc["nodes"].items()}
    if isinstance(doc.get("threads"), dict):
        doc["threads"] = {k: _thread(v) for k, v in doc["threads"].items()}
    if isinstance(doc.get("reward"), str):
        doc["reward"] = {"fn": doc["reward"]}
    return doc
