// Backward of layer_norm.wgsl with the affine gradients' partial sums: each workgroup takes
// P.chunk consecutive rows, computes grad_x of each as layer_norm_backward.wgsl does, and sums
// grad_out * xhat and grad_out of its rows per column. Thread t owns the columns c = t + j * WG
// (j < PER): it keeps their gamma, the row's grad_out and xhat (read once a row) and the two
// column sums in registers (loops of constant length over j, so the arrays need no memory),
// and at the end writes
//   partial[w, c] = sum over w's rows of grad_out * xhat   (grad_gamma's share)
//   partial[w, cols + c] = sum over w's rows of grad_out   (grad_beta's share)
// which the caller sums over w (ops/reduce.sum_rows). One kernel and no [rows, cols]
// grad_out * xhat in memory, where the one-row kernel writes it and two reductions read it back.
// flags: bit 0 gamma given (else bound to x, unread). cols <= WG * PER.
struct Params { rows: u32, cols: u32, chunk: u32, flags: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad_out: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read> stats: array<f32>;
@group(0) @binding(5) var<storage, read_write> grad_x: array<f32>;
@group(0) @binding(6) var<storage, read_write> partial: array<f32>;

const WG: u32 = 64u;
const PER: u32 = {{PER}}u;
//! include lib/workgroup_reduce.wgsl

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = wid.x + wid.y * nwg.x;
    let first = w * P.chunk;
    if (first >= P.rows) { return; }   // uniform per workgroup: safe before the barriers
    var gm: array<f32, PER>;
    var acc: array<vec2<f32>, PER>;    // (sum of grad_out * xhat, sum of grad_out)
    var gv: array<f32, PER>;
    var xv: array<f32, PER>;
    for (var j = 0u; j < PER; j++) {
        let c = t + j * WG;
        gm[j] = 1.0;
        if (c < P.cols && (P.flags & 1u) != 0u) { gm[j] = gamma[c]; }
        acc[j] = vec2<f32>(0.0);
    }
    let last = min(first + P.chunk, P.rows);
    let n = f32(P.cols);
    for (var r = first; r < last; r++) {
        let base = r * P.cols;
        let mean = stats[2u * r];
        let rstd = stats[2u * r + 1u];
        var sum_gy = 0.0;
        var sum_gy_xhat = 0.0;
        for (var j = 0u; j < PER; j++) {
            let c = t + j * WG;
            gv[j] = 0.0;
            xv[j] = 0.0;
            if (c < P.cols) {
                gv[j] = grad_out[base + c];
                xv[j] = (x[base + c] - mean) * rstd;
                let gy = gv[j] * gm[j];
                sum_gy += gy;
                sum_gy_xhat += gy * xv[j];
            }
        }
        let sums = workgroup_sum4(t, vec4<f32>(sum_gy, sum_gy_xhat, 0.0, 0.0));
        let mean_gy = sums.x / n;
        let mean_gy_xhat = sums.y / n;
        for (var j = 0u; j < PER; j++) {
            let c = t + j * WG;
            if (c < P.cols) {
                grad_x[base + c] = rstd * (gv[j] * gm[j] - mean_gy - xv[j] * mean_gy_xhat);
                acc[j] += vec2<f32>(gv[j] * xv[j], gv[j]);
            }
        }
    }
    let out = w * 2u * P.cols;
    for (var j = 0u; j < PER; j++) {
        let c = t + j * WG;
        if (c < P.cols) {
            partial[out + c] = acc[j].x;
            partial[out + P.cols + c] = acc[j].y;
        }
    }
}
