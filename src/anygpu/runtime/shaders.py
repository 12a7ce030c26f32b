"""Reading WGSL sources from anygpu/kernels and filling their {{NAME}} placeholders."""

from __future__ import annotations

import functools
import re
from importlib import resources

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@functools.lru_cache(maxsize=None)
def _read(name: str) -> str:
    return resources.files("anygpu.kernels").joinpath(name).read_text()


def load_shader(name: str, **subs) -> str:
    """The text of kernels/<name> with every {{KEY}} replaced by str(subs[KEY])."""
    text = _read(name)

    def fill(match):
        key = match.group(1)
        if key not in subs:
            raise KeyError(f"shader {name}: no value for placeholder {{{{{key}}}}}")
        return str(subs[key])

    return _PLACEHOLDER.sub(fill, text)
