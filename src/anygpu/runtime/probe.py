"""`python -m anygpu.runtime.probe`: exit 0 when wgpu finds an adapter, 1 otherwise.

Used by `make` to decide whether to install Mesa's software Vulkan driver."""

import sys


def main() -> int:
    try:
        import wgpu
        adapters = wgpu.gpu.enumerate_adapters_sync()
    except Exception as exc:  # no Vulkan loader at all
        print(f"anygpu: wgpu sees no adapter ({exc})", file=sys.stderr)
        return 1
    usable = [a for a in adapters if a.info.get("backend_type") != "OpenGL"]
    if not usable:
        print("anygpu: wgpu sees no Vulkan/Metal/DX12 adapter", file=sys.stderr)
        return 1
    for a in usable:
        print(f"anygpu: adapter {a.info.get('device')} ({a.info.get('backend_type')}, {a.info.get('adapter_type')})")
    return 0


_COOPERATIVE_MATRIX_CHILD = r"""
import sys, wgpu
adapter = wgpu.gpu.enumerate_adapters_sync()[int(sys.argv[1])]
try:
    adapter.request_device_sync(required_features=["cooperative-matrix"])
except Exception as exc:
    print("refused: " + " ".join(str(exc).split())[:300])
else:
    print("granted")
"""


def cooperative_matrix(adapter_index: int, adapter_features, timeout_s: float = 60.0) -> str:
    """Whether a device with the 'cooperative-matrix' feature (tensor cores from WGSL) can be
    opened on adapter `adapter_index` of wgpu's enumeration: 'not offered by the adapter',
    'granted' or 'refused: <wgpu's message>'. The request runs in a child process: wgpu-native
    (29) lists the feature but its C API cannot enable experimental features, and a failed
    request must not take the caller down with it."""
    import subprocess
    if "cooperative-matrix" not in set(adapter_features):
        return "not offered by the adapter"
    try:
        done = subprocess.run([sys.executable, "-c", _COOPERATIVE_MATRIX_CHILD, str(adapter_index)],
                              capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"probe failed: {exc}"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = " ".join(done.stderr.split())[-300:]
        return f"refused: the probe process exited with {done.returncode} ({tail})"
    return lines[-1]


if __name__ == "__main__":
    sys.exit(main())
