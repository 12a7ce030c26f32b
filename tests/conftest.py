"""Shared fixtures: one device for the whole run, numpy RNG with a fixed seed."""

import os
import tempfile

import numpy as np
import pytest

# The autotuner's winners go to a throwaway folder, not the user's cache.
os.environ.setdefault("ANYGPU_CACHE_DIR", tempfile.mkdtemp(prefix="anygpu-test-cache-"))

import anygpu as ag


@pytest.fixture(scope="session")
def dev():
    return ag.gpu()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
