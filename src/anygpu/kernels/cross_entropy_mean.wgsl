// reduction='mean' of cross_entropy.wgsl's rows, one workgroup: loss = sum_r nll[r] / sum_r w_t[r]
// (torch's weighted mean; 0/0 = NaN when every row is ignored), and that denominator kept at
// stats[2 * rows] for the backward (cross_entropy_backward.wgsl with mean = 1).
struct Params { rows: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> parts: array<f32>;
@group(0) @binding(2) var<storage, read> row_weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> loss: array<f32>;
@group(0) @binding(4) var<storage, read_write> stats: array<f32>;

const WG: u32 = 256u;
//! include lib/row_per_workgroup.wgsl
fn row_count() -> u32 { return 1u; }

fn row_body(r: u32, t: u32) {
    var nll = 0.0;
    var w = 0.0;
    for (var i = t; i < P.rows; i += WG) {
        nll += parts[i];
        w += row_weight[i];
    }
    let sums = workgroup_sum4(t, vec4<f32>(nll, w, 0.0, 0.0));
    if (t == 0u) {
        loss[0] = sums.x / sums.y;
        stats[2u * P.rows] = sums.y;
    }
}
