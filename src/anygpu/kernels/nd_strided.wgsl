{{ENABLE}}
// Strided gather (mode 0): out[i] = x[offset + sum(coord_d * stride_d)], i row-major over `shape`.
// Strided scatter (mode 1): out[offset + sum(coord_d * stride_d)] = x[i] (positions must be unique).
// Used for permute, slicing, expand and their backward. Elements are {{T}}: u32 words serve
// every 4-byte dtype. A gather may convert f16 <-> f32 on the way ({{OUT_T}} elements out).
// Where the layout allows, an element is a unit of several (vec4<u32>, vec2<u32>, u32 of
// halves; vec4<f32> <-> vec4<f16>) and the walk is counted in units (nd.strided_units).
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{OUT_T}}>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    var rest = i;
    var j = P.offset;
    for (var d = 7i; d >= 8i - i32(P.ndim); d = d - 1i) {
        let size = P.shape[d / 4][d % 4];
        j = j + (rest % size) * P.strides[d / 4][d % 4];
        rest = rest / size;
    }
    if (P.mode == 0u) {
        out[i] = {{OUT_T}}(x[j]);
    } else {
        out[j] = {{OUT_T}}(x[i]);
    }
}
