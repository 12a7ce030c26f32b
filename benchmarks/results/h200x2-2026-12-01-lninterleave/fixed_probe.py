"""What a 4096x4096 row kernel pays besides layer norm's arithmetic (issue 11, f16 layer norm at
1.7x its f32 speed): GPU time (timestamps, median) of, in the layer norms' shape (one 256-thread
workgroup per row of 4096): an empty kernel (4096 workgroups, and 1), a plain copy of each row
(f16 as u32 words, 2 units of 16 bytes a thread; f32 as vec4<f32>, 4 units), the same copy with
one workgroup reduction (subgroupAdd + workgroup array + barrier) of the loaded values
between load and store, and with a workgroup array declared (zero-initialised by wgpu) but
unused. Run: python3 fixed_probe.py (needs the device; prints one table)."""

import numpy as np

from anygpu.bench.timing import time_anygpu
from anygpu.ops import Device

ROWS, COLS, WG = 4096, 4096, 256

HEAD = """struct Params { rows: u32, cols: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<UNIT>;
@group(0) @binding(2) var<storage, read_write> y: array<UNIT>;
"""


def source(unit: str, units: int, variant: str) -> str:
    text = HEAD.replace("UNIT", unit)
    if variant in ("reduce", "array"):
        text += "var<workgroup> part: array<f32, 256>;\n"
    text += "@compute @workgroup_size(256)\nfn main(@builtin(local_invocation_index) tid: u32, " \
            "@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>"
    text += ", @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_id) group: u32, " \
            "@builtin(num_subgroups) groups: u32) {\n" if variant == "reduce" else ") {\n"
    if variant == "empty":
        return text + "}\n"
    per = 8 if unit == "vec4<u32>" else 4
    text += "    let row = wid.x + wid.y * nwg.x;\n    if (row >= P.rows) { return; }\n"
    text += f"    let n = P.cols / {per}u;\n    let base = row * n;\n"
    for u in range(units):
        text += f"    let v{u} = x[base + tid + {u * WG}u];\n"
    scale = ""
    if variant == "reduce":
        total = " + ".join(f"f32(v{u}.x)" for u in range(units))
        text += f"    let s = subgroupAdd({total});\n    if (lane == 0u) {{ part[group] = s; }}\n"
        text += "    workgroupBarrier();\n    var t = 0.0;\n"
        text += "    for (var i = 0u; i < groups; i++) { t += part[i]; }\n"
        scale = "select(0u, 1u, t == 12345.0)" if unit == "vec4<u32>" else "select(0.0, 1.0, t == 12345.0)"
    if variant == "array":
        text += "    if (P.rows == 0u) { part[tid] = 1.0; }\n"
    for u in range(units):
        value = f"v{u} + {unit}({scale})" if scale else f"v{u}"
        text += f"    y[base + tid + {u * WG}u] = {value};\n"
    return text + "}\n"


def main():
    dev = Device()
    print(f"device: {dev.adapter_name}, driver {dev.driver}")
    rng = np.random.default_rng(0)
    x16 = dev.upload(rng.standard_normal(ROWS * COLS).astype(np.float16), "f16")
    x32 = dev.upload(rng.standard_normal(ROWS * COLS).astype(np.float32))
    y16, y32 = dev.empty(ROWS * COLS, "f16"), dev.empty(ROWS * COLS)
    print(f"{'kernel':<34} {'us':>8} {'GB/s':>8}")
    for dtype, unit, units, x, y in (("f16", "vec4<u32>", 2, x16, y16), ("f32", "vec4<f32>", 4, x32, y32)):
        for variant in ("empty", "empty-1wg", "copy", "array", "reduce"):
            base = variant.split("-")[0]
            kernel = dev.kernel(f"probe {dtype} {variant}", source(unit, units, base), 1, 1, "II")
            grid = (1, 1, 1) if variant.endswith("1wg") else dev.grid(ROWS)
            seconds = time_anygpu(dev, lambda: dev.launch(kernel, [x], [y], (ROWS, COLS), grid), 0.1)
            nbytes = 2.0 * x.nbytes if base != "empty" else 0.0
            print(f"{dtype + ' ' + variant:<34} {seconds * 1e6:8.2f} {nbytes / seconds / 1e9:8.1f}")
        got, want = dev.read(y), dev.read(x)
        assert np.array_equal(got.view(np.uint16 if dtype == "f16" else np.uint32),
                              want.view(np.uint16 if dtype == "f16" else np.uint32)), dtype


if __name__ == "__main__":
    main()
