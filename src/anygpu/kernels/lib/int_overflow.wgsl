// Exact int64-in-32-bits arithmetic (ops/intmath.py): each checked op returns the wrapped i32
// result and sets the invocation's `overflowed` when the true result is beyond
// [-2**31, 2**31 - 1]; `report_overflow` then records it in the device's overflow words,
// which the including kernel binds read_write as
//     var<storage, read_write> overflow: array<atomic<i32>>;
// word 0: a bit per op code that overflowed; word 1: code + 1 of the first report (0: none
// yet); words 2 and 3: that report's two values (operands, or a position), for the message.
// Only `/` is used for integer division (see lib/int.wgsl on `%`).

const I32_MIN: i32 = -2147483647i - 1i;

var<private> overflowed: bool = false;

fn report_overflow(code: u32, x: i32, y: i32) {
    atomicOr(&overflow[0], 1i << code);
    if (atomicCompareExchangeWeak(&overflow[1], 0i, i32(code) + 1i).exchanged) {
        atomicStore(&overflow[2], x);
        atomicStore(&overflow[3], y);
    }
}

fn add_checked(a: i32, b: i32) -> i32 {
    let r = a + b;
    if (((a ^ r) & (b ^ r)) < 0i) { overflowed = true; }  // both operands' signs differ from r's
    return r;
}

fn sub_checked(a: i32, b: i32) -> i32 {
    let r = a - b;
    if (((a ^ b) & (a ^ r)) < 0i) { overflowed = true; }
    return r;
}

fn mul_checked(a: i32, b: i32) -> i32 {
    let r = a * b;
    if (a == -1i) {
        if (b == I32_MIN) { overflowed = true; }
    } else if (b == -1i) {
        if (a == I32_MIN) { overflowed = true; }
    } else if (a != 0i && r / a != b) {  // exact products divide back (a is not 0 or -1 here)
        overflowed = true;
    }
    return r;
}

// torch's // on integers; only I32_MIN // -1 is beyond 32 bits.
fn floor_div_checked(a: i32, b: i32) -> i32 {
    if (a == I32_MIN && b == -1i) {
        overflowed = true;
        return I32_MIN;
    }
    return int_floor_div(a, b);
}

// a ** b by squaring, each multiply checked; a square is only taken when a later bit of the
// exponent uses it (so (-2) ** 31 fits). Negative exponents as torch: 1 ** b = 1,
// (-1) ** b = +-1, anything else 0.
fn pow_checked(a: i32, b: i32) -> i32 {
    if (b < 0i) { return int_pow(a, b); }
    var result = 1i;
    var base = a;
    var e = u32(b);
    loop {
        if ((e & 1u) == 1u) { result = mul_checked(result, base); }
        e = e >> 1u;
        if (e == 0u) { break; }
        base = mul_checked(base, base);
    }
    return result;
}
