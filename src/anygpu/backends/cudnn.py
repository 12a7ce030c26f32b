"""torch.backends.cudnn: settable flags with no effect (anygpu has no cuDNN; see backends/__init__)."""

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: anygpu does not use cuDNN (its convolutions are its own WGSL kernels)."""
    return False


def version():
    return None
