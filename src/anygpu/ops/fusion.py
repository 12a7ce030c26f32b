"""Lazy fusion of elementwise chains: many small ops, few kernels.

An elementwise op on f32 or f16 Buffers (`elementwise.unary` / `binary`, and the ops and
Tensor methods built on them) does not launch. It returns a Buffer without memory whose `_lazy`
is a `Node` (the op's expression, its scalar parameters, its arguments: realized Buffers
or other pending Nodes), and appends the Node to the device's `_lazy` list. The device
realizes every pending Node before any other work can read or change memory
(`Device.realize_lazy`, called by every other launch, copy, read, write and flush, and
by `Buffer._gpu`), so a deferred op always sees its inputs as they were when it was
called: in-place kernels (optimizers, setitem) and host writes come after it.

Realizing (`realize`) walks the pending Nodes once, in creation order, and cuts them per
length into runs of at most MAX_NODES ops, MAX_PARAMS scalars and MAX_BINDINGS
buffers. A run becomes one generated kernel (template kernels/fused.wgsl) that writes a
Node only when its Buffer is still held (autograd's saved tensors: written by the kernel
that computes it, so later reuse is exact and never recomputes), when a later run reads
it (into a temporary), or when nothing reads it at all (a result nobody holds still runs,
and ends its kernel, so a timing loop's repeats are not merged). An intermediate nobody
holds (`y = f(g(x))`: g's result) never touches memory. A run of a single op launches
that op's own kernel (`elementwise.launch_unary` / `launch_binary`).

The kernel text depends only on the run's structure (ops, wiring, which Nodes are written,
dtype, vec4 or not): scalars travel as uniform parameters, so the same chain with other
constants reuses one pipeline. Each op's formula is its entry in elementwise's UNARY /
BINARY tables, emitted once per kernel as a WGSL function, and each op's result goes
through `rounded` before the next op reads it: an opaque identity (xor with a uniform zero),
so no compiler can contract or simplify across ops (an fma rounds once and may not overflow
where the op-by-op kernels do); an f16 result is rounded to f16 bits (pack2x16float), xor'd
there and widened back, as the op's own kernel's store and the next kernel's load would.
Results match op-by-op execution bit for bit, NaN and inf included (a NaN's sign aside
where IEEE leaves it open, NaN * NaN; tests/ops/test_fusion.py, lavapipe and the H200).
f16 ran op by op until 2026-11-30: the H200's compiler drops a register round trip
f32(f16(x)), so fused chains kept f32 intermediates and differed from op by op.
A binary op's second operand passes an identity of its own (xor with the zero word times
the op's number): in one kernel `a - a` (one value on both sides, or two equal ops the
compiler merged) was folded to 0 for NaN and inf, where the op's kernel loads two bindings.

f32 and f16 mix in one kernel (autocast's chains): each input and output binding has its
own type, everything computes in f32, and a cast between f32 and f16 (nd.cast, `defer_cast`)
is a Node whose expression is its argument and whose dtype is the target: its conversion is
the rounding of its value (`rounded`), so a chain such as f16 product -> cast -> add of an
f32 residual -> cast back is one kernel, with the op-by-op kernels' bits (f32 -> f16 rounds
to nearest even and overflows to inf as the cast kernel's f16(); a NaN stays a NaN with its
sign). A cast alone runs the cast kernel (nd.launch_cast); casts left alone at the end of a
realization (of several lengths: autocast's copies of weights) run as one multi-tensor cast
per target dtype (foreach.cast_many, `_flush`). A product's epilogue keeps the product's dtype:
a cast ends it (matmul_gen.Epilogue has one element type).

Products (matmul.matmul_strided, float dtypes) are deferred too (`defer_product`, which
first realizes what is pending, so a product is always the first Node realize gets). When
realized, the chain of elementwise Nodes that read it (each the previous one's value:
unary ops, or binary ops whose other operand is a realized Buffer) is folded into the
product's store as an epilogue (matmul_gen.Epilogue, generated WGSL keyed by the chain's
structure, each value `rounded` as above), writing the chain's values that are held, read
elsewhere or last. A linear layer's bias is part of the product (matmul_strided's `bias`).
So `relu(x @ w.T + b)` is one kernel, and so is an activation's backward applied to the
gradient product `dy @ w` (linear_backward computes that product last).
Convolutions (ops/conv.py: conv2d, conv_transpose2d and so conv2d's input gradient, f32) are
deferred the same way with their own limit on scalars (`room`, what their parameter blocks
leave of the uniform slot): `relu(conv2d(x, w, b))` is one kernel too.

`ANYGPU_FUSE=0` (or `dev.fuse = False`) launches every op and product at once (a bias
still goes into its product's store). `dev.stats`: "dispatches" counts real dispatches,
"fused_ops" the elementwise ops that ran inside fused kernels of two or more ops or in
product epilogues, "fused_kernels" those kernels.
"""

