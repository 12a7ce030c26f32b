"""Reading WGSL sources from anygpu/kernels: includes, element types, {{NAME}} placeholders.

- A line `//! include <file>.wgsl` is replaced by that file's text (once per kernel; the
  shared pieces live in kernels/lib/: workgroup tree reductions, erf, ...). The marker is a
  comment, so every kernel file stays valid WGSL for a linter up to the included helpers.
- `dtype=` (and `out_dtype=`) fill the element-type placeholders every templated kernel uses:
  {{ENABLE}} (`enable f16;` where f16 is stored, first line of the kernel), {{T}} the stored
  type of the inputs, {{C}} the type they are computed in (f32 for f16), {{OUT_T}} and
  {{OUT_C}} the same for outputs.
- Every other {{KEY}} takes str(subs[KEY]).

`create_module` makes the wgpu shader module of a kernel. A kernel whose text holds the
line `//! trusted` declares that it checks every index itself (and that its loops end):
its module is made by wgpu-native's `wgpuDeviceCreateShaderModuleTrusted` without the
runtime checks naga would otherwise add (bounds clamps, loop counters). ANYGPU_TRUSTED_SHADERS=0
turns that off (every module checked), as does a wgpu build without the function, and
Dawn, which has no per-module switch (its device toggle disable_robustness is all or nothing).

The two compilers differ on one directive: Tint (Dawn) needs `enable subgroups;` before a
kernel uses subgroup builtins, naga (wgpu-native 29) rejects it. Kernels do not write it;
`create_module` adds it on Dawn.
"""

from __future__ import annotations

import functools
import os
import re
from importlib import resources

from .dtypes import dtype_of

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_INCLUDE = re.compile(r"^//! include ([\w/.]+\.wgsl)[ \t]*$", re.M)
_TRUSTED = re.compile(r"^//! trusted[ \t]*$", re.M)


@functools.lru_cache(maxsize=None)
def _read(name: str) -> str:
    return resources.files("anygpu.kernels").joinpath(name).read_text()


@functools.lru_cache(maxsize=None)
def _expanded(name: str) -> str:
    """kernels/<name> with its include lines replaced (each file at most once)."""
    seen: set[str] = set()

    def expand(match):
        lib = match.group(1)
        if lib in seen:
            return ""
        seen.add(lib)
        return _INCLUDE.sub(expand, _read(lib)).rstrip("\n")

    seen.add(name)
    return _INCLUDE.sub(expand, _read(name))


def dtype_subs(dtype: str = "f32", out_dtype: str | None = None) -> dict[str, str]:
    """The element-type placeholders of a kernel reading `dtype` and writing `out_dtype`."""
    src = dtype_of(dtype, "kernel")
    out = dtype_of(out_dtype, "kernel") if out_dtype is not None else src
    return {"ENABLE": src.enable or out.enable, "T": src.storage, "C": src.compute,
            "OUT_T": out.storage, "OUT_C": out.compute}


def load_shader(name: str, dtype: str | None = None, out_dtype: str | None = None, **subs) -> str:
    """The text of kernels/<name>: includes expanded, element types of `dtype` / `out_dtype`
    filled in (f32 where the kernel has such placeholders and no dtype is given), and every
    other {{KEY}} replaced by str(subs[KEY])."""
    text = _expanded(name)
    subs = {**dtype_subs(dtype or "f32", out_dtype), **subs}

    def fill(match):
        key = match.group(1)
        if key not in subs:
            raise KeyError(f"shader {name}: no value for placeholder {{{{{key}}}}}")
        return str(subs[key])

    return _PLACEHOLDER.sub(fill, text)


def trusted(code: str) -> bool:
    """Whether `code` is created without runtime checks (see the module docstring)."""
    return (_TRUSTED.search(code) is not None
            and os.environ.get("ANYGPU_TRUSTED_SHADERS", "1").strip().lower() not in ("0", "false", "off", "no"))


_SUBGROUP_USE = re.compile(r"\bsubgroup(?!Matrix)[A-Z]\w*\s*\(|@builtin\(\s*(?:subgroup_\w+|num_subgroups)\s*\)")
_SUBGROUPS_ENABLED = re.compile(r"^\s*enable\b[^;]*\bsubgroups\b", re.M)


def for_dawn(code: str) -> str:
    """`code` as Tint needs it: `enable subgroups;` first where subgroup builtins are used."""
    if _SUBGROUP_USE.search(code) and not _SUBGROUPS_ENABLED.search(code):
        return "enable subgroups;\n" + code
    return code


def create_module(gpu_device, label: str, code: str):
    """The wgpu shader module of WGSL `code` on a wgpu-py (or wgpudawn) device: trusted (no
    runtime checks) when `trusted(code)` and wgpu-native offers it, else the ordinary module
    (on Dawn, with the directives Tint needs: `for_dawn`). Errors are wgpu's
    (GPUValidationError), as from create_shader_module."""
    from .webgpu import current

    if current().name == "dawn":
        return gpu_device.create_shader_module(label=label, code=for_dawn(code))
    if not trusted(code):
        return gpu_device.create_shader_module(label=label, code=code)
    try:
        from wgpu.backends.wgpu_native import _api, ffi, lib
        create = _api.libf.wgpuDeviceCreateShaderModuleTrusted
    except (ImportError, AttributeError):  # pragma: no cover - a wgpu-native without it
        return gpu_device.create_shader_module(label=label, code=code)
    source = ffi.new("WGPUShaderSourceWGSL *")
    text = ffi.new("char[]", code.encode())
    source.code.data, source.code.length = text, lib.WGPU_STRLEN
    source.chain.next, source.chain.sType = ffi.NULL, lib.WGPUSType_ShaderSourceWGSL
    name = ffi.new("char[]", label.encode())
    descriptor = ffi.new("WGPUShaderModuleDescriptor *")
    descriptor.nextInChain = ffi.cast("WGPUChainedStruct *", source)
    descriptor.label.data, descriptor.label.length = name, lib.WGPU_STRLEN
    handle = create(gpu_device._internal, descriptor, lib.WGPUShaderRuntimeChecks_None)
    if handle == ffi.NULL:
        raise RuntimeError(f"shader module {label!r}: creation failed")
    return _api.GPUShaderModule(label, handle, gpu_device)
