"""The benchmark suite's tests run in seconds on the software driver (--quick sizes)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: runs in a few seconds, even on a software driver")