from __future__ import annotations

import weakref

from ..runtime import Buffer, Params, load_shader
from ..runtime.dtypes import DTYPES
from . import elementwise, foreach

# Limits of one fused kernel; a longer chain becomes several kernels.
MAX_NODES = 64      # ops
MAX_PARAMS = 60     # scalar parameters (the 256-byte uniform slot: n, zero, 2 pad words, 60 values)
MAX_BINDINGS = 16   # input plus output buffers (and at most the adapter's limit)
# Ops deferred before they are realized regardless (bounds host memory and realize's work).
MAX_DEFERRED = 1024
FUSABLE = frozenset(("f32", "f16"))

_ref = weakref.ref


class Node:
    """One deferred elementwise op: `expr` (a UNARY or BINARY expression) of `args`
    (realized Buffers or pending Nodes) with scalar parameters alpha, beta. `ref` is a
    weak reference to the Buffer it fills (dead: only its readers need the value);
    `readers` counts the pending Nodes that read it. While realizing: `out` is the
    Buffer it is written to (if any), `seen` its readers in its own kernel so far."""

    __slots__ = ("name", "expr", "args", "alpha", "beta", "ref", "n", "dtype", "readers", "seen", "out",
                 "produce", "inputs", "room")

    def __init__(self, name: str, expr: str, args: tuple, alpha: float, beta: float, ref, n: int,
                 dtype: str, produce=None, inputs: int = 0):
        self.name = name
        self.expr = expr
        self.args = args
        self.alpha = alpha
        self.beta = beta
        self.ref = ref
        self.n = n
        self.dtype = dtype
        self.readers = self.seen = 0
        self.out = None
        # A deferred product (defer_product): the function recording it, its bound inputs.
        self.produce = produce
        self.inputs = inputs
        self.room = MAX_EPILOGUE_PARAMS  # a product's epilogue: at most this many scalars


def defer_unary(dev, name: str, expr: str, x, alpha: float, beta: float):
    """The Buffer of unary op `name` (`expr`) of x (an f32 or f16 Buffer; checked by the op),
    computed when it is needed."""
    arg = x._lazy
    if arg is None:
        arg = x
    else:
        arg.readers += 1
    return _defer(dev, Node(name, expr, (arg,), alpha, beta, None, x.len, x.dtype))


def defer_binary(dev, name: str, expr: str, a, b, alpha: float):
    """The Buffer of binary op `name` (`expr`) of a and b (equal-length f32 or f16 Buffers;
    checked by the op), computed when it is needed."""
    args = []
    for buf in (a, b):
        arg = buf._lazy
        if arg is None:
            args.append(buf)
        else:
            arg.readers += 1
            args.append(arg)
    return _defer(dev, Node(name, expr, tuple(args), alpha, 0.0, None, a.len, a.dtype))


# A cast between f32 and f16 is a Node of the target dtype whose expression is its argument:
# the conversion is the rounding every op's result gets (`rounded`, of the Node's dtype).
CAST = "v"


def defer_cast(dev, x, dtype: str):
    """The Buffer of x (a non-empty f32 or f16 Buffer) converted to the other of the two,
    computed when it is needed: inside a fused kernel a conversion step, alone the cast's
    own kernel (nd.launch_cast)."""
    arg = x._lazy
    if arg is None:
        arg = x
    else:
        arg.readers += 1
    return _defer(dev, Node("cast", CAST, (arg,), 0.0, 0.0, None, x.len, dtype))


