// Classes of f32 values read from their bits, for the causal softmax's masked scores
// (kernels/softmax_causal*.wgsl and its register form, ops/row_gen.py): a compiler may not
// fold these tests away as it may float compares with NaN or infinities.
// non_finite: NaN or +-inf. poisons: NaN or +inf, the values that x + (-inf) (torch's
// additive causal mask) turns into NaN. The *4 forms test each lane of a vec4.
fn non_finite(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) >= 0x7f800000u; }
fn poisons(v: f32) -> bool { return non_finite(v) && bitcast<u32>(v) != 0xff800000u; }
fn non_finite4(v: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) >= vec4<u32>(0x7f800000u);
}
fn poisons4(v: vec4<f32>) -> vec4<bool> { return non_finite4(v) & (bitcast<vec4<u32>>(v) != vec4<u32>(0xff800000u)); }
