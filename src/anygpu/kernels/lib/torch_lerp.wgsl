// torch.lerp(start, end, weight), in torch's two forms for weights below and above one half.
fn torch_lerp(start: f32, end: f32, weight: f32) -> f32 {
    return select(end - (end - start) * (1.0 - weight), start + weight * (end - start), weight < 0.5);
}
