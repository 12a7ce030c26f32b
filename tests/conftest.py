"""Shared fixtures: one device for the whole run, numpy RNG with a fixed seed."""

import os
import tempfile

import numpy as np
import pytest

# The autotuner's winners go to a throwaway folder, not the user's cache: one per xdist worker
# (workers inherit the controller's folder; a shared one let one worker's tuning results change
# another's kernel choices in the middle of a test that compares two runs bit for bit).
os.environ.setdefault("ANYGPU_CACHE_DIR", tempfile.mkdtemp(prefix="anygpu-test-cache-"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["ANYGPU_CACHE_DIR"] = os.path.join(os.environ["ANYGPU_CACHE_DIR"], os.environ["PYTEST_XDIST_WORKER"])
    os.makedirs(os.environ["ANYGPU_CACHE_DIR"], exist_ok=True)

import anygpu as ag


@pytest.fixture(scope="session")
def dev():
    return ag.gpu()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
