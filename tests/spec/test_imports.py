"""graphrl.spec.imports: module:function references and signature checks, never a traceback."""

from __future__ import annotations

import sys
import textwrap

import pytest

from graphrl.spec.imports import ImportProblem, resolve_callable, signature_problem


@pytest.fixture
def usermod(tmp_path):
    (tmp_path / "gr_user_mod_xyz.py").write_text(
        textwrap.dedent("""
        import os
        VALUE = 1
        def tool(query, topk=3):
            return query
        class Ns:
            @staticmethod
            def inner(x):
                return x
    """)
    )
    (tmp_path / "gr_user_broken_xyz.py").write_text("raise RuntimeError('import-time failure')\n")
    yield tmp_path
    for m in ("gr_user_mod_xyz", "gr_user_broken_xyz"):
        sys.modules.pop(m, None)


def test_resolves_from_the_search_path_and_restores_sys_path(usermod):
    before = list(sys.path)
    fn = resolve_callable("gr_user_mod_xyz:tool", [usermod])
    assert callable(fn) and fn("q") == "q"
    assert sys.path == before


def test_dotted_attribute(usermod):
    assert resolve_callable("gr_user_mod_xyz:Ns.inner", [usermod])(4) == 4


@pytest.mark.parametrize(
    "ref, needle",
    [
        ("no_colon", "is not a module:function reference"),
        (":f", "is not a module:function reference"),
        ("m:", "is not a module:function reference"),
        ("gr_no_such_module_xyz:f", "cannot import module"),
        ("gr_user_broken_xyz:f", "RuntimeError: import-time failure"),
        ("gr_user_mod_xyz:tol", "has no attribute 'tol'"),
        ("gr_user_mod_xyz:VALUE", "is not callable"),
        ("..rel:f", "cannot import module"),
        ("\x00:f", "cannot import module"),
    ],
)
def test_problems_are_values(usermod, ref, needle):
    out = resolve_callable(ref, [usermod])
    assert isinstance(out, ImportProblem), out
    assert needle in out.message


def test_typo_gets_a_hint(usermod):
    out = resolve_callable("gr_user_mod_xyz:tol", [usermod])
    assert out.hint == "did you mean 'tool'?"


def test_signature_problem():
    def f(query, topk=3):
        pass

    assert signature_problem(f, 0, ["query"]) is None
    assert signature_problem(f, 0, ["query", "topk"]) is None
    assert "topk2" in signature_problem(f, 0, ["query", "topk2"])
    assert "missing a required argument" in signature_problem(f, 0, [])
    assert signature_problem(f, 1, []) is None
    assert "too many positional" in signature_problem(f, 3, [])


def test_signature_of_kwargs_function():
    def g(**kw):
        pass

    assert signature_problem(g, 0, ["anything"]) is None
    assert signature_problem(len, 1, []) is None  # builtins: checked or skipped, never raised


def test_two_graphs_with_a_same_named_module_each_get_their_own(tmp_path):
    """`graphrl demo` runs graphs in one process: graph B's `gr_same_xyz.py` must not be graph A's."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d, value in ((a, "A"), (b, "B")):
        (d / "gr_same_xyz_pkg").mkdir(parents=True)
        (d / "gr_same_xyz_pkg" / "__init__.py").write_text("")
        (d / "gr_same_xyz_pkg" / "tools.py").write_text(f"def who():\n    return {value!r}\n")
        (d / "gr_same_xyz.py").write_text(f"def who():\n    return {value!r}\n")
    try:
        assert resolve_callable("gr_same_xyz:who", [a])() == "A"
        assert resolve_callable("gr_same_xyz:who", [b])() == "B"
        assert resolve_callable("gr_same_xyz:who", [a])() == "A"
        assert resolve_callable("gr_same_xyz_pkg.tools:who", [a])() == "A"
        assert resolve_callable("gr_same_xyz_pkg.tools:who", [b])() == "B"
        # the first-loaded stays what the rest of the process sees
        assert sys.modules["gr_same_xyz"].who() == "A"
        assert sys.modules["gr_same_xyz_pkg.tools"].who() == "A"
    finally:
        for m in [m for m in sys.modules if m.startswith("gr_same_xyz")]:
            sys.modules.pop(m, None)
