// 1 / sqrt(variance + eps) for normalisations that divide the deviations by their largest
// magnitude `unit` before squaring (so values near 1e30 do not overflow): `scaled` is the
// mean square of the scaled deviations. Where unit^2 falls below f32's normal range, drivers
// that flush subnormals (NVIDIA) made eps / unit^2 infinite (rstd 0, so zero gradients) or
// 0 / 0 at eps 0 (NaN); there the true variance is below 1e-36, so eps alone decides, or at
// eps 0 the scaled form without the eps term.
fn scaled_rstd(scaled: f32, eps: f32, unit: f32) -> f32 {
    let normal = inverseSqrt(scaled + eps / (unit * unit)) / unit;
    let tiny = select(inverseSqrt(scaled) / unit, inverseSqrt(scaled * unit * unit + eps), eps > 0.0);
    return select(tiny, normal, unit >= 1e-18);
}
