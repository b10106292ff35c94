"""Every kind of kernel the CUDA backend generates compiles with NVRTC for sm_90 and sm_80.

NVRTC comes from PyPI (the optional extra ``cuda``: cuda-bindings and nvidia-cuda-nvrtc); these
tests skip only where it is not installed. No GPU is needed.
"""
from __future__ import annotations

import re

import pytest

import cinnlite as cl
import numpy as np

from cinnlite import NetBuilder
from cinnlite.errors import CompileError
from cinnlite.runtime import nvrtc

pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC (the optional extra `cuda13` or `cuda12`) is not installed")

ARCHS = ("sm_90", "sm_80")
DATA_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
               "float32", "float64", "complex64", "complex128"]
MODES = ["raise", "clip", "wrap", "fill"]
REDUCTIONS = ["none", "add", "mul", "max", "min", "mean"]


def every_operator_and_mode():
    """Every operator in every mode (and every reduction), int32 and int64 indices, float32 data."""
    b = NetBuilder("modes")
    x = b.create_input("float32", (5, 4, 3), "x")
    i64 = b.create_input("int64", (2, 4, 3), "i64")
    i32 = b.create_input("int32", (3,), "i32")
    tup = b.create_input("int64", (2, 2), "tup")
    tup_first = b.create_input("int32", (2, 2), "tup_first")
    src = b.create_input("float32", (2, 4, 3), "src")
    nd_src = b.create_input("float32", (2, 3), "nd_src")
    outs = []
    for mode in MODES:
        outs.append(b.take(x, i32, axis=1, mode=mode, fill_value=2.5))
        outs.append(b.take(b.reshape(x, (5, 12)), b.reshape(i32, (3, 1)), axis=1, batch_dims=0, mode=mode))
        outs.append(b.gather(x, i64, axis=0, mode=mode))
        outs.append(b.gather_nd(x, tup, mode=mode))
        outs.append(b.gather_nd(x, tup_first, index_layout="first", mode=mode))
        outs.append(b.gather_nd(x, b.reshape(i64, (2, 4, 3, 1)), dims=[0], mode=mode))
        for reduce in REDUCTIONS:
            outs.append(b.scatter(x, i64, src, axis=0, reduce=reduce, mode=mode))
            outs.append(b.scatter_nd(x, tup, nd_src, reduce=reduce, mode=mode))
    outs.append(b.take(x, b.constant(np.array(1, np.int64)), axis=2))
    return b.build(outs)


INDEX_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def every_index_dtype(index_dtype: str):
    """Every way an index value is resolved (each mode, plain and tuple indices, a symbolic
    axis size) for one index dtype: the comparisons and the modulo of the index policy."""
    b = NetBuilder(f"index_{index_dtype}")
    x = b.create_input("float32", (5, 4, 3), "x")
    xs = b.create_input("float32", ("N", 4), "xs")
    i = b.create_input(index_dtype, (2, 4, 3), "i")
    tup = b.create_input(index_dtype, (2, 2), "tup")
    src = b.create_input("float32", (2, 4, 3), "src")
    outs = []
    for mode in MODES:
        outs.append(b.take(x, tup, axis=1, mode=mode))
        outs.append(b.gather(x, i, axis=0, mode=mode))
        outs.append(b.gather_nd(x, tup, mode=mode, index_layout="first"))
        outs.append(b.scatter(x, i, src, axis=0, reduce="add", mode=mode))
        outs.append(b.take(xs, tup, axis=0, mode=mode))
    return b.build(outs)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_every_index_dtype_compiles_for_sm90_and_sm80(index_dtype):
    assert_compiles(cl.compile(every_index_dtype(index_dtype), target="cuda"))


