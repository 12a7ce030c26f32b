{{ENABLE}}
// Reduce the middle axis of x viewed as [outer, mid, inner]: out[o, i] = R_m x[o, m, i].
// One workgroup per output element; its 256 threads stride over `mid` and combine in
// workgroup memory, in {{C}} (elements stored as {{T}}). OP: 0 sum, 1 max, 2 min, 3 argmax,
// 4 argmin (the index, when ARG). Ties in arg-reductions go to the lowest index, as in torch.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{OUT_T}}>;

var<workgroup> vals: array<{{C}}, 256>;
var<workgroup> idxs: array<u32, 256>;

// NaN test of the element kind: a bit test for floats ({{NAN_TEST}} of `v`), since
// compilers may fold `v != v` to false; `false` for integers.
fn is_nan(v: {{C}}) -> bool { return {{NAN_TEST}}; }

fn better(op: u32, a: {{C}}, ia: u32, b: {{C}}, ib: u32) -> bool {
    // Is (b, ib) preferred over (a, ia)? NaN wins, like torch (the first NaN for arg-ops).
    if (is_nan(b)) { return !is_nan(a) || ib < ia; }
    if (is_nan(a)) { return false; }
    if (op == 1u || op == 3u) {
        return b > a || (b == a && ib < ia);
    }
    return b < a || (b == a && ib < ia);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = wid.x + wid.y * nwg.x;
    let total = P.outer * P.inner;
    let t = lid.x;
    var acc = {{C}}(0);
    var best_i = 0xffffffffu;
    if (o < total) {
        let base = (o / P.inner) * P.mid * P.inner + (o % P.inner);
        if (P.op == 0u) {
            for (var m = t; m < P.mid; m = m + 256u) { acc = acc + {{C}}(x[base + m * P.inner]); }
        } else {
            var first = true;
            for (var m = t; m < P.mid; m = m + 256u) {
                let v = {{C}}(x[base + m * P.inner]);
                if (first || better(P.op, acc, best_i, v, m)) { acc = v; best_i = m; first = false; }
            }
        }
    }
    vals[t] = acc;
    idxs[t] = best_i;
    workgroupBarrier();
    for (var stride = 128u; stride > 0u; stride = stride / 2u) {
        if (t < stride) {
            if (P.op == 0u) {
                vals[t] = vals[t] + vals[t + stride];
            } else if (idxs[t + stride] != 0xffffffffu &&
                       (idxs[t] == 0xffffffffu || better(P.op, vals[t], idxs[t], vals[t + stride], idxs[t + stride]))) {
                vals[t] = vals[t + stride];
                idxs[t] = idxs[t + stride];
            }
        }
        workgroupBarrier();
    }
    if (t == 0u && o < total) {
        if (P.op >= 3u) { out[o] = {{OUT_T}}(idxs[0]); } else { out[o] = {{OUT_T}}(vals[0]); }
    }
}
