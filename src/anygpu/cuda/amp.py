"""torch.cuda.amp: the older spelling of torch.amp (see anygpu/amp.py: float32, warned once)."""

from __future__ import annotations

from .. import amp as _amp

__all__ = ["autocast", "GradScaler"]


class autocast(_amp.autocast):
    """torch.cuda.amp.autocast(enabled=True, dtype=float16, cache_enabled=True)."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled=None):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """torch.cuda.amp.GradScaler(init_scale=2**16, ...): torch.amp.GradScaler on "cuda"."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
