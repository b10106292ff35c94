"""Every pass on its own, against the numpy reference, through the reference evaluator.

Each program below is lowered, then every step of a pipeline (fusion, then each pass of
``CPU_PIPELINE``, ``GPU_PIPELINE`` or ``GPU_PIPELINE_DETERMINISTIC``) runs one at a time; after
each step ``cinnlite.ir.evaluate`` runs the loop nests as they stand, and the results must be
the reference's (``tests/reference.py``, numpy) and bit for bit those before the step, and a
bad index in ``mode="raise"`` must be reported with the same operator, input, position and
value. A pass that breaks a program is named in the failure. The programs cover every operator,
mode, reduction and dtype family, the fused message-passing chain, size-0 and size-1 axes,
negative and duplicate indices; scatters with 18 updates per column take the GPU's winner and
atomic paths as well as the ordered one. The compiled CPU program must agree with the evaluator,
and for a few programs the emulated CUDA one too; deliberately broken passes must be caught.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

import cinnlite as cl
import reference as R
from cinnlite import NetBuilder
from cinnlite.dtypes import float32, int8, int32, uint8
from cinnlite.errors import IndexOutOfRangeError
from cinnlite.ir.evaluate import EvaluationError, FailedCheck, binary, cast, evaluate, evaluate_kernel
from cinnlite.ir.fusion import inline_computes
from cinnlite.ir.loopnest import Binary, FlagIndexError, Store
from cinnlite.ir.lower import lower_program
from cinnlite.backends.cpu import CPU_PIPELINE, UNMASKED_CPU_PIPELINE
from cinnlite.backends.gpu import GPU_PIPELINE, GPU_PIPELINE_DETERMINISTIC
from cinnlite.ir.passes import run_pipeline
from cinnlite.ir.transform import map_stmt

# -- pipelines, one step at a time ------------------------------------------------------------------


def one_pass(p):
    """A step running pass ``p`` on every kernel, as ``run_pipeline`` does."""
    return p.__name__, lambda program: run_pipeline(program, (p,))


def fuse_for(keep_index_buffers):
    return "inline_computes", lambda program: inline_computes(program, keep_index_buffers=keep_index_buffers)


#: name -> (how the runtime reports failed checks, the steps in order), as ``cinnlite.compile``
#: runs them: the CPU fuses without keeping index buffers, the GPU keeps them.
PIPELINES = {
    "cpu": ("stop", (fuse_for(False),) + tuple(map(one_pass, CPU_PIPELINE))),
    "cpu-unfused": ("stop", tuple(map(one_pass, CPU_PIPELINE))),
    "cpu-unmasked": ("stop", (fuse_for(False),) + tuple(map(one_pass, UNMASKED_CPU_PIPELINE))),
    "gpu": ("record", (fuse_for(True),) + tuple(map(one_pass, GPU_PIPELINE))),
    "gpu-deterministic": ("record", (fuse_for(True),) + tuple(map(one_pass, GPU_PIPELINE_DETERMINISTIC))),
}

# -- test programs ------------------------------------------------------------------------------------


@dataclass
class Case:
    """A program, its numpy reference (inputs -> outputs in program order) and the inputs to run.
    ``errors[k]`` is the error run ``k`` must raise, (operator, input, position, value), or None."""

    program: object
    reference: object
    runs: list
    errors: list = field(default_factory=list)

    def __post_init__(self):
        self.errors = self.errors + [None] * (len(self.runs) - len(self.errors))


CASES = {}


def case(fn):
    """Register a program builder (called lazily, by the tests that use it)."""
    CASES[fn.__name__] = fn
    return fn


def cases(name, values):
    """Register ``name_<value>`` for every value: builders of one argument."""
    def register(fn):
        for v in values:
            CASES[f"{name}_{v}"] = lambda v=v: fn(v)
        return fn
    return register


def ints(values, dtype="int64"):
    return np.array(values, dtype)


def floats(shape, dtype="float32", scale=0.25):
    return (np.arange(math.prod(shape)).reshape(shape) * scale - 1).astype(dtype)


@cases("take", R.MODES)
def take_modes(mode):
    b = NetBuilder("take")
    x, i = b.create_input("float32", (4, 3), "x"), b.create_input("int64", (2, 3), "i")
    fill = 7.5 if mode == "fill" else 0
    b.take(x, i, axis=0, mode=mode, fill_value=fill, name="t")
    X = floats((4, 3))
    runs = [dict(x=X, i=ints([[0, -1, 3], [-4, 2, 2]])), dict(x=X, i=ints([[1, 5, -5], [4, -9, 3]]))]
    errors = [None, ("take 't'", "i", (0, 1), 5) if mode == "raise" else None]
    return Case(b.build(), lambda v: (R.take(v["x"], v["i"], axis=0, mode=mode, fill_value=fill),), runs, errors)


@cases("take_uint64", R.MODES)
def take_uint64_modes(mode):
    """uint64 indices past the int64 range: out of range, never negative."""
    b = NetBuilder("take_uint64")
    x, i = b.create_input("float32", (4, 3), "x"), b.create_input("uint64", (2, 3), "i")
    b.take(x, i, axis=0, mode=mode, fill_value=7.5, name="t")
    X = floats((4, 3))
    runs = [dict(x=X, i=ints([[0, 1, 3], [2, 2, 0]], "uint64")),
            dict(x=X, i=ints([[1, 2**64 - 1, 2**63], [4, 2**63 - 1, 3]], "uint64"))]
    errors = [None, ("take 't'", "i", (0, 1), 2**64 - 1) if mode == "raise" else None]
    return Case(b.build(), lambda v: (R.take(v["x"], v["i"], axis=0, mode=mode, fill_value=7.5),), runs, errors)


@case
def take_batch_dims():
    b = NetBuilder("take_batch")
    x, i = b.create_input("int16", (2, 3, 4), "x"), b.create_input("int32", (2, 2), "i")
    b.take(x, i, axis=1, batch_dims=1, name="t")
    X = np.arange(24, dtype=np.int16).reshape(2, 3, 4) - 12
    runs = [dict(x=X, i=ints([[0, -3], [2, 2]], "int32")), dict(x=X, i=ints([[0, 1], [3, -1]], "int32"))]
    return Case(b.build(), lambda v: (R.take(v["x"], v["i"], axis=1, batch_dims=1),), runs,
                [None, ("take 't'", "i", (1, 0), 3)])


@case
def gather_along_rows():
    """A gather along the last axis of 2 KB rows, read at 200 places each: the CPU prefetches
    each row before gathering from it (``stream_rows``); a bad index in the last row."""
    b = NetBuilder("gather_rows")
    x, i = b.create_input("float32", (3, 512), "x"), b.create_input("int64", (3, 200), "i")
    b.gather(x, i, axis=1, name="g")
    X = floats((3, 512))
    good = (np.arange(600).reshape(3, 200) * 37 % 1024 - 512).astype(np.int64)
    bad = good.copy()
    bad[2, 150] = 512
    return Case(b.build(), lambda v: (R.gather(v["x"], v["i"], axis=1),), [dict(x=X, i=good), dict(x=X, i=bad)],
                [None, ("gather 'g'", "i", (2, 150), 512)])


@case
def gathers_from_a_far_table():
    """A gather along axis 0 and a take of rows from a 16 MB table: the CPU prefetches what
    later passes will read (``prefetch_gathers``), the last passes' prefetches clamped to the
    last index row; a bad index in the last row of each."""
    from cinnlite.ir.schedule_cpu import PREFETCH_MIN_BYTES
    rows = PREFETCH_MIN_BYTES // (64 * 4)
    b = NetBuilder("far_gathers")
    x = b.create_input("float32", (rows, 64), "x")
    i, j = b.create_input("int64", (3, 64), "i"), b.create_input("int64", (5,), "j")
    b.gather(x, i, axis=0, name="g")
    b.take(x, j, axis=0, name="t")
    X = floats((rows, 64))
    good_i = (np.arange(192).reshape(3, 64) * 7919 % (2 * rows) - rows).astype(np.int64)
    good_j = ints([5, -1, rows - 1, 0, -rows])
    bad_i, bad_j = good_i.copy(), good_j.copy()
    bad_i[2, 63], bad_j[4] = rows, -rows - 1
    return Case(b.build(), lambda v: (R.gather(v["x"], v["i"], axis=0), R.take(v["x"], v["j"], axis=0)),
                [dict(x=X, i=good_i, j=good_j), dict(x=X, i=bad_i, j=good_j), dict(x=X, i=good_i, j=bad_j)],
                [None, ("gather 'g'", "i", (2, 63), rows), ("take 't'", "j", (4,), -rows - 1)])


@case
def take_scalar_index():
    """A rank-0 index (the axis disappears, a rank-0 output) from an x with a size-1 axis."""
    b = NetBuilder("take_scalar")
    x, s = b.create_input("int64", (1, 3), "x"), b.create_input("int64", (), "s")
    b.take(x, s, axis=None, mode="wrap")
    b.take(x, s, axis=1, mode="clip")
    X = ints([[-2**63, 5, 2**63 - 1]])
    runs = [dict(x=X, s=ints(v)) for v in (-1, 7, -100)]
    return Case(b.build(), lambda v: (R.take(v["x"], v["s"], axis=None, mode="wrap"),
                                      R.take(v["x"], v["s"], axis=1, mode="clip")), runs)


@case
def take_empty_index():
    b = NetBuilder("take_empty")
    x, i = b.create_input("float32", (3, 2), "x"), b.create_input("int64", (0,), "i")
    b.take(x, i)
    return Case(b.build(), lambda v: (R.take(v["x"], v["i"]),), [dict(x=floats((3, 2)), i=ints([]))])


@cases("take_from_empty_axis", ("fill", "raise"))
def take_from_empty_axis(mode):
    """Every index is out of range on an axis of size 0."""
    b = NetBuilder("take_empty_axis")
    x, i = b.create_input("float64", (0, 2), "x"), b.create_input("int64", (2,), "i")
    b.take(x, i, mode=mode, fill_value=-1.5, name="t")
    errors = [("take 't'", "i", (0,), 0)] if mode == "raise" else []
    return Case(b.build(), lambda v: (R.take(v["x"], v["i"], mode=mode, fill_value=-1.5),),
                [dict(x=np.zeros((0, 2)), i=ints([0, -1]))], errors)


@case
def gather_wrap_int8():
    b = NetBuilder("gather_wrap")
    x, i = b.create_input("int8", (3, 4), "x"), b.create_input("int32", (3, 2), "i")
    b.gather(x, i, axis=1, mode="wrap")
    X = (np.arange(12) * 23 - 128).astype(np.int8).reshape(3, 4)
    return Case(b.build(), lambda v: (R.gather(v["x"], v["i"], axis=1, mode="wrap"),),
                [dict(x=X, i=ints([[0, -1], [5, -6], [13, 2]], "int32"))])


@cases("gather_odd_rows", R.MODES)
def gather_odd_rows(mode):
    """Rows of 13 gathered through int64 indices: a ``masked_vector_loop`` where masked vector
    gathers are cheap (its own loop), collapsed elsewhere."""
    b = NetBuilder("gather_odd_rows")
    x, i = b.create_input("float32", (5, 13), "x"), b.create_input("int64", (3, 13), "i")
    b.gather(x, i, axis=0, mode=mode, fill_value=2.5, name="g")
    X = floats((5, 13))
    valid = ints([[(3 * k) % 5 - (k % 2) * 5 for k in range(13)] for _ in range(3)])
    bad = valid.copy()
    bad[1, 7], bad[2, 0] = 9, -6
    errors = [None, ("gather 'g'", "i", (1, 7), 9) if mode == "raise" else None]
    return Case(b.build(), lambda v: (R.gather(v["x"], v["i"], axis=0, mode=mode, fill_value=2.5),),
                [dict(x=X, i=valid), dict(x=X, i=bad)], errors)


@case
def gather_raise_float64():
    b = NetBuilder("gather_raise")
    x, i = b.create_input("float64", (2, 3), "x"), b.create_input("int64", (2, 3), "i")
    b.gather(x, i, axis=0, name="g")
    X = floats((2, 3), "float64")
    runs = [dict(x=X, i=ints([[1, 0, -1], [-2, 1, 1]])), dict(x=X, i=ints([[0, 0, 0], [1, 2, -3]]))]
    return Case(b.build(), lambda v: (R.gather(v["x"], v["i"], axis=0),), runs,
                [None, ("gather 'g'", "i", (1, 1), 2)])


@case
def gather_clip_uint8():
    b = NetBuilder("gather_clip")
    x, i = b.create_input("uint8", (4, 1), "x"), b.create_input("int64", (5, 1), "i")
    b.gather(x, i, axis=0, mode="clip")
    return Case(b.build(), lambda v: (R.gather(v["x"], v["i"], axis=0, mode="clip"),),
                [dict(x=ints([[0], [255], [7], [128]], "uint8"), i=ints([[-9], [-1], [0], [3], [100]]))])


@case
def gather_nd_slices_fill_float16():
    b = NetBuilder("gather_nd_fill")
    x, i = b.create_input("float16", (2, 3, 2), "x"), b.create_input("int64", (2, 2, 1), "i")
    b.gather_nd(x, i, batch_dims=1, mode="fill", fill_value=-2.5)
    return Case(b.build(), lambda v: (R.gather_nd(v["x"], v["i"], batch_dims=1, mode="fill", fill_value=-2.5),),
                [dict(x=floats((2, 3, 2), "float16", 0.3), i=ints([[[-1], [0]], [[3], [-3]]]))])


@case
def gather_nd_pairs_raise():
    """Tuples whose components address axes of different sizes (2 and 3)."""
    b = NetBuilder("gather_nd_raise")
    x, i = b.create_input("float32", (2, 3), "x"), b.create_input("int64", (3, 2), "i")
    b.gather_nd(x, i, name="g")
    X = floats((2, 3))
    runs = [dict(x=X, i=ints([[1, 2], [-2, -3], [0, -1]])), dict(x=X, i=ints([[0, 0], [1, 3], [2, 0]]))]
    return Case(b.build(), lambda v: (R.gather_nd(v["x"], v["i"]),), runs,
                [None, ("gather_nd 'g'", "i", (1, 1), 3)])


@case
def gather_nd_elements_raise_int32():
    b = NetBuilder("gather_nd_elements")
    x, i = b.create_input("int32", (3, 4), "x"), b.create_input("int32", (2, 3, 1), "i")
    b.gather_nd(x, i, dims=[1], name="g")
    X = np.arange(12, dtype=np.int32).reshape(3, 4) * -7
    runs = [dict(x=X, i=ints([[[0], [-1], [3]], [[2], [2], [-4]]], "int32")),
            dict(x=X, i=ints([[[0], [1], [2]], [[3], [4], [-5]]], "int32"))]
    return Case(b.build(), lambda v: (R.gather_nd(v["x"], v["i"], dims=[1]),), runs,
                [None, ("gather_nd 'g'", "i", (1, 1, 0), 4)])


@case
def gather_nd_first_layout_clip():
    b = NetBuilder("gather_nd_first")
    x, i = b.create_input("float32", (3, 4), "x"), b.create_input("int64", (2, 5), "i")
    b.gather_nd(x, i, index_layout="first", mode="clip")
    return Case(b.build(), lambda v: (R.gather_nd(v["x"], v["i"], index_layout="first", mode="clip"),),
                [dict(x=floats((3, 4)), i=ints([[-4, -1, 0, 2, 9], [4, -5, 1, 3, -1]]))])


#: Scatters along axis 0 of x (4, 2) with index and src (18, 2): 18 updates per column, enough
#: for the GPU passes to pick the winner or atomic path over the ordered one.
SCATTERS = {
    "none_raise_float32": ("float32", "none", "raise"),
    "none_fill_bool": ("bool", "none", "fill"),
    "add_wrap_int8": ("int8", "add", "wrap"),
    "add_raise_float16": ("float16", "add", "raise"),
    "add_clip_float32": ("float32", "add", "clip"),
    "mul_clip_uint8": ("uint8", "mul", "clip"),
    "max_fill_float32": ("float32", "max", "fill"),
    "min_raise_int16": ("int16", "min", "raise"),
    "mean_wrap_int32": ("int32", "mean", "wrap"),
    "mean_clip_float16": ("float16", "mean", "clip"),
    "add_wrap_bfloat16": ("bfloat16", "add", "wrap"),
    "mul_fill_bfloat16": ("bfloat16", "mul", "fill"),
    "max_raise_bfloat16": ("bfloat16", "max", "raise"),
    "mean_clip_bfloat16": ("bfloat16", "mean", "clip"),
    "add_clip_uint64": ("uint64", "add", "clip"),
    "mean_raise_uint64": ("uint64", "mean", "raise"),
    "min_wrap_uint32": ("uint32", "min", "wrap"),
    "mul_fill_uint16": ("uint16", "mul", "fill"),
    "add_raise_complex64": ("complex64", "add", "raise"),
    "mul_wrap_complex128": ("complex128", "mul", "wrap"),
    "mean_fill_complex64": ("complex64", "mean", "fill"),
    "none_clip_complex128": ("complex128", "none", "clip"),
}


def scatter_data(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "c":
        return (rng.integers(-3, 4, shape) + 1j * rng.integers(-3, 4, shape)).astype(dtype)
    if R.is_float(dtype):
        data = (rng.standard_normal(shape) * 3).astype(dtype)
        data.flat[5] = np.nan if dtype == "float32" else data.flat[5]
        return data
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -120), min(info.max, 120), shape, endpoint=True).astype(dtype)


@cases("scatter", SCATTERS)
def scatter_reductions(key):
    dtype, reduce, mode = SCATTERS[key]
    b = NetBuilder("scatter")
    x = b.create_input(dtype, (4, 2), "x")
    i, s = b.create_input("int64", (18, 2), "i"), b.create_input(dtype, (18, 2), "s")
    b.scatter(x, i, s, axis=0, reduce=reduce, mode=mode, name="out")
    index = np.tile(ints([0, 3, -1, 2, -4, 3, 1, 0, -2]), 4)[:36].reshape(18, 2)
    X, S = scatter_data(dtype, (4, 2), 1), scatter_data(dtype, (18, 2), 2)
    runs = [dict(x=X, i=index, s=S)]
    bad = index.copy()
    bad[7, 1], bad[11, 0] = 4, -5
    runs.append(dict(x=X, i=bad, s=S))
    errors = [None, ("scatter 'out'", "i", (7, 1), 4) if mode == "raise" else None]
    return Case(b.build(), lambda v: (R.scatter(v["x"], v["i"], v["s"], axis=0, reduce=reduce, mode=mode),),
                runs, errors)


@cases("scatter_columns", ("add", "none"))
def scatter_by_columns(reduce):
    """A scatter along axis 0 whose rows span three cache lines of float32: the CPU splits it by
    column blocks (``split_scatter_columns``), the last one short; duplicates and negative
    indices in every column, a bad index late in a row."""
    b = NetBuilder("scatter_columns")
    x = b.create_input("float32", (5, 37), "x")
    i, s = b.create_input("int64", (9, 37), "i"), b.create_input("float32", (9, 37), "s")
    b.scatter(x, i, s, axis=0, reduce=reduce, name="out")
    index = (np.arange(9 * 37).reshape(9, 37) * 7 % 10 - 5).astype(np.int64)
    bad = index.copy()
    bad[6, 36], bad[7, 0] = 5, -6
    runs = [dict(x=floats((5, 37)), i=index, s=floats((9, 37), scale=0.5)),
            dict(x=floats((5, 37)), i=bad, s=floats((9, 37), scale=0.5))]
    return Case(b.build(), lambda v: (R.scatter(v["x"], v["i"], v["s"], axis=0, reduce=reduce),), runs,
                [None, ("scatter 'out'", "i", (6, 36), 5)])


@case
def scatter_axis1_add_float64():
    """Every update of an output row comes from one iteration of the outer loop."""
    b = NetBuilder("scatter_axis1")
    x = b.create_input("float64", (2, 5), "x")
    i, s = b.create_input("int32", (2, 3), "i"), b.create_input("float64", (2, 3), "s")
    b.scatter(x, i, s, axis=1, reduce="add")
    return Case(b.build(), lambda v: (R.scatter(v["x"], v["i"], v["s"], axis=1, reduce="add"),),
                [dict(x=floats((2, 5), "float64"), i=ints([[4, -1, 0], [2, 2, -5]], "int32"),
                      s=floats((2, 3), "float64", 1.5))])


@case
def scatter_empty_updates():
    b = NetBuilder("scatter_empty")
    x = b.create_input("int32", (3, 2), "x")
    i, s = b.create_input("int64", (0, 2), "i"), b.create_input("int32", (0, 2), "s")
    b.scatter(x, i, s, reduce="add")
    return Case(b.build(), lambda v: (R.scatter(v["x"], v["i"], v["s"], reduce="add"),),
                [dict(x=ints([[1, 2], [3, 4], [5, 6]], "int32"), i=ints(np.zeros((0, 2))),
                      s=ints(np.zeros((0, 2)), "int32"))])


@case
def scatter_nd_slices_add_raise():
    b = NetBuilder("scatter_nd_slices")
    x = b.create_input("float32", (4, 3), "x")
    i, s = b.create_input("int64", (5, 1), "i"), b.create_input("float32", (5, 3), "s")
    b.scatter_nd(x, i, s, reduce="add", name="out")
    X, S = floats((4, 3)), floats((5, 3), scale=0.5)
    runs = [dict(x=X, i=ints([[0], [-1], [0], [2], [3]]), s=S), dict(x=X, i=ints([[0], [4], [-5], [1], [0]]), s=S)]
    return Case(b.build(), lambda v: (R.scatter_nd(v["x"], v["i"], v["s"], reduce="add"),), runs,
                [None, ("scatter_nd 'out'", "i", (1, 0), 4)])


@case
def scatter_nd_elements_none_fill_int64():
    b = NetBuilder("scatter_nd_elements")
    x = b.create_input("int64", (3, 3), "x")
    i, s = b.create_input("int64", (2, 3, 1), "i"), b.create_input("int64", (2, 3), "s")
    b.scatter_nd(x, i, s, dims=[1], mode="fill")
    return Case(b.build(), lambda v: (R.scatter_nd(v["x"], v["i"], v["s"], dims=[1], mode="fill"),),
                [dict(x=ints(np.arange(9).reshape(3, 3)), i=ints([[[2], [2], [-4]], [[3], [0], [-3]]]),
                      s=ints([[2**62, -1, 5], [6, -2**63, 8]]))])


@case
def scatter_nd_first_layout_max_float16():
    b = NetBuilder("scatter_nd_first")
    x = b.create_input("float16", (3, 2), "x")
    i, s = b.create_input("int32", (2, 4), "i"), b.create_input("float16", (4,), "s")
    b.scatter_nd(x, i, s, reduce="max", index_layout="first", mode="wrap")
    return Case(b.build(), lambda v: (R.scatter_nd(v["x"], v["i"], v["s"], reduce="max", index_layout="first",
                                                   mode="wrap"),),
                [dict(x=floats((3, 2), "float16"), i=ints([[0, 4, -1, 2], [1, -3, 1, 1]], "int32"),
                      s=np.array([2.5, np.inf, -7, np.nan], np.float16))])


@case
def scatter_nd_one_element_mean_float32():
    """Every update hits the single element of x (1, 1): no loop separates the targets."""
    b = NetBuilder("scatter_nd_one")
    x = b.create_input("float32", (1, 1), "x")
    i, s = b.create_input("int64", (3, 2), "i"), b.create_input("float32", (3,), "s")
    b.scatter_nd(x, i, s, reduce="mean")
    return Case(b.build(), lambda v: (R.scatter_nd(v["x"], v["i"], v["s"], reduce="mean"),),
                [dict(x=np.full((1, 1), 0.1, np.float32), i=ints([[0, 0], [-1, 0], [0, -1]]),
                      s=np.array([1e-3, 7, -2.5], np.float32))])


@case
def scatter_nd_pairs_raise_int8():
    b = NetBuilder("scatter_nd_pairs")
    x = b.create_input("int8", (2, 3), "x")
    i, s = b.create_input("int64", (4, 2), "i"), b.create_input("int8", (4,), "s")
    b.scatter_nd(x, i, s, name="out")
    X, S = ints([[1, 2, 3], [4, 5, 6]], "int8"), ints([-128, 127, 9, -1], "int8")
    runs = [dict(x=X, i=ints([[1, 2], [-2, -3], [1, 2], [0, 0]]), s=S),
            dict(x=X, i=ints([[1, 2], [0, 0], [1, -4], [2, 0]]), s=S)]
    return Case(b.build(), lambda v: (R.scatter_nd(v["x"], v["i"], v["s"]),), runs,
                [None, ("scatter_nd 'out'", "i", (2, 1), -4)])


@case
def scatter_nd_into_empty():
    b = NetBuilder("scatter_nd_empty")
    x = b.create_input("float32", (0, 3), "x")
    i, s = b.create_input("int64", (0, 1), "i"), b.create_input("float32", (0, 3), "s")
    b.scatter_nd(x, i, s, reduce="mul")
    return Case(b.build(), lambda v: (R.scatter_nd(v["x"], v["i"], v["s"], reduce="mul"),),
                [dict(x=np.zeros((0, 3), np.float32), i=ints(np.zeros((0, 1))), s=np.zeros((0, 3), np.float32))])


# -- elementwise ---------------------------------------------------------------------------------------

ARITHMETIC = ("add", "subtract", "multiply", "divide", "maximum", "minimum")


def numpy_arithmetic(op, a, c):
    """numpy's result of an elementwise operator, with cinnlite's integer division (floor, x // 0 == 0)."""
    with np.errstate(all="ignore"):
        if op == "divide":
            return a / c if a.dtype.kind == "f" else np.floor_divide(a, c)
        return getattr(np, op)(a, c)


@cases("arithmetic", ("int8", "uint8", "int64", "float16", "float64"))
def arithmetic(dtype):
    """Every binary operator with broadcasting (3, 1) x (1, 4): wrap-around, division by zero and
    by -1, NaN and infinities."""
    b = NetBuilder("arithmetic")
    a, c = b.create_input(dtype, (3, 1), "a"), b.create_input(dtype, (1, 4), "c")
    for op in ARITHMETIC:
        getattr(b, op)(a, c)
    if np.dtype(dtype).kind == "f":
        A, C = np.array([[np.nan], [-3.5], [6e4]], dtype), np.array([[0.0, -1.5, np.inf, 3]], dtype)
    else:
        info = np.iinfo(dtype)
        A = np.array([[info.min], [-7 if info.min else 7], [info.max]], dtype)
        C = np.array([[0, 2, 3, info.max]], dtype)
        C[0, 1] = -1 if info.min else 1
    return Case(b.build(), lambda v: tuple(numpy_arithmetic(op, v["a"], v["c"]) for op in ARITHMETIC),
                [dict(a=A, c=C)])


@case
def bool_maximum_minimum():
    b = NetBuilder("bools")
    a, c = b.create_input("bool", (2, 2), "a"), b.create_input("bool", (2, 2), "c")
    b.maximum(a, c)
    b.minimum(a, c)
    A, C = np.array([[0, 0], [1, 1]], bool), np.array([[0, 1], [0, 1]], bool)
    return Case(b.build(), lambda v: (np.maximum(v["a"], v["c"]), np.minimum(v["a"], v["c"])), [dict(a=A, c=C)])


def saturating_cast(x, dtype):
    """The reference of a float-to-integer cast: truncate, saturate, NaN gives 0."""
    info = np.iinfo(dtype)
    out = [0 if math.isnan(v) else int(info.max) if v == math.inf else int(info.min) if v == -math.inf
           else min(max(math.trunc(v), int(info.min)), int(info.max)) for v in x.astype(np.float64).ravel()]
    return np.array(out, dtype).reshape(x.shape)


CAST_TARGETS = ("int8", "uint8", "int16", "int64", "bool", "float16", "float64")


@cases("casts_from", ("float32", "float16"))
def casts_from_floats(dtype):
    b = NetBuilder("casts")
    x = b.create_input(dtype, (12,), "x")
    for to in CAST_TARGETS:
        b.cast(x, to)
    X = np.array([np.nan, np.inf, -np.inf, 6e4, -6e4, 3.7, -3.7, 0.5, -0.0, 127.9, 128, -129], dtype)

    def want(v):
        return tuple(saturating_cast(v["x"], to) if np.dtype(to).kind in "iu" else v["x"].astype(to)
                     for to in CAST_TARGETS)

    return Case(b.build(), want, [dict(x=X)])


@case
def casts_from_integers_and_bools():
    b = NetBuilder("int_casts")
    x, f = b.create_input("int64", (6,), "x"), b.create_input("bool", (2,), "f")
    for to in ("float16", "float32", "int8", "uint8", "bool"):
        b.cast(x, to)
    b.cast(b.cast(x, "int8"), "uint8")
    b.cast(f, "float32")
    b.cast(f, "int32")
    X, F = ints([2**62 + 1, -70000, 65519, -129, 255, 0]), np.array([True, False])

    def want(v):
        with np.errstate(over="ignore"):  # to float16: 2**62 + 1 and -70000 are meant to overflow
            return tuple(v["x"].astype(t) for t in ("float16", "float32", "int8", "uint8", "bool")) + (
                v["x"].astype("int8").astype("uint8"), v["f"].astype("float32"), v["f"].astype("int32"))

    return Case(b.build(), want, [dict(x=X, f=F)])


@case
def elementwise_empty():
    b = NetBuilder("empty")
    a, c = b.create_input("float32", (0, 3), "a"), b.create_input("float32", (1, 3), "c")
    b.add(a, c)
    return Case(b.build(), lambda v: (v["a"] + v["c"],), [dict(a=np.zeros((0, 3), np.float32), c=floats((1, 3)))])


# -- fused chains -----------------------------------------------------------------------------------------


@case
def message_passing():
    """``scatter_nd(zeros, reshape(dst), take(x, src), add)``: one kernel once fused."""
    b = NetBuilder("mp")
    x, src, dst = (b.create_input("float32", (5, 2), "x"), b.create_input("int64", (7,), "src"),
                   b.create_input("int64", (7,), "dst"))
    zeros = b.fill_constant((5, 2), 0.0, "float32")
    b.scatter_nd(zeros, b.reshape(dst, (7, 1), name="d"), b.take(x, src, name="msg"), reduce="add", name="out")
    X = floats((5, 2))
    good_src, good_dst = ints([0, 1, -1, 2, 3, 4, 4]), ints([0, 1, 1, 2, -1, 3, 0])
    bad_src, bad_dst = good_src.copy(), good_dst.copy()
    bad_src[5], bad_dst[3] = -8, 9
    runs = [dict(x=X, src=good_src, dst=good_dst), dict(x=X, src=bad_src, dst=good_dst),
            dict(x=X, src=good_src, dst=bad_dst), dict(x=X, src=bad_src, dst=bad_dst)]
    src_error = ("take 'msg'", "src", (5,), -8)
    errors = [None, src_error, ("scatter_nd 'out'", "d", (3, 0), 9), src_error]
    return Case(b.build(), lambda v: (R.scatter_nd(np.zeros((5, 2), np.float32), v["dst"].reshape(7, 1),
                                                   R.take(v["x"], v["src"]), reduce="add"),), runs, errors)


@case
def scaled_messages_mean_into_constant():
    """An elementwise product of a clipped take, scattered as a mean into a constant tensor."""
    b = NetBuilder("mp_mean")
    x, src, dst = (b.create_input("float64", (4, 3), "x"), b.create_input("int32", (6,), "src"),
                   b.create_input("int64", (6, 1), "dst"))
    base = floats((3, 3), "float64", 2.0)
    scaled = b.multiply(b.take(x, src, mode="clip"), b.fill_constant((6, 3), 0.5, "float64"))
    b.scatter_nd(b.constant(base), dst, scaled, reduce="mean", mode="wrap")
    return Case(b.build(), lambda v: (R.scatter_nd(base, v["dst"], R.take(v["x"], v["src"], mode="clip") * 0.5,
                                                   reduce="mean", mode="wrap"),),
                [dict(x=floats((4, 3), "float64"), src=ints([0, 9, -1, -9, 2, 2], "int32"),
                      dst=ints([[0], [4], [-1], [2], [2], [-7]]))])


@case
def two_fused_checks_keep_program_order():
    """Both operands of an add are raise-mode takes: with both indices bad, the first take's error."""
    b = NetBuilder("two_checks")
    x = b.create_input("int32", (3,), "x")
    i, j = b.create_input("int64", (4,), "i"), b.create_input("int64", (4,), "j")
    b.add(b.take(x, i, name="ti"), b.take(x, j, name="tj"))
    X = ints([10, 20, 30], "int32")
    runs = [dict(x=X, i=ints([0, -1, 2, 1]), j=ints([2, 2, -3, 0])),
            dict(x=X, i=ints([0, 1, 2, 1]), j=ints([2, 5, -3, 0])),
            dict(x=X, i=ints([0, 1, 2, -4]), j=ints([2, 5, -3, 0]))]
    return Case(b.build(), lambda v: (R.take(v["x"], v["i"]) + R.take(v["x"], v["j"]),), runs,
                [None, ("take 'tj'", "j", (1,), 5), ("take 'ti'", "i", (3,), -4)])


# -- checking -------------------------------------------------------------------------------------------------


def outcome_of(fn):
    """("ok", outputs in program order) or ("error", (operator, input, position, value))."""
    try:
        return "ok", fn()
    except IndexOutOfRangeError as e:
        return "error", (e.op, e.input, e.position, e.value)


def evaluated(program, inputs, on_error):
    return outcome_of(lambda: tuple(evaluate(program, inputs, on_error)[b.name] for b in program.outputs))


def expected(c: Case, k: int):
    if c.errors[k] is not None:
        with pytest.raises(IndexError):
            c.reference(c.runs[k])
        return "error", c.errors[k]
    return "ok", tuple(np.asarray(a) for a in c.reference(c.runs[k]))


def assert_same(got, want, where: str, bitwise: bool = False):
    """The same error, or outputs of the same dtypes and shapes and values (NaN equal to NaN;
    with ``bitwise``, the same bytes)."""
    assert got[0] == want[0], f"{where}: got {got}, expected {want}"
    if got[0] == "error":
        assert got[1] == want[1], f"{where}: error {got[1]}, expected {want[1]}"
        return
    assert len(got[1]) == len(want[1]), where
    for n, (g, w) in enumerate(zip(got[1], want[1])):
        assert (g.dtype, g.shape) == (w.dtype, w.shape), \
            f"{where}, output {n}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if bitwise:
            assert g.tobytes() == w.tobytes(), f"{where}, output {n}: {g} vs {w}"
        elif g.dtype.name == "bfloat16":  # numpy's testing knows float32, which holds every value
            np.testing.assert_array_equal(g.astype(np.float32), w.astype(np.float32), err_msg=f"{where}, output {n}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{where}, output {n}")


def check_steps(name: str, c: Case, on_error: str, steps) -> None:
    """Evaluate the program after lowering and after every step. Raises AssertionError naming
    the first step after which a result or error changed."""
    program = lower_program(c.program)
    want = [expected(c, k) for k in range(len(c.runs))]
    before = []
    for k, inputs in enumerate(c.runs):
        for mode in ("stop", "record"):  # before any pass, both ways of reporting agree
            assert_same(evaluated(program, inputs, mode), want[k], f"{name}, run {k}, lowered ({mode})")
        before.append(evaluated(program, inputs, on_error))
    for step, run_step in steps:
        after_program = run_step(program)
        if after_program == program:
            continue
        program = after_program
        for k, inputs in enumerate(c.runs):
            where = f"{name}, run {k}, after {step}"
            try:
                now = evaluated(program, inputs, on_error)
            except EvaluationError as e:
                raise AssertionError(f"{where}: {e}") from e
            assert_same(now, want[k], where)
            assert_same(now, before[k], f"{where} (against the evaluation before it)", bitwise=True)
            before[k] = now


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("name", CASES)
def test_every_pass_keeps_the_reference_results(name, pipeline):
    on_error, steps = PIPELINES[pipeline]
    check_steps(name, CASES[name](), on_error, steps)


def final_program(c: Case, pipeline: str):
    """The loop nests ``cinnlite.compile`` renders for ``pipeline``, with its ``on_error``."""
    on_error, steps = PIPELINES[pipeline]
    program = lower_program(c.program)
    for _, run_step in steps:
        program = run_step(program)
    return program, on_error


EMULATED = ("message_passing", "gather_nd_pairs_raise", "scatter_none_raise_float32")


@pytest.mark.parametrize("target, pipeline, name",
                         [("cpu", "cpu", name) for name in CASES] + [("cuda-emu", "gpu", name) for name in EMULATED])
def test_compiled_program_agrees_with_the_evaluator(target, pipeline, name):
    """The same outputs, bit for bit, and for a bad index the same operator, input, position and
    value, from the compiled program as from the evaluated loop nests it was rendered from."""
    c = CASES[name]()
    final, on_error = final_program(c, pipeline)
    exe = cl.compile(c.program, target=target)
    for k, inputs in enumerate(c.runs):
        compiled = outcome_of(lambda: tuple(exe.run(inputs)[b.name] for b in final.outputs))
        assert_same(compiled, evaluated(final, inputs, on_error), f"{name}, run {k}, {target}", bitwise=True)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_every_pass_changes_some_program(pipeline):
    """The programs above exercise every pass of every pipeline (the verifiers, which only
    check, aside): a pass that changes none of them would be checked by nothing here."""
    _, steps = PIPELINES[pipeline]
    changed = {(n, step): 0 for n, (step, _) in enumerate(steps) if not step.startswith("verify")}
    for make in CASES.values():
        program = lower_program(make().program)
        for n, (step, run_step) in enumerate(steps):
            after = run_step(program)
            if after != program and (n, step) in changed:
                changed[n, step] += 1
            program = after
    assert all(changed.values()), changed


# -- the evaluator catches broken passes -------------------------------------------------------------------


def swap_stored_operands(kernel):
    """Broken: stores ``b - a`` where the program stores ``a - b``."""
    def swap(s):
        if isinstance(s, Store) and isinstance(s.value, Binary) and s.value.op == "sub":
            return replace(s, value=Binary("sub", s.value.b, s.value.a))
        return s
    return replace(kernel, body=map_stmt(kernel.body, None, swap))


def drop_flags(kernel):
    """Broken: folds the checks into later loops, then forgets to flag bad values there."""
    def drop(s):
        return None if isinstance(s, FlagIndexError) else s
    return replace(kernel, body=map_stmt(kernel.body, None, drop))


def drop_clamps(kernel):
    """Broken: ``min(max(v, 0), s - 1)`` becomes ``v``, so a clipped index reads out of bounds."""
    def unclamp(e):
        if isinstance(e, Binary) and e.op == "min" and isinstance(e.a, Binary) and e.a.op == "max":
            return e.a.a
        return e
    return replace(kernel, body=map_stmt(kernel.body, unclamp))


@pytest.mark.parametrize("case_name, broken, after", [
    ("arithmetic_int8", swap_stored_operands, "simplify"),
    ("gather_raise_float64", drop_flags, "defer_index_checks"),
    ("take_clip", drop_clamps, "remove_unit_loops"),
])
def test_a_broken_pass_is_caught_and_named(case_name, broken, after):
    on_error, steps = PIPELINES["cpu"]
    at = [s for s, _ in steps].index(after) + 1
    steps = steps[:at] + (one_pass(broken),) + steps[at:]
    with pytest.raises(AssertionError, match=f"after {broken.__name__}"):
        check_steps(case_name, CASES[case_name](), on_error, steps)


def test_one_kernel_runs_on_the_callers_buffers():
    """``evaluate_kernel`` writes the output in place and returns the check that failed."""
    c = CASES["scatter_nd_slices_add_raise"]()
    (kernel,) = lower_program(c.program).kernels
    for k, error in enumerate(c.errors):
        buffers = {name: np.array(a) for name, a in c.runs[k].items()}
        buffers["out"] = np.empty((4, 3), np.float32)
        failure = evaluate_kernel(kernel, buffers)
        if error is None:
            assert failure is None
            np.testing.assert_array_equal(buffers["out"], c.reference(c.runs[k])[0])
        else:
            assert failure == FailedCheck(check_id=0, position=1, value=4)


# -- the evaluator's arithmetic ---------------------------------------------------------------------------


@pytest.mark.parametrize("op, dtype, a, b, want", [
    ("div", int8, -7, 2, -3), ("mod", int8, -7, 2, -1), ("div", int32, 7, -2, -3), ("mod", int32, 7, -2, 1),
    ("add", int8, 127, 1, -128), ("mul", uint8, 16, 17, 16), ("sub", uint8, 0, 1, 255),
    ("max", uint8, 255, 0, 255), ("min", int8, -128, 127, -128),
])
def test_integer_arithmetic_is_fixed_width_c(op, dtype, a, b, want):
    assert binary(op, dtype, a, b) == want


@pytest.mark.parametrize("a, b", [(1, 0), (-2**31, -1)])
def test_undefined_integer_division_is_an_error(a, b):
    with pytest.raises(EvaluationError, match="undefined"):
        binary("div", int32, a, b)


@pytest.mark.parametrize("value, to, want", [
    (np.float32("nan"), int8, 0), (np.float32(300.5), uint8, 255), (np.float32(-1.5), uint8, 0),
    (np.float32(-2.9), int8, -2), (np.float32("-inf"), int32, -2**31), (200, int8, -56),
])
def test_casts_truncate_saturate_and_wrap(value, to, want):
    src = float32 if isinstance(value, np.floating) else int32
    assert cast(value, src, to) == want