def defer_product(dev, n: int, dtype: str, produce, inputs: int, room: int = 0, name: str = "matmul"):
    """The Buffer of a product (n elements of dtype) that `produce` records when it is
    realized, with the elementwise ops that read it by then folded into its store:
    produce(out, steps=, written=, extras=, outputs=, values=) (matmul._launch,
    conv._launch_conv2d; see matmul_gen.Epilogue). `inputs`: the Buffers the product binds
    without an epilogue's extra inputs (A, B and a bias). `room`: at most this many
    epilogue scalars fit the product's parameter block (0: MAX_EPILOGUE_PARAMS, a
    matmul's). Pending work goes first: a product is always the first Node of what realize
    gets."""
    dev.realize_lazy()
    node = Node(name, None, (), 0.0, 0.0, None, n, dtype, produce, inputs)
    if room:
        node.room = min(room, MAX_EPILOGUE_PARAMS)
    return _defer(dev, node)


def _defer(dev, node: Node):
    """Queue `node` on the device and return the Buffer it will fill."""
    out = Buffer(dev, None, 0, node.n, node.dtype)
    node.ref = _ref(out)
    out._lazy = node  # memory comes with realization (Device._attach)
    lazy = dev._lazy
    if not lazy:
        dev._realizer = realize
    lazy.append(node)
    if len(lazy) >= MAX_DEFERRED:
        dev.realize_lazy()
    return out


_USES: dict[str, int] = {}


def _uses(expr: str) -> int:
    """Which parameters `expr` reads: 1 alpha, 2 beta, 3 both."""
    uses = _USES.get(expr)
    if uses is None:
        uses = _USES[expr] = ("alpha" in expr) + 2 * ("beta" in expr)
    return uses


class _Run:
    """The kernel being assembled for Nodes of one (length, dtype)."""

    __slots__ = ("local", "inputs", "input_index", "spec", "params", "written")

    def __init__(self):
        self.local: dict = {}        # Node -> its index in the run (in order)
        self.inputs: list = []       # Buffers bound as inputs
        self.input_index: dict = {}  # Buffer -> its input number
        self.spec: list = []         # per Node: expr, arity, then each argument (>= 0: a Node of
        self.params: list = []       # the run, < 0: input -1 - k)
        self.written = 0             # Nodes of the run that are alive or read after it (so far)


def realize(dev, nodes: list) -> None:
    """Record kernels computing every Node of `nodes` (creation order); the device has
    taken them off its list (Device.realize_lazy)."""
    if nodes[0].produce is not None:  # a product, with the ops it can take as its epilogue
        try:
            nodes = _realize_product(dev, nodes)
        except BaseException:
            _abandon(dev, nodes)
            raise
        if not nodes:
            return
    if len(nodes) == 1:  # one op between other work: its own kernel, at once
        node = nodes[0]
        out = node.ref()
        if out is None or out._lazy is not node:
            out = dev.empty(node.n, node.dtype)  # nobody holds it, but it runs
        else:
            out._lazy = None
            dev._attach(out)
        _launch_alone(dev, node, tuple(arg.out if type(arg) is Node else arg for arg in node.args), out)
        return
    limit = min(MAX_BINDINGS, int(dev.limits.get("max-storage-buffers-per-shader-stage", 8)))
    runs: dict = {}  # n -> its open _Run (f32 and f16 Nodes of one length share a kernel)
    n = None
    run = local = None
    uses_of = _USES
    held = []  # the Buffers being written, held until their kernels are recorded
    try:
        # The hot loop of fusion (one pass per op): kept to plain local operations.
        for node in nodes:
            buf = node.ref()
            if buf is not None and buf._lazy is node:
                node.out = buf
                held.append(buf)
            if node.n != n:
                n = node.n
                run = runs.get(n)
                if run is None:
                    run = runs[n] = _Run()
                local = run.local
            args = node.args
            expr = node.expr
            uses = uses_of.get(expr)
            if uses is None:
                uses = _uses(expr)
            arg = args[0]
            count = len(local)
            if len(args) == 1 and arg in local:  # a link of a chain: the usual case
                params = run.params
                stays = arg.seen + 1 != arg.readers or arg.out is not None  # still written
                if (count < MAX_NODES and len(run.inputs) + run.written + stays <= limit
                        and (not uses or len(params) + (uses & 1) + (uses >> 1) <= MAX_PARAMS)):
                    arg.seen += 1
                    run.written += stays
                    if uses:
                        if uses & 1:
                            params.append(node.alpha)
                        if uses & 2:
                            params.append(node.beta)
                    run.spec += (expr, node.dtype, 1, local[arg])
                    local[node] = count
                    if not node.readers and node.out is None:
                        _emit(dev, run)  # see _place
                        run = runs[n] = _Run()
                        local = run.local
                    continue
            run = _place(dev, runs, run, node, uses, limit)
            local = run.local
        _flush(dev, runs.values())
    finally:
        # After a failed launch (its error surfaces here) the rest stays unrealized: its
        # contents are undefined, as a failed batch's are, and it waits on nothing.
        for node in nodes:
            buf = node.out
            if buf is not None and buf._lazy is not None:
                buf._lazy = None
                if buf._mem is None:
                    dev._attach(buf)
        del held


