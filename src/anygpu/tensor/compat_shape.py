"""torch-compat additions (see compat_common.py): METHODS for Tensor, FUNCTIONS for torch.*."""

from __future__ import annotations

METHODS: dict = {}
FUNCTIONS: dict = {}
