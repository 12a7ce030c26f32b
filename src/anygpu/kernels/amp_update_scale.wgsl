// GradScaler.update on the GPU (torch's _amp_update_scale_), one thread, in place:
//   any found_inf flag set: scale = scale * backoff_factor, growth_tracker = 0
//   else: growth_tracker + 1 reaching growth_interval: scale = scale * growth_factor if that is
//         finite, growth_tracker = 0; otherwise growth_tracker += 1
// The factors are doubles split into two f32 (hi + lo): products are rounded once, as torch's
// float(scale * double_factor). Launched by anygpu/ops/scaler.py update_scale.
//! include lib/exact_f32.wgsl
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
{{FLAG_BINDINGS}}
@group(0) @binding({{SCALE_BINDING}}) var<storage, read_write> scale: array<f32>;
@group(0) @binding({{TRACKER_BINDING}}) var<storage, read_write> growth_tracker: array<i32>;

@compute @workgroup_size(1)
fn main() {
    if ({{ANY_FLAG}}) {
        scale[0] = times_double(scale[0], P.backoff_hi, P.backoff_lo);
        growth_tracker[0] = 0;
        return;
    }
    let successful = growth_tracker[0] + 1;
    if (successful == P.growth_interval) {
        let grown = times_double(scale[0], P.growth_hi, P.growth_lo);
        if (finite(grown)) {
            scale[0] = grown;
        }
        growth_tracker[0] = 0;
    } else {
        growth_tracker[0] = successful;
    }
}
