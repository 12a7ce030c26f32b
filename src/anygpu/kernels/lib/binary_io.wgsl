{{ENABLE}}
// The uniforms, bindings and result of the elementwise binary kernels binary.wgsl and
// nd_binary.wgsl (included on their first line: it carries the `enable` directive):
// {{EXPR}} of `a`, `b` and `alpha` computed in {{C}} on elements stored as {{T}}, written as {{OUT_T}}.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> in_a: array<{{T}}>;
@group(0) @binding(2) var<storage, read> in_b: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> out: array<{{OUT_T}}>;

//! include lib/erf.wgsl
//! include lib/int.wgsl

// out[i] = f(in_a[ia], in_b[ib]).
fn store_binary(i: u32, ia: u32, ib: u32) {
    let a = {{C}}(in_a[ia]);
    let b = {{C}}(in_b[ib]);
    let alpha = P.alpha;
    out[i] = {{OUT_T}}({{EXPR}});
}