def every_dtype(dtype: str):
    """The parts of the kernels that depend on the data dtype: loads and stores, fill values,
    every reduction the dtype allows, ordered and (65536 updates into 4 elements) atomic,
    elementwise arithmetic and casts."""
    complex_ = dtype.startswith("complex")
    b = NetBuilder(f"dtype_{dtype}")
    x = b.create_input(dtype, (5, 4, 3), "x")
    i64 = b.create_input("int64", (2, 4, 3), "i64")
    tup = b.create_input("int32", (2, 2), "tup")
    src = b.create_input(dtype, (2, 4, 3), "src")
    nd_src = b.create_input(dtype, (2, 3), "nd_src")
    few = b.create_input(dtype, (4,), "few")
    many = b.create_input("int64", (1 << 16,), "many")
    many_src = b.create_input(dtype, (1 << 16,), "many_src")
    fill = True if dtype == "bool" else (1 - 2j if complex_ else 1)
    outs = [b.gather(x, i64, axis=0, mode="fill", fill_value=fill), b.take(x, tup, axis=2, mode="wrap")]
    reductions = ["none"] if dtype == "bool" else [r for r in REDUCTIONS if not (complex_ and r in ("max", "min"))]
    for reduce in reductions:
        outs.append(b.scatter(x, i64, src, axis=0, reduce=reduce, mode="fill"))
        outs.append(b.scatter_nd(x, tup, nd_src, reduce=reduce, mode="clip"))
        outs.append(b.scatter(few, many, many_src, reduce=reduce, mode="wrap"))
    ops = ("maximum", "minimum") if dtype == "bool" else ("add", "subtract", "multiply", "divide") + \
        (() if complex_ else ("maximum", "minimum"))
    outs += [getattr(b, op)(src, src) for op in ops]
    outs += [b.cast(src, to) for to in DATA_DTYPES if to != dtype and (to.startswith("complex") or not complex_)]
    outs.append(b.fill_constant((3,), fill, dtype))
    return b.build(outs)