# Limits of a product's epilogue: ops, and scalars (the 256-byte uniform slot: 16 words of the
# product, 4 of the zero word and padding, then these).
MAX_EPILOGUE = 16
MAX_EPILOGUE_PARAMS = 48


def _realize_product(dev, nodes: list) -> list:
    """Record the product nodes[0] with an epilogue: the chain of later Nodes that each read
    the previous one's value (the product's first), unary ops or binary ops whose other
    operand is a realized Buffer, within the limits. A value of the chain is written when
    its Buffer is held, when a Node outside the chain reads it, or when it is the last.
    Returns the other Nodes, for the ordinary pass."""
    head = nodes[0]
    limit = min(MAX_BINDINGS, int(dev.limits.get("max-storage-buffers-per-shader-stage", 8)))
    chain, steps, extras, values, rest = [head], [], [], [], []
    tail, writes = head, 0  # writes: the chain's values before the tail that must be written
    for node in nodes[1:]:
        args = node.args
        if tail is None or not any(arg is tail for arg in args):
            rest.append(node)
            continue
        other = None
        if len(args) == 2:
            other = args[1] if args[0] is tail else args[0]
        uses = _uses(node.expr)
        scalars = ([node.alpha] if uses & 1 else []) + ([node.beta] if uses & 2 and other is None else [])
        buf = tail.ref()
        tail_written = (buf is not None and buf._lazy is tail) or tail.readers > 1
        if (len(steps) < MAX_EPILOGUE and type(other) is not Node and node.dtype == head.dtype  # no casts
                and len(values) + len(scalars) <= head.room
                and head.inputs + len(extras) + (other is not None) + writes + tail_written + 1 <= limit):
            steps.append((node.expr, len(args), other is None or args[0] is tail))
            if other is not None:
                extras.append(other)
            values += scalars
            writes += tail_written
            chain.append(node)
            tail = node
        else:
            tail = None  # the chain ends; later Nodes read its values as Buffers
            rest.append(node)
    written, outputs = [], []
    for k, node in enumerate(chain):
        buf = node.ref()
        held = buf is not None and buf._lazy is node
        if held or node.readers > 1 or k == len(chain) - 1:
            if held:
                buf._lazy = None
                dev._attach(buf)
            else:
                buf = dev.empty(node.n, node.dtype)
            node.out = buf
            written.append(k)
            outputs.append(buf)
    head.produce(outputs[0], steps=tuple(steps), written=tuple(written), extras=tuple(extras),
                 outputs=tuple(outputs[1:]), values=tuple(values))
    if steps:
        dev.stats["fused_ops"] += len(steps)
        dev.stats["fused_kernels"] += 1
    return rest


