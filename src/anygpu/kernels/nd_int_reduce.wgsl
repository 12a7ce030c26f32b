// Reduce the middle axis of i32 x viewed as [outer, mid, inner]: out[o, i] = R_m x[o, m, i].
// One thread per output, looping over mid (integer sums are exact in any order).
// OP: 0 sum, 1 max, 2 min, 3 argmax, 4 argmin (ties go to the lowest index, as in torch).
struct Params { outer: u32, mid: u32, inner: u32, op: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<i32>;
@group(0) @binding(2) var<storage, read_write> out: array<i32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = gid.x + gid.y * nwg.x * 256u;
    if (o >= P.outer * P.inner) { return; }
    let base = (o / P.inner) * P.mid * P.inner + (o % P.inner);
    var acc = x[base];
    var best = 0u;
    if (P.op == 0u) { acc = 0; }
    for (var m = 0u; m < P.mid; m = m + 1u) {
        let v = x[base + m * P.inner];
        if (P.op == 0u) {
            acc = acc + v;
        } else if ((P.op == 1u || P.op == 3u) && v > acc) {
            acc = v;
            best = m;
        } else if ((P.op == 2u || P.op == 4u) && v < acc) {
            acc = v;
            best = m;
        }
    }
    out[o] = select(acc, i32(best), P.op >= 3u);
}
