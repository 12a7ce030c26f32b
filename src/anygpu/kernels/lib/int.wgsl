// Integer helpers: floor division and the remainder with the divisor's sign (torch's // and %
// on integers), and a power by squaring (negative exponents as torch: 0 unless the base is +-1).
// Both are written with `/` only: on NVIDIA's Vulkan driver (580.159, H200) the i32 `%` that
// naga emits gave wrong remainders (e.g. -40 % 18 -> 0), while `/` was exact. Signs are
// compared as (x ^ b) < 0.
fn int_floor_div(a: i32, b: i32) -> i32 {
    let q = a / b;
    let r = a - q * b;
    return select(q, q - 1, (r != 0) && ((r ^ b) < 0));
}

fn int_floor_mod(a: i32, b: i32) -> i32 {
    let r = a - (a / b) * b;
    return select(r, r + b, (r != 0) && ((r ^ b) < 0));
}

fn int_pow(a: i32, b: i32) -> i32 {
    if (b < 0) {  // as torch: 1 ** b = 1, (-1) ** b = +-1, 0 for every other base
        if (a == -1) { return select(1, -1, (b & 1) != 0); }
        return select(0, 1, a == 1);
    }
    var result = 1;
    var base = a;
    var e = u32(b);
    loop {
        if (e == 0u) { break; }
        if ((e & 1u) == 1u) { result = result * base; }
        base = base * base;
        e = e >> 1u;
    }
    return result;
}