def _abandon(dev, nodes: list) -> None:
    """After a failed launch: held Buffers of `nodes` get memory (undefined contents, as a
    failed batch's) and wait on nothing."""
    for node in nodes:
        buf = node.ref()
        if buf is not None and buf._lazy is node:
            buf._lazy = None
            if buf._mem is None:
                dev._attach(buf)


def _place(dev, runs: dict, run: _Run, node: Node, uses: int, limit: int) -> _Run:
    """Add `node` to `run`, or record `run` and start a new one when a limit would be
    broken; returns the run now open for node's (length, dtype)."""
    while True:  # twice at most: a full run is recorded and a new one started
        local, inputs = run.local, run.inputs
        refs: list[int] = []
        fresh: list = []  # inputs new to the run
        closing = 0  # Nodes of the run read for the last time here: need not be written
        for arg in node.args:
            k = local.get(arg)
            if k is None:
                src = arg.out if type(arg) is Node else arg
                k = run.input_index.get(src)
                if k is None:
                    if src in fresh:
                        k = len(inputs) + fresh.index(src)
                    else:
                        k = len(inputs) + len(fresh)
                        fresh.append(src)
                k = -1 - k
            elif arg.seen + 1 == arg.readers and arg.out is None and k not in refs:
                closing += 1
            refs.append(k)
        written = run.written + 1 - closing  # each Node is alive, read later or a result
        count = len(local)
        if count and (count >= MAX_NODES or len(inputs) + len(fresh) + written > limit
                      or len(run.params) + (uses & 1) + (uses >> 1) > MAX_PARAMS):
            _emit(dev, run)
            run = runs[node.n] = _Run()
            continue
        break
    for src in fresh:
        run.input_index[src] = len(inputs)
        inputs.append(src)
    for arg in node.args:
        if arg in local:
            arg.seen += 1
    if uses & 1:
        run.params.append(node.alpha)
    if uses & 2:
        run.params.append(node.beta)
    local[node] = count
    run.spec += (node.expr, node.dtype, len(refs), *refs)
    run.written = written
    if not node.readers and node.out is None:
        # A result nobody holds or reads (a timing loop drops its results) still runs,
        # and ends its kernel: repeats of one op are not merged into one kernel.
        _emit(dev, run)
        run = runs[node.n] = _Run()
    return run


def op_function(name: str, expr: str, arity: int, c: str = "f32") -> str:
    """The WGSL function `name` computing UNARY / BINARY expression `expr` in type c:
    name(v, alpha, beta) for unary ops, name(a, b, alpha) for binary ones."""
    args = "v: {c}, alpha: {c}, beta: {c}" if arity == 1 else "a: {c}, b: {c}, alpha: {c}"
    return f"fn {name}({args.format(c=c)}) -> {c} {{\n    return {c}({expr});\n}}"


def param_operands(expr: str, arity: int, first: int, field: str) -> list[str]:
    """The scalar arguments of op_function's function for `expr`: the parameters it reads
    from `field` (an array of vec4, numbered from `first`), 0.0 for those it does not."""
    uses, k, out = _uses(expr), first, []
    for bit in (1, 2) if arity == 1 else (1,):
        if uses & bit:
            out.append(f"{field}[{k // 4}][{k % 4}]")
            k += 1
        else:
            out.append("0.0")
    return out


def rounded(dtype: str, value: str, zero: str = "P.zero") -> str:
    """WGSL of `value` (an op's f32 result) as the next op of a fused kernel reads it: as the
    op's own kernel would store it and the next op's kernel load it back. It passes an
    opaque identity (xor of its bits with `zero`, a uniform 0), so no compiler can contract
    or simplify across ops (an a * b of one op and a + c of the next into an fma, which
    rounds once and may not overflow). An f16 result is rounded to f16 bits with
    pack2x16float, xor'd there and widened exactly with unpack2x16float: on the H200 a plain
    f32(f16(x)) in registers kept x unrounded (benchmarks/fusion_f16_variants.py), so the
    rounding must produce bits the compiler cannot see through."""
    if dtype == "f16":
        return f"unpack2x16float(pack2x16float(vec2<f32>({value}, 0.0)) ^ {zero}).x"
    return f"bitcast<f32>(bitcast<u32>({value}) ^ {zero})"