def _kernels(source):
    return re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\)\n(\w+)\(', source)


def assert_compiles(exe):
    source = exe.source("cuda")
    names = _kernels(source)
    assert names == [l.name for l in exe.module.launches] and names
    for arch in ARCHS:
        out = nvrtc.compile_cuda(source, arch, fast=True)
        assert out.cubin, f"no CUBIN for {arch}"
        assert f".target {arch}" in out.ptx
        for name in names:
            assert f".entry {name}(" in out.ptx, f"{name} missing from the PTX for {arch}"


def test_every_operator_mode_and_reduction_compiles_for_sm90_and_sm80():
    assert_compiles(cl.compile(every_operator_and_mode(), target="cuda"))


@pytest.mark.parametrize("dtype", DATA_DTYPES)
def test_every_dtype_compiles_for_sm90_and_sm80(dtype):
    exe = cl.compile(every_dtype(dtype), target="cuda")
    source = exe.source("cuda")
    if dtype != "bool":  # the scatters into 4 elements take the atomic path
        suffix = cl.codegen.cuda._SUFFIX[dtype]
        for reduce in ("add", "mul", "max", "min"):
            ordered = dtype.startswith("complex") and reduce != "add"  # no complex atomic mul; no max/min
            # bfloat16 adds and multiplies into a float32 buffer.
            acc = "f32" if dtype == "bfloat16" and reduce in ("add", "mul") else suffix
            assert (f"cl_atomic_{reduce}_{acc}(" in source) != ordered, reduce
    assert_compiles(exe)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64", "complex128"])
def test_deterministic_reductions_compile_for_sm90_and_sm80(dtype):
    b = NetBuilder(f"det_{dtype}")
    x = b.create_input(dtype, (5, 4), "x")
    i = b.create_input("int64", (6, 4), "i")
    u = b.create_input(dtype, (6, 4), "u")
    t = b.create_input("int32", (7, 1), "t")
    v = b.create_input(dtype, (7, 4), "v")
    w = b.create_input(dtype, (7,), "w")
    outs = []
    for reduce in [r for r in REDUCTIONS if not (dtype.startswith("complex") and r in ("max", "min"))]:
        outs.append(b.scatter(x, i, u, axis=0, reduce=reduce, mode="wrap"))
        outs.append(b.scatter_nd(x, t, v, reduce=reduce, mode="raise"))
        outs.append(b.scatter_nd(b.reshape(x, (20,)), t, w, reduce=reduce, mode="fill"))  # one thread
    exe = cl.compile(b.build(outs), target="cuda", deterministic=True)
    assert "cl_atomic_add_f" not in exe.source("cuda") and "cl_atomic_add_c" not in exe.source("cuda")
    assert "cl_atomic_add_bf16" not in exe.source("cuda")
    assert_compiles(exe)


def test_the_demo_compiles_and_ptx_is_a_stage():
    from cinnlite.demo import build_demo_program

    exe = cl.compile(build_demo_program(), target="cuda")
    ptx = exe.source("ptx")
    assert ".target sm_" in ptx and ".address_size 64" in ptx
    for launch in exe.module.launches:
        assert f".entry {launch.name}(" in ptx
    assert ".target sm_80" in exe.ptx("sm_80")


def test_ptx_is_a_stage_of_the_emulated_target_too():
    from cinnlite.demo import build_demo_program

    exe = cl.compile(build_demo_program(), target="cuda-emu")
    assert ".entry k_gather_0_0(" in exe.source("ptx")


def test_reading_nvrtc_results_leaves_python_objects_alone():
    # NVRTC writes its log (one NUL byte when empty), PTX and CUBIN into buffers we hand it; a
    # one-byte bytes object there would be CPython's shared singleton.
    out = nvrtc.compile_cuda('extern "C" __global__ void k(int* p) { p[0] = 7; }', "sm_80")
    assert out.log == "" and out.cubin
    assert b" " == bytes([32]) and bytes(1) == bytes([0]) and " ".join(["a", "b"]).encode() == b"a b"


def test_nvrtc_errors_are_compile_errors_with_the_log():
    with pytest.raises(CompileError, match=r"(?s)NVRTC rejected.*undefined_name"):
        nvrtc.compile_cuda('extern "C" __global__ void k(int* p) { p[0] = undefined_name; }', "sm_90")
    with pytest.raises(CompileError, match="not a CUDA architecture"):
        nvrtc.compile_cuda("", "90")


def test_the_environment_can_ask_every_compile_to_go_through_nvrtc(monkeypatch):
    b = NetBuilder("checked")
    x = b.create_input("float16", (4, 3), "x")
    i = b.create_input("int32", (5, 3), "i")
    b.scatter(x, i, b.cast(b.gather(x, i, axis=0, mode="wrap"), "float16"), axis=0, reduce="max", mode="wrap")
    prog = b.build()
    calls = []
    real = nvrtc.compile_cuda
    monkeypatch.setattr(nvrtc, "compile_cuda", lambda source, arch="sm_90", **kw: calls.append(arch) or real(source, arch, **kw))
    monkeypatch.setenv("CINNLITE_NVRTC_CHECK", "sm_90, sm_80")
    cl.compile(prog, target="cuda")
    assert calls == ["sm_90", "sm_80"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_the_elementwise_functions_and_reductions_compile_for_sm90_and_sm80(dtype):
    """The float functions (CUDA's expf/exp ...), comparisons, where, iota and the reductions."""
    b = NetBuilder(f"functions_{dtype}")
    x = b.create_input(dtype, (5, 4), "x")
    outs = [getattr(b, fn)(x) for fn in ("exp", "log", "sqrt", "tanh", "sigmoid")]
    outs += [b.where(b.less(x, b.fill_constant((), 0, dtype)), x, b.fill_constant((), 1, dtype)),
             b.reduce_sum(x, axes=0), b.reduce_max(x, axes=1, keepdims=True), b.reduce_min(x),
             b.iota((5, 4), dtype, axis=1)]
    assert_compiles(cl.compile(b.build(outs), target="cuda"))
