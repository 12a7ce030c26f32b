"""Subgroup-free WGSL from a kernel written with Dawn's chromium_experimental_subgroup_matrix
and subgroups, by a transform of its text: `emulate(code, sg)`. For tests: lavapipe (CI) has
neither extension, and the emulated kernel runs the same indices, offsets, strides, majors,
bounds and elementwise code as the real one, so a float64 reference checks them there. The
matrix families generated in Python (ops/sgmat.py, ops/conv_sgmat.py) emit their emulated
form themselves; this transform serves kernels that are edited as text (ops/flash_sgmat.py).

What it rewrites (anything else that names a subgroup feature raises ValueError):

- `enable subgroups;`, `enable chromium_experimental_subgroup_matrix;` and the diagnostic
  directives and attributes of subgroup rules are dropped (`enable f16;` is kept or added);
- `alias X = subgroup_matrix_left<f16, K, M>` (WGSL's <type, columns, rows>), `_right<f16,
  N, K>`, `_result<f32, N, M>`: one M x N x K shape per kernel, N dividing sg. Lane l of
  subgroup s (thread s*sg + l) holds elements l, l + sg, ... (row-major) of each result
  matrix, an array<f32, M*N/sg>, so `X()` is still the zero matrix. A left or right matrix is
  what the lane needs of it for those elements, read when it is loaded (as the real load
  does: kernels load matrices, then overwrite the array they came from): the K halves of
  each of the lane's rows (left, array<f16, M*N/sg*K>) or of its column (right, array<f16, K>);
- `@builtin(subgroup_id)`, `subgroup_invocation_id`, `subgroup_size` in the entry point's
  parameters: from local_invocation_index (added where absent) and sg;
- `subgroupMatrixLoad<X, row_major|col_major>(&ARR, offset, stride)` from a module-scope
  array of f16, of u32 or of vec4<u32> (offset and stride then in 4- or 16-byte units: Tint counts both in
  the array's elements), or `(&ARR[slot], ...)` from one array of a module-scope array of such
  arrays (the slotted kernels' per-subgroup arrays, whose loads sit at literal offsets), a
  runtime loop of one load; `subgroupMatrixMultiplyAccumulate(l, r,
  acc)`, straight-line products on those values; `subgroupMatrixStore<row_major|col_major>(
  &ARR, offset, acc, stride)` into a workgroup or storage array of f32, vec4<f32> or
  vec4<u32> (the f32 bits), or into `&ARR[slot]` as for loads, a runtime loop of one store. (lavapipe compiles each load or
  store of a per-lane address in the text slowly, about 50 ms, and inlines every call: a
  flash kernel has dozens of loads and products, so the text holds one load a function and
  products without memory. Loop counts are hidden from the compiler, which would unroll them.);
- `subgroupShuffleXor(x, mask)`, `subgroupShuffle(x, id)`, `subgroupBroadcast(x, id)`,
  `subgroupAdd(x)`, `subgroupMax(x)`, `subgroupMin(x)` of f32, u32 or i32 scalars: through a
  workgroup array of one u32 per thread between two workgroupBarrier()s. So these must be
  called in workgroup-uniform control flow (every thread of the workgroup reaches the same
  calls in the same order), which the real builtins do not need; Tint's uniformity analysis
  rejects an emulated kernel where that is not so (a barrier in non-uniform control flow is
  an error, no diagnostic turns it off), so it fails to compile rather than run wrong. The
  scalar type of x is read from the text (literals, declarations in scope, struct fields,
  conversions); Tint checks it again, since x is passed to a function of that type.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["emulate"]

_DROPPED_EXTENSIONS = {"subgroups", "chromium_experimental_subgroup_matrix"}
_MATRIX_CALLS = ("subgroupMatrixLoad", "subgroupMatrixMultiplyAccumulate", "subgroupMatrixStore")
_LANE_CALLS = ("subgroupShuffleXor", "subgroupShuffle", "subgroupBroadcast", "subgroupAdd", "subgroupMax",
               "subgroupMin")
_CALL = re.compile(r"\b(" + "|".join(_MATRIX_CALLS + _LANE_CALLS) + r")\b\s*(?:<([^<>()]*)>)?\s*\(")
_SUBGROUP_BUILTINS = ("subgroup_id", "subgroup_invocation_id", "subgroup_size")
# Halves per element of the arrays matrices load from, f32 values per element of those they store to.
_LOAD_UNITS = {"f16": 1, "u32": 2, "vec4<u32>": 8}
_STORE_UNITS = {"f32": 1, "vec4<f32>": 4, "vec4<u32>": 4}
_SCALARS = ("f32", "u32", "i32")
# Builtins whose result has their (first) arguments' scalar type: select's first two arguments.
_SAME_TYPE = {"abs", "max", "min", "clamp", "exp", "exp2", "log", "log2", "sqrt", "inverseSqrt", "floor", "ceil",
              "round", "trunc", "fract", "sign", "fma", "mix", "pow", "sin", "cos", "tanh", "select"}
_ARITHMETIC = {"(", ")", "+", "-", "*", "/", "%", "&", "|", "^", "~"}
_TEMPLATED = re.compile(r"(array|vec[234]|mat[234]x[234]|ptr|bitcast|atomic|subgroup\w*)$")
_TOKEN = re.compile(r"\s*(?:(?P<num>0[xX][0-9a-fA-F]+[iu]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fhiu]?)"
                    r"|(?P<id>[A-Za-z_]\w*)|(?P<op>&&|\|\||==|!=|<=|>=|<<|>>|->|\S))")


class _Shape(NamedTuple):
    m: int
    n: int
    k: int
    sg: int

    @property
    def per_lane(self) -> int:      # result elements a lane holds
        return self.m * self.n // self.sg

    @property
    def left(self) -> str:          # the K halves of each of the lane's rows
        return f"array<f16, {self.per_lane * self.k}>"

    @property
    def right(self) -> str:         # the K halves of the lane's column
        return f"array<f16, {self.k}>"

    @property
    def result(self) -> str:
        return f"array<f32, {self.per_lane}>"


def emulate(code: str, sg: int = 32, workgroup_size: int | None = None) -> str:
    """WGSL equivalent to `code` (a compute kernel on subgroup matrices and subgroup builtins,
    subgroups of `sg` threads) that needs neither extension, only f16; see the module
    docstring for what is rewritten and what that requires of the kernel. workgroup_size:
    threads per workgroup where the @workgroup_size attribute is not literal. Raises
    ValueError on a construct it does not know."""
    if sg < 1 or sg & (sg - 1):
        raise ValueError(f"emulate: the subgroup size must be a power of two, got {sg}")
    return _Emulation(_strip_comments(code), sg, workgroup_size).text


class _Emulation:
    def __init__(self, code: str, sg: int, workgroup_size: int | None):
        self.sg = sg
        self.helpers: dict[str, str] = {}          # emitted function name -> its text
        self.returns: dict[str, str] = {}          # emitted function name -> its scalar result type
        text = self._directives(code)
        text, self.shape, self.kinds = self._aliases(text)
        self.arrays = _module_arrays(text)
        text, threads = self._entry_point(text, workgroup_size)
        text = self._calls(text)
        for name, kind in self.kinds.items():
            if re.search(rf"\b{name}\s*\(\s*[^\s)]" if kind == "result" else rf"\b{name}\s*\(", text):
                raise ValueError(f"emulate: {name}(...): only the zero constructor of a result matrix is known")
        left = re.search(r"\b(subgroup\w*|quad[A-Z]\w*)", text)
        if left:
            raise ValueError(f"emulate: {left.group(1)!r} is not emulated")
        at = _entry_attributes(text).start()
        prelude = []
        if any(name.startswith("emulated_exchange_") or name.startswith("emulated_reduce_") for name in self.helpers):
            prelude.append(f"var<workgroup> emulated_exchange: array<u32, {threads}>;")
        self.text = text[:at] + "\n".join(prelude + list(self.helpers.values())) + "\n" + text[at:]

    # ---------------------------------------------------------------- directives and types

    def _directives(self, code: str) -> str:
        """Drop the subgroup extensions and the diagnostics of subgroup rules; enable f16."""
        def enable(m: re.Match) -> str:
            names = [x.strip() for x in m.group(1).split(",") if x.strip()]
            for name in names:
                if "subgroup" in name and name not in _DROPPED_EXTENSIONS:
                    raise ValueError(f"emulate: extension {name} is not emulated")
            kept = [x for x in names if x not in _DROPPED_EXTENSIONS]
            return f"enable {', '.join(kept)};" if kept else ""

        text = re.sub(r"^[ \t]*enable\s+([^;]*);[ \t]*$", enable, code, flags=re.M)
        text = re.sub(r"^[ \t]*diagnostic\s*\(([^()]*)\)\s*;[ \t]*\n?",
                      lambda m: "" if "subgroup" in m.group(1) else m.group(0), text, flags=re.M)
        text = re.sub(r"@diagnostic\s*\(([^()]*)\)\s*", lambda m: "" if "subgroup" in m.group(1) else m.group(0),
                      text)
        if not re.search(r"^\s*enable\s+[^;]*\bf16\b", text, flags=re.M):
            text = "enable f16;\n" + text
        return re.sub(r"\n{3,}", "\n\n", text).lstrip("\n")

    def _aliases(self, text: str) -> tuple[str, _Shape | None, dict[str, str]]:
        """Replace the subgroup-matrix aliases by the emulated types; their one shape."""
        found: dict[str, tuple[str, int, int]] = {}
        dims: dict[str, int] = {}

        def dim(name: str, value: str) -> None:
            number = re.fullmatch(r"(\d+)[iu]?", value)
            if not number:
                raise ValueError(f"emulate: subgroup matrix dimension {value!r} is not a literal")
            if dims.setdefault(name, int(number.group(1))) != int(number.group(1)):
                raise ValueError(f"emulate: subgroup matrices of more than one shape ({name} = {dims[name]} and "
                                 f"{value}) are not emulated")

        for m in re.finditer(r"\balias\s+(\w+)\s*=\s*subgroup_matrix_(left|right|result)\s*<\s*(\w+)\s*,\s*(\w+)"
                             r"\s*,\s*(\w+)\s*>\s*;", text):
            name, kind, ty, cols, rows = m.groups()
            want = "f32" if kind == "result" else "f16"
            if ty != want:
                raise ValueError(f"emulate: subgroup_matrix_{kind}<{ty}, ...> is not emulated (only {want})")
            row_dim, col_dim = {"left": ("m", "k"), "right": ("k", "n"), "result": ("m", "n")}[kind]
            dim(row_dim, rows)
            dim(col_dim, cols)
            found[name] = (kind, m.start(), m.end())
        if not found:
            return text, None, {}
        if set(dims) != {"m", "n", "k"}:
            raise ValueError("emulate: the subgroup matrix aliases do not give all of M, N and K")
        shape = _Shape(dims["m"], dims["n"], dims["k"], self.sg)
        if self.sg % shape.n or (shape.m * shape.n) % self.sg:
            raise ValueError(f"emulate: {shape.m}x{shape.n} result matrices are not emulated over {self.sg} lanes "
                             "(N must divide the subgroup size, the subgroup size M * N)")
        kinds = {name: kind for name, (kind, _, _) in found.items()}
        for name, (kind, start, end) in sorted(found.items(), key=lambda item: -item[1][1]):
            ty = {"left": shape.left, "right": shape.right, "result": shape.result}[kind]
            text = text[:start] + f"alias {name} = {ty};" + text[end:]
        return text, shape, kinds

    # ---------------------------------------------------------------- entry point

    def _entry_point(self, text: str, workgroup_size: int | None) -> tuple[str, int]:
        """Subgroup id, lane and size of the entry point computed from the invocation index;
        the threads per workgroup."""
        head = _entry_attributes(text)
        size = re.search(r"@workgroup_size\s*\(([^()]*)\)", head.group(1))
        if size is None:
            raise ValueError("emulate: the compute entry point has no @workgroup_size")
        parts = [x.strip() for x in size.group(1).split(",") if x.strip()]
        literal = all(re.fullmatch(r"\d+[iu]?", x) for x in parts)
        threads = 1
        for x in parts if literal else ():
            threads *= int(x.rstrip("iu"))
        if not literal and workgroup_size is None:
            raise ValueError(f"emulate: @workgroup_size({size.group(1)}) is not literal: pass workgroup_size")
        if workgroup_size is not None:
            if literal and threads != workgroup_size:
                raise ValueError(f"emulate: workgroup_size={workgroup_size}, but the kernel says {threads}")
            threads = workgroup_size
        if threads % self.sg:
            raise ValueError(f"emulate: {threads} threads a workgroup are not whole subgroups of {self.sg}")
        open_at = head.end() - 1
        close_at = _closing(text, open_at)
        params, names = [], {}
        for param in _split_args(text[open_at + 1:close_at]):
            builtin = re.fullmatch(r"@builtin\s*\(\s*(\w+)\s*\)\s*(\w+)\s*:\s*u32", param.strip())
            if builtin and builtin.group(1) in _SUBGROUP_BUILTINS + ("local_invocation_index",):
                names[builtin.group(1)] = builtin.group(2)
                if builtin.group(1) in _SUBGROUP_BUILTINS:
                    continue
            elif "subgroup" in param:
                raise ValueError(f"emulate: entry point parameter {param.strip()!r} is not emulated")
            params.append(param.strip())
        li = names.get("local_invocation_index")
        if li is None:
            li = "emulated_invocation"
            params.append(f"@builtin(local_invocation_index) {li}: u32")
        body = text.index("{", close_at)
        private = "".join(f"var<private> emulated_{x}: u32;\n" for x in ("li", "lane", "sgid"))
        # A loop count the compiler cannot see (emulated_zero is never written: it reads 0), so
        # that lavapipe does not unroll the loops of the matrix functions.
        private += "var<workgroup> emulated_zero: u32;\nfn emulated_count(n: u32) -> u32 { return emulated_zero + n; }\n"
        lines = [f"emulated_li = {li};", f"emulated_lane = {li} % {self.sg}u;", f"emulated_sgid = {li} / {self.sg}u;"]
        for builtin, value in (("subgroup_id", "emulated_sgid"), ("subgroup_invocation_id", "emulated_lane"),
                               ("subgroup_size", f"{self.sg}u")):
            if builtin in names:
                lines.append(f"let {names[builtin]} = {value};")
        start = head.start()
        return (text[:start] + private + text[start:open_at + 1] + ", ".join(params) + text[close_at:body + 1]
                + "".join("\n  " + x for x in lines) + text[body + 1:]), threads

    # ---------------------------------------------------------------- calls

    def _calls(self, text: str) -> str:
        """Replace the subgroup calls, innermost first."""
        while True:
            for m in _CALL.finditer(text):
                close = _closing(text, m.end() - 1)
                if not _CALL.search(text, m.end(), close):
                    break
            else:
                return text
            args = _split_args(text[m.end():close])
            if m.group(1) in _MATRIX_CALLS:
                new = self._matrix_call(m.group(1), m.group(2), args)
            else:
                if m.group(2) is not None:
                    raise ValueError(f"emulate: {m.group(1)}<{m.group(2)}> takes no template arguments")
                new = self._lane_call(m.group(1), args, _Scope(text, self.returns), m.start())
            text = text[:m.start()] + new + text[close + 1:]

    def _matrix_call(self, name: str, template: str | None, args: list[str]) -> str:
        shape = self.shape
        if shape is None:
            raise ValueError(f"emulate: {name} without subgroup matrix aliases")
        targs = [x.strip() for x in (template or "").split(",") if x.strip()]
        if name == "subgroupMatrixMultiplyAccumulate":
            if targs or len(args) != 3:
                raise ValueError(f"emulate: {name} takes (left, right, acc), got {len(args)} arguments")
            self._multiply_accumulate()
            return f"emulated_multiply_accumulate({', '.join(x.strip() for x in args)})"
        if name == "subgroupMatrixLoad":
            if len(targs) != 2 or len(args) != 3:
                raise ValueError(f"emulate: {name}<matrix alias, major>(&array, offset, stride) expected, "
                                 f"got <{template}> and {len(args)} arguments")
            kind = self.kinds.get(targs[0])
            if kind not in ("left", "right"):
                raise ValueError(f"emulate: {name}<{targs[0]}, ...>: {targs[0]} is not a left or right matrix alias")
            array, slot = self._array(name, args[0], _LOAD_UNITS, False)
            fn = self._load(kind, array, _major(targs[1]), slot is not None)
            return f"{fn}({'' if slot is None else slot + ', '}{args[1].strip()}, {args[2].strip()})"
        if len(targs) != 1 or len(args) != 4:
            raise ValueError(f"emulate: {name}<major>(&array, offset, value, stride) expected, "
                             f"got <{template}> and {len(args)} arguments")
        array, slot = self._array(name, args[0], _STORE_UNITS, True)
        fn = self._store(array, _major(targs[0]), slot is not None)
        return f"{fn}({'' if slot is None else slot + ', '}{args[1].strip()}, {args[2].strip()}, {args[3].strip()})"

    def _array(self, call: str, arg: str, units: dict[str, int], store: bool) -> tuple[str, str | None]:
        """(array name, slot expression or None) of `&name` or `&name[slot]`."""
        m = re.fullmatch(r"\s*&\s*(\w+)\s*(?:\[(.*)\])?\s*", arg, flags=re.S)
        if not m or m.group(1) not in self.arrays:
            raise ValueError(f"emulate: {call} of {arg.strip()!r}: expected &name of a module-scope array")
        space, access, element, nested = self.arrays[m.group(1)]
        slot = m.group(2)
        if nested != (slot is not None):
            raise ValueError(f"emulate: {call} of {arg.strip()!r}: " + (
                "an array of arrays takes one of them, &name[slot]" if nested else "not an array of arrays"))
        if element not in units:
            raise ValueError(f"emulate: {call} of {m.group(1)}, an array of {element}: only arrays of "
                             f"{', '.join(units)} are emulated")
        if store and space == "storage" and access != "read_write":
            raise ValueError(f"emulate: {call} into {m.group(1)}, which is not read_write")
        return m.group(1), None if slot is None else slot.strip()

    def _load(self, kind: str, array: str, major: str, slotted: bool = False) -> str:
        """The function that loads a left or right matrix from `array` (slotted: from array[slot],
        slot its first parameter): what the lane needs of it, the K halves of each of its rows
        (left) or of its column (right), one a round."""
        s = self.shape
        assert s is not None
        fn = f"emulated_{kind}_{array}_{major}"
        if fn in self.helpers:
            return fn
        units = _LOAD_UNITS[self.arrays[array][2]]
        source = f"{array}[slot]" if slotted else array
        # element (r, c): (offset + r * stride) * units + c row-major, r and c swapped col-major
        r, c = ("r", "kk") if kind == "left" else ("kk", "col")
        if major == "col_major":
            r, c = c, r
        ty, count = (s.left, s.per_lane * s.k) if kind == "left" else (s.right, s.k)
        h = f"(offset + {r} * stride) * {units}u + {c}"
        lines = [f"fn {fn}({'slot: u32, ' if slotted else ''}offset: u32, stride: u32) -> {ty} {{",
                 f"  var m: {ty};",
                 f"  for (var t = 0u; t < emulated_count({count}u); t++) {{",
                 f"    let r = emulated_lane / {s.n}u + (t / {s.k}u) * {s.sg // s.n}u;   // the lane's row t / K",
                 f"    let col = emulated_lane % {s.n}u;",
                 f"    let kk = t % {s.k}u;",
                 f"    m[t] = {source}[{h}];" if units == 1 else f"    m[t] = {_half_of_units(source, h, units)};",
                 "  }",
                 "  return m;",
                 "}"]
        self.helpers[fn] = "\n".join(lines)
        return fn

    def _multiply_accumulate(self) -> None:
        """acc + a x b, straight-line code on values (no loops, no memory)."""
        s = self.shape
        assert s is not None
        lines = [f"fn emulated_multiply_accumulate(a: {s.left}, b: {s.right}, acc: {s.result}) -> {s.result} {{"]
        lines += [f"  let b{kk} = f32(b[{kk}]);" for kk in range(s.k)]
        sums = []
        for i in range(s.per_lane):
            lines.append(f"  var s{i} = acc[{i}];")
            lines += [f"  s{i} += f32(a[{i * s.k + kk}]) * b{kk};" for kk in range(s.k)]
            sums.append(f"s{i}")
        self.helpers.setdefault("emulated_multiply_accumulate", "\n".join(
            lines + [f"  return {s.result}({', '.join(sums)});", "}"]))

    def _store(self, array: str, major: str, slotted: bool = False) -> str:
        """The function that stores a result matrix into `array` (f32 elements, 4 to a vec4;
        slotted: into array[slot], slot its first parameter)."""
        s = self.shape
        assert s is not None
        fn = f"emulated_store_{array}_{major}"
        if fn in self.helpers:
            return fn
        element = self.arrays[array][2]
        target = f"{array}[slot]" if slotted else array
        units = _STORE_UNITS[element]
        r, c = ("r", "col") if major == "row_major" else ("col", "r")
        at = f"(offset + {r} * stride) * {units}u + {c}"
        lines = [f"fn {fn}({'slot: u32, ' if slotted else ''}offset: u32, value: {s.result}, stride: u32) {{",
                 f"  let col = emulated_lane % {s.n}u;",
                 "  var v = value;",
                 f"  for (var i = 0u; i < emulated_count({s.per_lane}u); i++) {{",
                 f"    let r = emulated_lane / {s.n}u + i * {s.sg // s.n}u;   // the lane's element i: (r, col)"]
        if element == "f32":
            lines.append(f"    {target}[{at}] = v[i];")
        else:
            lines += [f"    let at = {at};",
                      f"    {target}[at / 4u][at % 4u] = " + ("bitcast<u32>(v[i]);" if element == "vec4<u32>" else "v[i];")]
        self.helpers[fn] = "\n".join(lines + ["  }", "}"])
        return fn

    def _lane_call(self, name: str, args: list[str], scope: "_Scope", at: int) -> str:
        want = 1 if name in ("subgroupAdd", "subgroupMax", "subgroupMin") else 2
        if len(args) != want:
            raise ValueError(f"emulate: {name} takes {want} arguments, got {len(args)}")
        ty = scope.scalar_type(args[0], at)
        x = args[0].strip()
        if want == 2:
            src = f"emulated_lane ^ ({args[1].strip()})" if name == "subgroupShuffleXor" else args[1].strip()
            return f"{self._exchange(ty)}({x}, {src})"
        return f"{self._reduce(name[len('subgroup'):].lower(), ty)}({x})"

    def _bits(self, ty: str) -> tuple[str, str]:
        """(to u32, from u32) wrappers of a value of scalar type ty."""
        return ("", "") if ty == "u32" else ("bitcast<u32>", f"bitcast<{ty}>")

    def _exchange(self, ty: str) -> str:
        fn = f"emulated_exchange_{ty}"
        to, back = self._bits(ty)
        self.returns[fn] = ty
        self.helpers.setdefault(fn, "\n".join([
            f"fn {fn}(x: {ty}, src: u32) -> {ty} {{",
            "  workgroupBarrier();",
            f"  emulated_exchange[emulated_li] = {to}(x);",
            "  workgroupBarrier();",
            f"  return {back}(emulated_exchange[emulated_sgid * {self.sg}u + src % {self.sg}u]);",
            "}"]))
        return fn

    def _reduce(self, op: str, ty: str) -> str:
        fn = f"emulated_reduce_{op}_{ty}"
        to, back = self._bits(ty)
        combine = "r + x" if op == "add" else f"{op}(r, x)"
        self.returns[fn] = ty
        self.helpers.setdefault(fn, "\n".join([
            f"fn {fn}(value: {ty}) -> {ty} {{",
            "  workgroupBarrier();",
            f"  emulated_exchange[emulated_li] = {to}(value);",
            "  workgroupBarrier();",
            f"  let base = emulated_sgid * {self.sg}u;",
            f"  var r = {back}(emulated_exchange[base]);",
            f"  for (var l = 1u; l < {self.sg}u; l++) {{",
            f"    let x = {back}(emulated_exchange[base + l]);",
            f"    r = {combine};",
            "  }",
            "  return r;",
            "}"]))
        return fn


# ---------------------------------------------------------------- text helpers

def _strip_comments(code: str) -> str:
    out, i, depth = [], 0, 0
    while i < len(code):
        if code.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif depth and code.startswith("*/", i):
            depth, i = depth - 1, i + 2
        elif depth:
            i += 1
        elif code.startswith("//", i):
            end = code.find("\n", i)
            i = len(code) if end < 0 else end
        else:
            out.append(code[i])
            i += 1
    return re.sub(r"[ \t]+\n", "\n", "".join(out))


def _closing(text: str, open_at: int) -> int:
    """The index of the bracket closing the one at open_at."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    opener, closer = text[open_at], pairs[text[open_at]]
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == opener:
            depth += 1
        elif text[i] == closer:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"emulate: unbalanced {opener!r} at {text[open_at:open_at + 60]!r}")


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated parts (templates of array, vec and the like count as brackets)."""
    parts, start, stack = [], 0, []
    for i, ch in enumerate(text):
        if ch in "([":
            stack.append(ch)
        elif ch in ")]":
            stack.pop()
        elif ch == "<" and _TEMPLATED.search(text[:i].rstrip()):
            stack.append(ch)
        elif ch == ">" and stack and stack[-1] == "<":
            stack.pop()
        elif ch == "," and not stack:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _half_of_units(array: str, at: str, units: int) -> str:
    """Half `at` of an array of vec4<u32> (units 8) or of u32 (units 2), in memory order."""
    if units == 2:
        return f"bitcast<vec2<f16>>({array}[({at}) / 2u])[({at}) % 2u]"
    return f"bitcast<vec2<f16>>({array}[({at}) / 8u][(({at}) % 8u) / 2u])[({at}) % 2u]"


def _major(name: str) -> str:
    if name not in ("row_major", "col_major"):
        raise ValueError(f"emulate: {name!r} is not row_major or col_major")
    return name


def _entry_attributes(text: str) -> re.Match:
    """The one compute entry point: group 1 its attributes, ending at its parameters' '('."""
    found = [m for m in re.finditer(r"((?:@\w+\s*(?:\([^()]*\))?\s*)+)fn\s+\w+\s*\(", text) if "@compute" in m.group(1)]
    if len(found) != 1:
        raise ValueError(f"emulate: expected one @compute entry point, found {len(found)}")
    return found[0]


def _module_arrays(text: str) -> dict[str, tuple[str, str, str, bool]]:
    """Module-scope array variables: name -> (address space, access, element type, whether it
    is an array of such arrays)."""
    arrays = {}
    for m in re.finditer(r"\bvar\s*<\s*(\w+)\s*(?:,\s*(\w+)\s*)?>\s*(\w+)\s*:\s*array\s*<\s*(array\s*<\s*)?"
                         r"(vec[234]\s*<\s*\w+\s*>|\w+)\s*(?:,[^;]*)?>\s*;", text):
        if text.count("{", 0, m.start()) == text.count("}", 0, m.start()):
            arrays[m.group(3)] = (m.group(1), m.group(2) or "read", re.sub(r"\s+", "", m.group(5)),
                                  m.group(4) is not None)
    return arrays


class _Scope:
    """The scalar type of an expression at a place in the text, from its literals, the
    declarations in scope, struct fields, conversions and functions' result types."""

    def __init__(self, text: str, returns: dict[str, str]):
        self.text = text
        self.blocks = []                # (open, close) of every {...}
        stack = []
        for i, ch in enumerate(text):
            if ch == "{":
                stack.append(i)
            elif ch == "}":
                self.blocks.append((stack.pop(), i))
        self.returns = dict(returns)
        for m in re.finditer(r"\bfn\s+(\w+)\s*\(", text):
            close = _closing(text, m.end() - 1)
            result = re.match(r"\s*->\s*(\w+)\s*\{", text[close + 1:])
            if result:
                self.returns[m.group(1)] = result.group(1)
        self.structs: dict[str, dict[str, str]] = {}
        for m in re.finditer(r"\bstruct\s+(\w+)\s*\{([^{}]*)\}", text):
            fields = {}
            for field in _split_args(m.group(2)):
                parts = re.fullmatch(r"\s*(?:@\w+\s*(?:\([^()]*\))?\s*)*(\w+)\s*:\s*(.+?)\s*", field)
                if parts:
                    fields[parts.group(1)] = parts.group(2)
            self.structs[m.group(1)] = fields

    def scalar_type(self, expr: str, at: int) -> str:
        """f32, u32 or i32 (an abstract float is f32, an abstract int i32, as WGSL concretizes)."""
        found = self._evidence(expr, at, 0)
        concrete = found & set(_SCALARS)
        if len(concrete) > 1 or found - set(_SCALARS) - {"float", "int"}:
            raise ValueError(f"emulate: {expr.strip()!r} is not one scalar type ({', '.join(sorted(found))})")
        if concrete:
            return concrete.pop()
        if "float" in found:
            return "f32"
        if "int" in found:
            return "i32"
        raise ValueError(f"emulate: no type found for {expr.strip()!r}")

    def _evidence(self, expr: str, at: int, depth: int) -> set[str]:
        if depth > 20:
            raise ValueError(f"emulate: declarations nest too deep at {expr.strip()!r}")
        tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in _TOKEN.finditer(expr) if m.lastgroup]
        found: set[str] = set()
        k = 0
        while k < len(tokens):
            kind, tok = tokens[k]
            nxt = tokens[k + 1][1] if k + 1 < len(tokens) else ""
            if kind == "num":
                found.add(_literal_type(tok))
                k += 1
            elif kind == "id" and tok == "bitcast" and nxt == "<" and k + 4 < len(tokens) \
                    and tokens[k + 3][1] == ">" and tokens[k + 4][1] == "(":
                found.add(tokens[k + 2][1])
                k = _skip(tokens, k + 4)
            elif kind == "id" and nxt == "(":
                end = _skip(tokens, k + 1)
                if tok in _SCALARS:
                    found.add(tok)
                elif tok in _SAME_TYPE:
                    inner = " ".join(t for _, t in tokens[k + 2:end - 1])
                    args = _split_args(inner)
                    for arg in args[:2] if tok == "select" else args:
                        found |= self._evidence(arg, at, depth + 1)
                elif tok in self.returns:
                    found.add(self.returns[tok])
                else:
                    raise ValueError(f"emulate: the type of {tok}(...) is not known")
                k = end
            elif kind == "id" and nxt == "[":
                declared = self._declared(tok, at, depth)
                element = re.fullmatch(r"array\s*<\s*(\w+)\s*(?:,.*)?>", declared or "")
                if not element:
                    raise ValueError(f"emulate: {tok}[...] is not an element of an array of scalars")
                found.add(element.group(1))
                k = _skip(tokens, k + 1)
            elif kind == "id" and nxt == ".":
                declared = self._declared(tok, at, depth)
                field = tokens[k + 2][1] if k + 2 < len(tokens) else ""
                if declared not in self.structs or field not in self.structs[declared]:
                    raise ValueError(f"emulate: the type of {tok}.{field} is not known")
                found.add(self.structs[declared][field])
                k += 3
            elif kind == "id":
                if tok in ("true", "false"):
                    raise ValueError(f"emulate: {tok} in {expr.strip()!r} is not a number")
                declared = self._declared(tok, at, depth)
                if declared is None:
                    raise ValueError(f"emulate: no declaration of {tok} found")
                found |= {declared} if declared in _SCALARS else self._value_type(declared)
                k += 1
            elif tok in _ARITHMETIC:
                k += 1
            else:
                raise ValueError(f"emulate: {tok!r} in {expr.strip()!r}: only arithmetic on scalars is typed here")
        return found

    @staticmethod
    def _value_type(declared: str) -> set[str]:
        if declared.startswith("="):      # no annotation: the initializer's evidence, stashed by _declared
            return set(declared[1:].split(","))
        raise ValueError(f"emulate: {declared} is not a scalar type")

    def _declared(self, name: str, at: int, depth: int) -> str | None:
        """The annotated type of the declaration of `name` seen at `at`, or "=" + the
        evidence of its initializer (abstract for a const, concrete for let and var)."""
        best, best_at = None, -1
        for m in re.finditer(rf"\b(let|var|const|override)\b\s*(?:<[^<>]*>\s*)?{name}\b\s*(?::\s*([^=;]+?))?\s*"
                             rf"(?:=\s*([^;]*))?;", self.text):
            if self._visible(m.start(), at) and m.start() > best_at:
                best, best_at = m, m.start()
        for m in re.finditer(r"\bfn\s+\w+\s*\(", self.text):
            close = _closing(self.text, m.end() - 1)
            body = self.text.index("{", close)
            for param in _split_args(self.text[m.end():close]):
                parts = re.fullmatch(r"\s*(?:@\w+\s*(?:\([^()]*\))?\s*)*(\w+)\s*:\s*(.+?)\s*", param)
                if parts and parts.group(1) == name and self._visible(body + 1, at) and body + 1 > best_at:
                    return parts.group(2)
        if best is None:
            return None
        if best.group(2):
            return re.sub(r"\s+", "", best.group(2)) if "<" in best.group(2) else best.group(2).strip()
        if not best.group(3):
            raise ValueError(f"emulate: {name} is declared with neither a type nor a value")
        found = self._evidence(best.group(3), best.start(), depth + 1)
        if best.group(1) != "const":
            concrete = found & set(_SCALARS)
            found = concrete or ({"f32"} if "float" in found else {"i32"} if "int" in found else found)
        return "=" + ",".join(sorted(found))

    def _visible(self, decl: int, at: int) -> bool:
        """Whether a declaration at `decl` is in scope at `at` (module scope: everywhere)."""
        inner = max((b for b in self.blocks if b[0] < decl < b[1]), default=None)
        return inner is None or (decl < at and inner[0] < at < inner[1])


def _literal_type(tok: str) -> str:
    low = tok.lower()
    if low.startswith("0x"):
        return {"i": "i32", "u": "u32"}.get(low[-1], "int")
    if tok[-1] in "fhiu":
        return {"f": "f32", "h": "f16", "i": "i32", "u": "u32"}[tok[-1]]
    return "float" if any(ch in tok for ch in ".eE") else "int"


def _skip(tokens: list[tuple[str, str]], open_at: int) -> int:
    """The token index past the bracket that closes tokens[open_at]."""
    opener = tokens[open_at][1]
    closer = {"(": ")", "[": "]"}[opener]
    depth = 0
    for i in range(open_at, len(tokens)):
        if tokens[i][1] == opener:
            depth += 1
        elif tokens[i][1] == closer:
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("emulate: unbalanced brackets in an expression")
