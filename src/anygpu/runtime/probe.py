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


if __name__ == "__main__":
    sys.exit(main())
