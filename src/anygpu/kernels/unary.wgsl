// out[i] = f(x[i]) for a scalar expression f of `v` (and the parameter `alpha`).
struct Params { n: u32, alpha: f32, beta: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// erf to about 1.5e-7 (Abramowitz & Stegun 7.1.26): WGSL has no erf built-in.
fn erf_approx(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(x) * (1.0 - poly * exp(-x * x));
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let v = x[i];
    let alpha = P.alpha;
    let beta = P.beta;
    out[i] = {{EXPR}};
}
