"""One set of initial weights for both runs of a compat program.

The torch run (COMPAT_INIT_MODE=save) writes the freshly initialised state dict to
COMPAT_INIT as .npz; the anygpu run (mode load) loads those arrays into its model, so
both start from the same weights although their random generators differ. Without the
environment variables (a plain run) the model keeps its own initialisation."""

import os

import numpy as np
import torch


def share_initial_weights(model) -> None:
    path, mode = os.environ.get("COMPAT_INIT"), os.environ.get("COMPAT_INIT_MODE")
    if not path or not mode:
        return
    if mode == "save":
        arrays = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
        np.savez(path, **arrays)
    else:
        with np.load(path) as arrays:
            model.load_state_dict({k: torch.tensor(arrays[k]) for k in arrays.files})
