{{ENABLE}}
// Gather along one axis of x viewed as [outer, dim_size, inner]:
//   out[o, j, i] = x[o, index[k], i],  j < n_index,
// with k = (o * n_index + j) * inner + i when the index has one entry per output element
// (torch.gather, per_element = 1) or k = j when one index [n_index] selects a whole inner
// row for every o (index_select, embedding; per_element = 0). Elements are {{T}}: u32 words
// serve every 4-byte dtype. Negative indices count from the end; an index still out of range
// writes MISSING (NaN's bits in words; callers check host-side indices before launching).
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> index: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<{{T}}>;

const MISSING: {{T}} = {{MISSING}};
//! include lib/index_axis.wgsl

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let at = indexed_at(i);
    if (!at.valid) {
        out[i] = MISSING;
        return;
    }
    out[i] = x[at.at];
}
