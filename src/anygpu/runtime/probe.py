"""`python -m anygpu.runtime.probe`: exit 0 when wgpu finds an adapter, 1 otherwise.
`python -m anygpu.runtime.probe --dawn`: the same for Dawn (exit 0 when wgpudawn is not
installed: nothing to check). Dawn needs a newer lavapipe than Debian 12's Mesa 22.3.

Used by `make` to decide whether to install Mesa's software Vulkan driver (from
bookworm-backports on Debian 12)."""

import sys


def dawn_main() -> int:
    """Exit status of `--dawn`: 0 when Dawn (if installed) sees a Vulkan/Metal/D3D adapter and
    can open a device on it."""
    try:
        import wgpudawn
    except ImportError:
        print("anygpu: Dawn (wgpudawn) is not installed: nothing to check")
        return 0
    try:
        from .webgpu import quiet_stderr

        adapters = quiet_stderr(wgpudawn.gpu.enumerate_adapters_sync)
        usable = [a for a in adapters if a.info.get("backend_type") not in ("OpenGL", "OpenGLES", "Null")]
        if not usable:
            print("anygpu: Dawn sees no Vulkan/Metal/D3D adapter", file=sys.stderr)
            return 1
        device = quiet_stderr(usable[0].request_device_sync)
        _run_tiny_kernel(wgpudawn, device)
    except Exception as exc:
        print(f"anygpu: Dawn cannot open an adapter ({' '.join(str(exc).split())[:300]})", file=sys.stderr)
        return 1
    for a in usable:
        print(f"anygpu: Dawn adapter {a.info.get('device')} ({a.info.get('backend_type')}, {a.info.get('adapter_type')})")
    return 0


def _run_tiny_kernel(api, device) -> None:
    """Compile and run a 64-thread kernel on `device`, check what it wrote (RuntimeError if wrong)."""
    import numpy as np

    code = ("@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n"
            "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) "
            "{ out[i.x] = i.x * 3u + 1u; }\n")
    pipeline = device.create_compute_pipeline(
        layout="auto", compute={"module": device.create_shader_module(code=code), "entry_point": "main"})
    buffer = device.create_buffer(size=256, usage=api.BufferUsage.STORAGE | api.BufferUsage.COPY_SRC)
    group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0),
                                     entries=[{"binding": 0, "resource": {"buffer": buffer}}])
    encoder = device.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, group)
    compute.dispatch_workgroups(1)
    compute.end()
    device.queue.submit([encoder.finish()])
    got = np.frombuffer(device.queue.read_buffer(buffer), dtype=np.uint32)
    if not np.array_equal(got, np.arange(64, dtype=np.uint32) * 3 + 1):
        raise RuntimeError("a tiny compute kernel gave wrong results")


def main() -> int:
    if sys.argv[1:] == ["--dawn"]:
        return dawn_main()
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
