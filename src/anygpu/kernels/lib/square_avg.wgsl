// The running average of squared gradients that Adadelta (optim_adadelta.wgsl, with rho) and
// RMSprop (optim_rmsprop.wgsl, with alpha) keep, bound right after the parameter.
@group(0) @binding(3) var<storage, read_write> square_avg: array<f32>;

// square_avg[i] = square_avg[i] * keep + (weight * g) * g (weight = 1 - keep), returned.
fn update_square_avg(i: u32, g: f32, keep: f32, weight: f32) -> f32 {
    let v = square_avg[i] * keep + (weight * g) * g;
    square_avg[i] = v;
    return v;
}
