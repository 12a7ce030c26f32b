"""torch's deterministic-algorithms switch (`torch.use_deterministic_algorithms` and its
getters, `torch.set_deterministic_debug_mode`, `torch.utils.deterministic
.fill_uninitialized_memory`). It lives with the ops, which choose their algorithms by it.

With the switch on and `fill_uninitialized_memory` (default True), `empty`, `empty_like`
and `Tensor.new_empty` are filled as torch fills memory it would leave uninitialised: NaN
(float dtypes), the largest value the dtype holds (integers: 2**31 - 1 for int32 and for
int64, which anygpu keeps in 32 bits) or True (bool); otherwise they are zeros (anygpu
never hands out uninitialised memory). An op without a deterministic form calls
`alert_not_deterministic`: a RuntimeError naming it, a UserWarning under `warn_only`.
Which ops have which form: docs/NOTES.md, "Deterministic algorithms"."""

from __future__ import annotations

import builtins
import warnings

__all__ = ["use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
           "is_deterministic_algorithms_warn_only_enabled", "set_deterministic_debug_mode",
           "get_deterministic_debug_mode", "alert_not_deterministic", "fills_uninitialized_memory"]

_state = {"mode": False, "warn_only": False, "fill_uninitialized_memory": True}
_DEBUG_NAMES = {"default": 0, "warn": 1, "error": 2}


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Turn the deterministic-algorithms mode on or off (torch.use_deterministic_algorithms).
    warn_only: an op without a deterministic form warns instead of raising."""
    if not isinstance(mode, builtins.bool):
        raise TypeError(f"use_deterministic_algorithms: mode must be a bool, got {type(mode).__name__}")
    if not isinstance(warn_only, builtins.bool):
        raise TypeError(f"use_deterministic_algorithms: warn_only must be a bool, got {type(warn_only).__name__}")
    _state["mode"] = mode
    _state["warn_only"] = warn_only  # kept as given while off, as torch keeps it


def are_deterministic_algorithms_enabled() -> bool:
    return _state["mode"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _state["warn_only"]


def set_deterministic_debug_mode(debug_mode) -> None:
    """torch.set_deterministic_debug_mode: "default"/0 (off), "warn"/1 (on, warn only),
    "error"/2 (on)."""
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_NAMES:
            raise RuntimeError("set_deterministic_debug_mode: expected one of 'default', 'warn', 'error', "
                               f"got {debug_mode!r}")
        debug_mode = _DEBUG_NAMES[debug_mode]
    elif not isinstance(debug_mode, builtins.int) or isinstance(debug_mode, builtins.bool):
        raise TypeError("set_deterministic_debug_mode: expected a str or an int, "
                        f"got {type(debug_mode).__name__}")
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"set_deterministic_debug_mode: expected 0, 1 or 2, got {debug_mode}")
    use_deterministic_algorithms(debug_mode > 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode() -> int:
    if not _state["mode"]:
        return 0
    return 1 if _state["warn_only"] else 2


def alert_not_deterministic(caller: str) -> None:
    """Called by an op that has no deterministic form, where the mode is on."""
    if not _state["mode"]:
        return
    message = (f"{caller} does not have a deterministic implementation, but you set "
               "'use_deterministic_algorithms(True)'")
    if _state["warn_only"]:
        warnings.warn(message, UserWarning, stacklevel=3)
    else:
        raise RuntimeError(message)


def fills_uninitialized_memory() -> bool:
    """Whether `empty` and its kin fill with NaN / the largest value (the mode is on and
    torch.utils.deterministic.fill_uninitialized_memory is True)."""
    return _state["mode"] and _state["fill_uninitialized_memory"]
