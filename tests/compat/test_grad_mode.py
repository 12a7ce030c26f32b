"""no_grad, enable_grad, set_grad_enabled, inference_mode: every form (context manager,
decorator with and without parentheses, plain call) observed the same as in torch."""

import pytest
import torch

import anygpu as ag


def observe(lib):
    """What is_grad_enabled / requires_grad report at each point of a script using every form."""
    seen = []
    x = lib.ones(2, requires_grad=True)

    def note(tag):
        seen.append((tag, lib.is_grad_enabled(), (x * 2).requires_grad, lib.is_inference_mode_enabled()))

    note("start")
    with lib.no_grad():
        note("no_grad")
        with lib.enable_grad():
            note("enable_grad inside no_grad")
        note("back in no_grad")

    @lib.no_grad()
    def called():
        note("@no_grad()")

    @lib.no_grad
    def bare():
        note("@no_grad")

    @lib.enable_grad
    def enabled():
        note("@enable_grad")

    called()
    bare()
    with lib.no_grad():
        enabled()
    lib.set_grad_enabled(False)
    note("set_grad_enabled(False) call")
    lib.set_grad_enabled(True)
    with lib.set_grad_enabled(False):
        note("with set_grad_enabled(False)")
    note("after with")

    @lib.set_grad_enabled(False)
    def decorated():
        note("@set_grad_enabled(False)")

    note("after decorating")
    decorated()
    with lib.inference_mode():
        note("inference_mode")
        with lib.inference_mode(False):
            note("inference_mode(False) inside")

    @lib.inference_mode
    def bare_inference():
        note("@inference_mode")

    @lib.inference_mode()
    def called_inference():
        note("@inference_mode()")

    bare_inference()
    called_inference()

    def recurse(n):
        note(f"recursion {n}")
        if n:
            recursive(n - 1)

    recursive = lib.no_grad()(recurse)
    recursive(2)
    note("end")
    return seen


def test_grad_modes_behave_like_torch():
    ours, theirs = observe(ag), observe(torch)
    assert [s[0] for s in ours] == [s[0] for s in theirs]
    for a, b in zip(ours, theirs):
        assert a[:3] == b[:3], a[0]
    # inference_mode(False) inside inference_mode: torch stays in inference mode there; anygpu too.
    assert [a[3] for a in ours] == [b[3] for b in theirs]


def test_no_grad_restores_on_error_and_checks_arguments():
    with pytest.raises(KeyError):
        with ag.no_grad():
            raise KeyError("x")
    assert ag.is_grad_enabled()
    with pytest.raises(ValueError, match="no_grad"):
        ag.no_grad(3)
