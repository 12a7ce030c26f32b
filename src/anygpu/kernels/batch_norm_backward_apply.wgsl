// grad_x of batch norm, one thread per element, with rstd = 1 / sqrt(var + eps),
// xhat = (x - mean) rstd, n = batch*spatial and the channel sums of
// batch_norm_backward_reduce.wgsl (sum_g = sum grad_out, sum_gx = sum grad_out*xhat):
//   training (flags bit 1): grad_x = gamma rstd (grad_out - sum_g / n - xhat sum_gx / n)
//   evaluation:             grad_x = gamma rstd grad_out   (the statistics are constants)
// flags bit 0: gamma given (else bound to x, unread).
struct Params { n: u32, channels: u32, spatial: u32, eps: f32, flags: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad_out: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> mean: array<f32>;
@group(0) @binding(4) var<storage, read> variance: array<f32>;
@group(0) @binding(5) var<storage, read> gamma: array<f32>;
@group(0) @binding(6) var<storage, read> sum_gx: array<f32>;
@group(0) @binding(7) var<storage, read> sum_g: array<f32>;
@group(0) @binding(8) var<storage, read_write> grad_x: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let c = (i / P.spatial) % P.channels;
    var scale = inverseSqrt(variance[c] + P.eps);
    if ((P.flags & 1u) != 0u) { scale = scale * gamma[c]; }
    var g = grad_out[i];
    if ((P.flags & 2u) != 0u) {
        let count = f32(P.n / P.channels);
        let xhat = (x[i] - mean[c]) * inverseSqrt(variance[c] + P.eps);
        g = g - sum_g[c] / count - xhat * sum_gx[c] / count;
    }
    grad_x[i] = scale * g;
}
