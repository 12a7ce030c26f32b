"""torch.backends.cuda: `matmul.allow_tf32` and the attention-kernel switches, accepted and
kept (anygpu's matmuls are float32 WGSL kernels; see backends/__init__)."""


class _MatmulFlags:
    """torch.backends.cuda.matmul: assignable flags."""

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()

_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built() -> bool:
    """False: this is not a CUDA build (anygpu runs on WebGPU)."""
    return False


def enable_flash_sdp(enabled: bool) -> None:
    _sdp["flash"] = bool(enabled)


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _sdp["mem_efficient"] = bool(enabled)


def enable_math_sdp(enabled: bool) -> None:
    _sdp["math"] = bool(enabled)


def flash_sdp_enabled() -> bool:
    return _sdp["flash"]


def mem_efficient_sdp_enabled() -> bool:
    return _sdp["mem_efficient"]


def math_sdp_enabled() -> bool:
    return _sdp["math"]