def _emit(dev, run: _Run) -> None:
    """Record the kernel of `run`, writing its Nodes that are alive or read later."""
    nodes = list(run.local)
    if not nodes:
        return
    outputs, written = [], []
    for k, node in enumerate(nodes):
        buf = node.out
        if buf is not None:
            dev._attach(buf)
        elif node.seen < node.readers or not node.readers:
            # A temporary: a later kernel reads it, or nothing does and nobody holds it (the
            # op still runs, as it would have op by op).
            buf = node.out = dev.empty(node.n, node.dtype)
        else:
            continue  # read only inside this kernel
        outputs.append(buf)
        written.append(k)
    inputs = run.inputs
    first = nodes[0]
    if not first.n:
        return  # empty Buffers: nothing to compute
    if len(nodes) == 1:  # the op's own kernel
        _launch_alone(dev, first, tuple(inputs[-1 - r] for r in run.spec[3:]), outputs[0])
        return
    n = first.n
    vec4 = n % 4 == 0
    structure = (vec4, tuple(buf.dtype for buf in inputs), tuple(run.spec), tuple(written))
    entry = _SOURCES.get(structure)
    if entry is None:
        entry = _SOURCES[structure] = _generate(*structure)
    source, param_format, n_words = entry
    kernel = dev.kernel("fused", source, len(inputs), len(outputs), param_format)
    threads = n // 4 if vec4 else n
    params = run.params
    values = [threads, 0, 0, 0, *params, *([0.0] * (n_words - len(params)))] if n_words else [threads, 0]
    dev.launch(kernel, inputs, outputs, values, elementwise.grid(dev, threads))
    stats = dev.stats
    stats["fused_ops"] += len(nodes)
    stats["fused_kernels"] += 1


def _flush(dev, runs) -> None:
    """Record the runs still open when every Node is placed (one per length). None reads
    another's Nodes: a Node's arguments have its length, so they are in its own run or in
    one recorded before. So the runs that are one cast (of a Buffer realized before, or
    written by a recorded run) go together, those of one target dtype in one multi-tensor
    cast (foreach.cast_many, the cast kernel's bits) where two or more are left: autocast's
    copies of a model's weights, one length each. Runs recorded while placing may be read
    by later ones and keep their own kernels."""
    casts: dict = {}  # target dtype -> its lone casts' runs
    for run in runs:
        lone = next(iter(run.local)) if len(run.local) == 1 else None
        if lone is not None and lone.expr is CAST:
            casts.setdefault(lone.dtype, []).append(run)
        else:
            _emit(dev, run)
    for dtype, group in casts.items():
        if len(group) == 1:
            _emit(dev, group[0])
            continue
        outs = []
        for run in group:
            # What _emit writes for a run of one Node: its held Buffer, or a temporary that
            # nobody holds (the op still runs).
            (node,) = run.local
            if node.out is None:
                node.out = dev.empty(node.n, dtype)
            else:
                dev._attach(node.out)
            outs.append(node.out)
        foreach.cast_many(dev, [run.inputs[0] for run in group], dtype, outs=outs)


# structure -> (kernel text, parameter format, parameter words): one string object per
# structure, which the device's pipeline cache then hashes once.
_SOURCES: dict[tuple, tuple] = {}


def _launch_alone(dev, node: Node, args: tuple, out) -> None:
    """Record the own kernel of `node` (a run of one op) reading the Buffers `args`."""
    if node.expr is CAST:
        from .nd import launch_cast  # (nd imports elementwise, which imports this module)
        launch_cast(dev, args[0], out)
    elif len(args) == 1:
        elementwise.launch_unary(dev, node.name, node.expr, args[0], out, node.alpha, node.beta)
    else:
        elementwise.launch_binary(dev, node.name, node.expr, args[0], args[1], out, node.alpha)


