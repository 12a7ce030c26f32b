"""Sweep the subgroup-matrix matmul family (anygpu/ops/sgmat.py) straight on Dawn (wgpudawn):
check each candidate against float64 on odd sizes in every layout (transposes, f16/f32
results, bias, alpha, edges, batches), then time the ones that pass on 4096^3 and the
nanoGPT shapes, next to torch fp16 on the same card.

    python benchmarks/sgmat_sweep.py [--null] [--json OUT.json] [--only NAME,...] [--quick]

--null: Dawn's Null backend, compile-only (no GPU needed: checks that Tint takes the WGSL).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time

import numpy as np


def _kernel_modules():
    """anygpu.ops.sgmat and matmul_problem without importing anygpu (nor wgpu): the
    packages stand as empty modules, so this runs beside any state of the rest."""
    import types
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "anygpu")
    for name, path in (("anygpu", src), ("anygpu.ops", os.path.join(src, "ops"))):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [path]
            sys.modules[name] = mod
    import importlib
    return importlib.import_module("anygpu.ops.sgmat"), importlib.import_module("anygpu.ops.matmul_problem")


_sgmat, _problem = _kernel_modules()
SgConfig, candidates, generate, layout = _sgmat.SgConfig, _sgmat.candidates, _sgmat.generate, _sgmat.layout
Problem = _problem.Problem


def open_device(null: bool):
    import wgpudawn as wgpu
    from wgpudawn.backends.dawn import extras as ex
    from wgpudawn.backends.dawn._api import ffi, lib
    known = ex.all_toggles()
    toggles = [t for t in ("allow_unsafe_apis", "vulkan_enable_f16_on_nvidia", "use_vulkan_memory_model") if t in known]
    if null:
        os.environ["WGPU_BACKEND_TYPE"] = "Null"
        ex.set_instance_extras(enable_toggles=toggles)
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    else:
        ex.set_instance_extras(backends=["Vulkan"], enable_toggles=toggles)
        adapters = wgpu.gpu.enumerate_adapters_sync()
        adapter = next((a for a in adapters if a.info["adapter_type"] == "DiscreteGPU"), adapters[0])
    info = ffi.new("WGPUAdapterInfo *")
    sg = 32
    if lib.wgpuAdapterGetInfo(adapter._internal, info) == lib.WGPUStatus_Success:
        sg = int(info.subgroupMaxSize) if info.subgroupMinSize == info.subgroupMaxSize else 32
        lib.wgpuAdapterInfoFreeMembers(info[0])
    props = ex.get_adapter_properties(adapter)
    configs = [{"M": c["m"], "N": c["n"], "K": c["k"]} for c in (props.get("subgroup_matrix_configs") or [])
               if c["component_type"] == "f16" and c["result_component_type"] == "f32"]
    if null and not configs:
        configs = [{"M": 16, "N": 16, "K": 16}, {"M": 16, "N": 8, "K": 16}]
    lim = adapter.limits
    want = [f for f in ("chromium-experimental-subgroup-matrix", "shader-f16", "subgroups", "timestamp-query")
            if f in adapter.features]
    req = {k: lim[k] for k in ("max-compute-workgroup-storage-size", "max-storage-buffer-binding-size",
                               "max-buffer-size", "max-compute-invocations-per-workgroup") if k in lim}
    # Robustness (Tint's bounds clamps) off unless SGMAT_ROBUST=1: anygpu's runtime keeps it on.
    off = ("skip_validation",) if os.environ.get("SGMAT_ROBUST") == "1" else ("skip_validation", "disable_robustness")
    dev_toggles = [t for t in off if t in known]
    device = ex.request_device_sync(adapter, required_features=want, required_limits=req, enable_toggles=dev_toggles)
    return wgpu, device, adapter, sg, configs, lim


class Runner:
    def __init__(self, null: bool):
        self.null = null
        self.wgpu, self.device, self.adapter, self.sg, self.configs, self.limits = open_device(null)
        self.pipes = {}

    def compile(self, code: str):
        d = self.device
        d.push_error_scope("validation")
        mod = d.create_shader_module(code=code)
        err = d.pop_error_scope_async().sync_wait()
        if err is not None:
            return None, f"shader: {getattr(err, 'message', err)}"
        if self.null:
            return "null", None
        d.push_error_scope("validation")
        pipe = d.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "main"})
        err = d.pop_error_scope_async().sync_wait()
        if err is not None:
            return None, f"pipeline: {getattr(err, 'message', err)}"
        return pipe, None

    def buf(self, data: np.ndarray):
        w = self.wgpu
        usage = w.BufferUsage.STORAGE | w.BufferUsage.COPY_SRC | w.BufferUsage.COPY_DST
        raw = np.ascontiguousarray(data).tobytes()
        raw += b"\0" * (-len(raw) % 16 + 16)
        return self.device.create_buffer_with_data(data=raw, usage=usage)

    def run(self, config: SgConfig, p: Problem, a, b, bias, out: str, reps: int = 0, code: str | None = None):
        """Check or time `config` on problem p (code: other WGSL for the same bindings and grid,
        e.g. benchmarks/sgmat_probe.py's ablations); (C, error, ms per dispatch)."""
        lay = layout(config, p, out, bias is not None)
        code = code or generate(config, lay)
        pipe, err = self.compile(code)
        if err:
            return None, err, None
        if self.null:
            return None, None, None
        w = self.wgpu
        d = self.device
        params = p.params()
        ub = d.create_buffer_with_data(data=struct.pack("<12I", *params) + b"\0" * 16,
                                       usage=w.BufferUsage.UNIFORM | w.BufferUsage.COPY_DST)
        bA, bB = self.buf(a), self.buf(b)
        isz = 4 if out == "f32" else 2
        bC = d.create_buffer(size=p.batch * p.m * p.n * isz + 16,
                             usage=w.BufferUsage.STORAGE | w.BufferUsage.COPY_SRC)
        entries = [{"binding": 0, "resource": {"buffer": ub}}, {"binding": 1, "resource": {"buffer": bA}},
                   {"binding": 2, "resource": {"buffer": bB}}]
        cb = 3
        if bias is not None:
            entries.append({"binding": 3, "resource": {"buffer": self.buf(bias)}})
            cb = 4
        entries.append({"binding": cb, "resource": {"buffer": bC}})
        bg = d.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
        grid = (-(-p.n // config.bn), -(-p.m // config.bm), p.batch)

        def submit(n):
            enc = d.create_command_encoder()
            cp = enc.begin_compute_pass()
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, bg)
            for _ in range(n):
                cp.dispatch_workgroups(*grid)
            cp.end()
            d.queue.submit([enc.finish()])

        d.push_error_scope("validation")
        submit(1)
        raw = d.queue.read_buffer(bC)
        e = d.pop_error_scope_async().sync_wait()
        if e is not None:
            return None, f"dispatch: {getattr(e, 'message', e)}", None
        C = np.frombuffer(raw, dtype=np.float32 if out == "f32" else np.float16)[:p.batch * p.m * p.n]
        ms = None
        if reps:
            # A read-back costs ~1.5 ms on Dawn here: time n and 2n dispatches, take the difference.
            def wall(n):
                best = 1e9
                for _ in range(3):
                    t0 = time.perf_counter()
                    submit(n)
                    d.queue.read_buffer(bC, 0, 16)
                    best = min(best, time.perf_counter() - t0)
                return best
            wall(2)
            ms = max(wall(2 * reps) - wall(reps), 1e-9) / reps * 1e3
        return C.reshape(p.batch, p.m, p.n), None, ms


def reference(p: Problem, a, b, bias):
    A = a.astype(np.float64)
    B = b.astype(np.float64)
    if not p.a_batch:
        A = A.reshape(1, *A.shape[-2:])
    if not p.b_batch:
        B = B.reshape(1, *B.shape[-2:])
    A = A.reshape(-1, *((p.k, p.m) if p.trans_a else (p.m, p.k)))
    B = B.reshape(-1, *((p.n, p.k) if p.trans_b else (p.k, p.n)))
    if p.trans_a:
        A = A.transpose(0, 2, 1)
    if p.trans_b:
        B = B.transpose(0, 2, 1)
    C = p.alpha * (A @ B)
    if bias is not None:
        C = C + bias.astype(np.float64)
    return np.broadcast_to(C, (p.batch, p.m, p.n))


def inputs(p: Problem, rng, bias: bool):
    a = rng.uniform(-1, 1, ((p.batch if p.a_batch else 1), *((p.k, p.m) if p.trans_a else (p.m, p.k))))
    b = rng.uniform(-1, 1, ((p.batch if p.b_batch else 1), *((p.n, p.k) if p.trans_b else (p.k, p.n))))
    bb = rng.uniform(-1, 1, p.n).astype(np.float16) if bias else None
    return a.astype(np.float16), b.astype(np.float16), bb


CHECKS = [  # (problem, out, bias)
    (Problem(1, 256, 256, 256), "f32", False),
    (Problem(1, 256, 256, 256), "f16", True),
    (Problem(2, 200, 136, 72, True, False), "f16", False),
    (Problem(3, 77, 65, 384, False, True, True, False, 0.5), "f32", False),
    (Problem(1, 65, 384, 77, True, True), "f16", True),
    (Problem(2, 129, 131, 45), "f32", False),
    (Problem(2, 512, 512, 256, True, False, True, False), "f32", False),
    (Problem(1, 512, 512, 256, False, True, True, True, 0.25), "f16", True),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--null", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--only")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    R = Runner(args.null)
    print(f"adapter {R.adapter.info['device']}, subgroup {R.sg}, configs {R.configs}", flush=True)
    lim = (1024, 49152) if args.null else (R.limits.get("max-compute-invocations-per-workgroup", 256),
                                           R.limits.get("max-compute-workgroup-storage-size", 16384))
    cands = candidates(R.configs, R.sg, *lim)
    if args.only:
        names = args.only.split(",")
        cands = [SgConfig.parse(n) for n in names]
    rng = np.random.default_rng(0)
    results = {"adapter": R.adapter.info["device"], "sg": R.sg, "configs": R.configs, "kernels": {}}
    good = []
    for c in cands:
        entry = results["kernels"].setdefault(c.name, {})
        ok = True
        for p, out, bias in CHECKS:
            a, b, bb = inputs(p, rng, bias)
            C, err, _ = R.run(c, p, a, b, bb, out)
            if err:
                entry.setdefault("errors", []).append(err[:600])
                ok = False
                print(f"{c.name} {p} {out}: {err[:300]}", flush=True)
                break
            if C is None:
                continue
            ref = reference(p, a, b, bb)
            rel = float(np.abs(C.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))
            tol = 2e-3 if out == "f16" else 1e-5
            entry.setdefault("checks", []).append(rel)
            if not rel <= tol:
                ok = False
                print(f"{c.name} {p} {out} bias={bias}: WRONG rel {rel:.3g}", flush=True)
                break
        entry["ok"] = ok
        if ok:
            good.append(c)
            print(f"{c.name}: checks pass", flush=True)
    if args.null:
        print(json.dumps({"compiled": [c.name for c in good]}))
        return
    shapes = [("4096^3 f32out", Problem(1, 4096, 4096, 4096), "f32"),
              ("4096^3 f16out", Problem(1, 4096, 4096, 4096), "f16")]
    if not args.quick:
        shapes += [("gpt qkv 16384x1152x384 bias", Problem(1, 16384, 1152, 384, False, True), "f16"),
                   ("gpt fc 16384x1536x384", Problem(1, 16384, 1536, 384, False, True), "f16"),
                   ("gpt proj 16384x384x1536", Problem(1, 16384, 384, 1536, False, True), "f16"),
                   ("gpt dW 1536x384x16384", Problem(1, 1536, 384, 16384, True, False), "f16"),
                   ("gpt dX 16384x384x1536", Problem(1, 16384, 384, 1536), "f16"),
                   # the fc weight gradient in 8 k slices (ops/sgmat.split_k), f32 partial sums
                   ("gpt dW split8 8x1536x384x2048", Problem(8, 1536, 384, 2048, True, False), "f32"),
                   # the step's other products as it runs them: biased forwards, the split weight gradients
                   ("gpt fc 16384x1536x384 bias", Problem(1, 16384, 1536, 384, False, True), "f16"),
                   ("gpt attn proj 16384x384x384 bias", Problem(1, 16384, 384, 384, False, True), "f16"),
                   ("gpt proj dW split8 8x384x1536x2048", Problem(8, 384, 1536, 2048, True, False), "f32"),
                   ("gpt qkv dW split16 16x1152x384x1024", Problem(16, 1152, 384, 1024, True, False), "f32"),
                   ("gpt attn proj dW split32 32x384x384x512", Problem(32, 384, 384, 512, True, False), "f32"),
                   # attention's products at nanoGPT's shape (64 x 6 heads, 256 x 64), composed f16 route
                   ("attn S=QK^T 384x256x256x64", Problem(384, 256, 256, 64, False, True, alpha=0.125), "f32"),
                   ("attn O=PV 384x256x64x256", Problem(384, 256, 64, 256), "f16"),
                   ("attn dV=P^T dO 384x256x64x256", Problem(384, 256, 64, 256, True, False), "f16")]
    timings = results["timings"] = {}
    for label, p, out in shapes:
        a, b, bb = inputs(p, rng, "bias" in label)
        row = timings[label] = {}
        for c in good:
            _, err, ms = R.run(c, p, a, b, bb, out, reps=int(os.environ.get('SGMAT_REPS', 20)))
            if err:
                row[c.name] = err[:200]
                continue
            row[c.name] = round(p.flops / ms / 1e9, 1)
        best = max((v, k) for k, v in row.items() if isinstance(v, float)) if row else None
        print(f"{label}: best {best} TFLOP/s", flush=True)
        row["_best"] = best
    try:
        import torch
        torch_rows = results["torch"] = {}
        for label, p, out in shapes:
            if p.batch > 1:
                continue        # the split rows: torch's is the whole product's row
            A = torch.randn(p.m, p.k, device="cuda", dtype=torch.float16)
            B = torch.randn(p.k, p.n, device="cuda", dtype=torch.float16)
            for _ in range(3):
                A @ B
            torch.cuda.synchronize()
            best = 1e9
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(20):
                    A @ B
                torch.cuda.synchronize()
                best = min(best, (time.perf_counter() - t0) / 20)
            torch_rows[label] = round(p.flops / best / 1e12, 1)
            print(f"torch fp16 {label}: {torch_rows[label]} TFLOP/s", flush=True)
    except Exception as e:  # no torch / no CUDA here
        results["torch"] = repr(e)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
