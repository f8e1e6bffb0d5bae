"""runtime.values.lone_surrogate: the orjson pass and the walk give the same answer for any value
(the walk alone is the reference), including the containers and types orjson treats otherwise."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphrl.runtime import values
from graphrl.runtime.scope import NodeResult

Pair = namedtuple("Pair", "a b")
BAD = "\ud800"


class Text(str):
    pass


@pytest.mark.parametrize(
    ("value", "first"),
    [
        ("plain", None),
        ({"k": ["a", {"b": "c"}]}, None),
        ({"k": ["a", {"b": "x" + BAD}]}, BAD),
        ({"ok": 1, "x" + "\udc80": "v"}, "\udc80"),  # a key
        ({1: "a", None: "b", 2.5: BAD}, BAD),  # non-string keys
        ({(1, 2): "tuple key " + BAD}, BAD),  # a key orjson refuses: the walk decides
        (MappingProxyType({"a": BAD}), BAD),  # a Mapping that is not a dict
        (OrderedDict(a="fine"), None),
        (Pair("ok", BAD), BAD),  # a tuple subclass
        ((BAD,), BAD),
        (Text("sub " + BAD), BAD),
        ([Text("fine")], None),
        (NodeResult(text="t", calls=[{"name": BAD}]), BAD),
        ({"n": 2**80, "s": BAD}, BAD),  # an int orjson cannot encode
        ({"n": 2**80, "s": "fine"}, None),
        ({"set": {BAD}}, None),  # the walk does not look into sets
        ([object(), 1.5, None, True], None),
        ([[[[[[[["deep " + BAD]]]]]]]], BAD),
        ({"first": "\udfff", "second": BAD}, "\udfff"),  # the first one, in order
    ],
)
def test_cases(value, first):
    assert values.lone_surrogate(value) == first
    assert values._walk(value) == first


def test_nesting_past_orjson_limit():
    deep: list = ["x" + BAD]
    for _ in range(300):
        deep = [deep]
    assert values.lone_surrogate(deep) == BAD


texts = st.text(alphabet=st.characters(blacklist_categories=()), max_size=6)  # surrogates included
json_like = st.recursive(
    st.none() | st.integers() | st.floats(allow_nan=True) | st.booleans() | texts,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(texts | st.integers(), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_like)
def test_matches_the_walk(value):
    assert values.lone_surrogate(value) == values._walk(value)