def _generate(vec4: bool, input_dtypes: tuple, spec: tuple, written: tuple):
    """The WGSL of a fused run (see the module doc and kernels/fused.wgsl). Inputs, values
    and outputs may each be f32 or f16 (an f16 value is an f32 rounded to f16: the values
    of casts, `CAST`, and of ops on f16 arguments); everything computes in f32."""
    c = "f32"  # what f32 and f16 elements compute in
    functions, names = [], {}
    body, dtypes = [], []
    n_params = pos = 0
    while pos < len(spec):
        expr, dtype, arity = spec[pos], spec[pos + 1], spec[pos + 2]
        refs = spec[pos + 3:pos + 3 + arity]
        pos += 3 + arity
        dtypes.append(dtype)
        name = names.get((expr, arity))
        if name is None:
            name = names[(expr, arity)] = f"op{len(names)}"
            functions.append(op_function(name, expr, arity, c))
        operands = [f"t{r}" if r >= 0 else f"x{-1 - r}" for r in refs]
        if arity == 2:
            # b through an identity of its own: a compiler that sees one value on both sides
            # (refs equal, or two ops of one expression merged) folds a - a to 0 and a / a
            # to 1, NaN and inf included; the op's own kernel loads two bindings.
            operands[1] = f"bitcast<f32>(bitcast<u32>({operands[1]}) ^ (P.zero * {len(body) + 1}u))"
        scalars = param_operands(expr, arity, n_params, "P.p")
        n_params += sum(x != "0.0" for x in scalars)
        call = f"{name}({', '.join(operands + scalars)})"
        # Every op rounds and overflows exactly as its own kernel, which stores its result.
        body.append(f"    let t{len(body)} = {rounded(dtype, call)};")
    n_in = len(input_dtypes)
    fields = "\n".join(f"    o{m}: {c}," for m in range(len(written)))
    results = ", ".join(f"t{k}" for k in written)
    inputs = ", ".join(f"x{m}: {c}" for m in range(n_in))
    functions.append(f"struct Results {{\n{fields}\n}}\n\nfn fused({inputs}) -> Results {{\n"
                     + "\n".join(body) + f"\n    return Results({results});\n}}")
    loads = [DTYPES[dtype].storage for dtype in input_dtypes]
    stores = [DTYPES[dtypes[k]].storage for k in written]
    bindings = [f"@group(0) @binding({m + 1}) var<storage, read> in{m}: array<{_element(store, vec4)}>;"
                for m, store in enumerate(loads)]
    bindings += [f"@group(0) @binding({n_in + m + 1}) var<storage, read_write> out{m}: array<{_element(store, vec4)}>;"
                 for m, store in enumerate(stores)]
    if vec4:
        lines = [f"    let x{m} = vec4<{c}>(in{m}[i]);" for m in range(n_in)]
        for lane in "xyzw":
            lines.append(f"    let r{lane} = fused({', '.join(f'x{m}.{lane}' for m in range(n_in))});")
        lines += [f"    out{m}[i] = vec4<{store}>(vec4<{c}>(rx.o{m}, ry.o{m}, rz.o{m}, rw.o{m}));"
                  for m, store in enumerate(stores)]
    else:
        lines = [f"    let r = fused({', '.join(f'{c}(in{m}[i])' for m in range(n_in))});"]
        lines += [f"    out{m}[i] = {store}(r.o{m});" for m, store in enumerate(stores)]
    n_words = -(-n_params // 4) * 4
    params = (Params("n: u32", "zero: u32", "pad1: u32", "pad2: u32", f"p: C[{n_words}]") if n_words
              else Params("n: u32", "zero: u32"))
    half = "f16" if "f16" in loads or "f16" in stores else "f32"  # `enable f16;` where an f16 is bound
    source = load_shader("fused.wgsl", half, BINDINGS="\n".join(bindings), FUNCTIONS="\n\n".join(functions),
                         BODY="\n".join(lines), **params.subs(half))
    return source, params.format(half), n_words


def _element(store: str, vec4: bool) -> str:
    return f"vec4<{store}>" if vec4 else store
