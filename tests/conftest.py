"""Shared fixtures: one device for the whole run, numpy RNG with a fixed seed."""

import numpy as np
import pytest

import anygpu as ag


@pytest.fixture(scope="session")
def dev():
    return ag.gpu()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
