"""Bad and unusual run-time inputs: wrong dtype, wrong shape, missing and unknown names, and
arrays that are legal but awkward (non-contiguous, negative strides, broadcast, read-only,
Fortran-ordered, unaligned, byte-swapped, zero-size). Wrong inputs raise a clear cinnlite error
that names the input; awkward ones compute the right result; nothing ever changes an input.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
import reference as R
from backends import BACKENDS
from cinnlite import CinnliteError, IndexOutOfRangeError, InputError, InputTypeError

XS = np.arange(12, dtype=np.float32).reshape(4, 3) * 1.5 - 4
IDX = np.array([[0, 1, -1], [3, -4, 0]], dtype=np.int64)
SRC = np.arange(6, dtype=np.float32).reshape(2, 3) + 100


@pytest.fixture(scope="module", params=BACKENDS)
def exe(request):
    """One program with three outputs: gather, take and a scatter-add, over x, idx, src."""
    b = cl.NetBuilder("three")
    x = b.create_input("float32", (4, 3), "x")
    i = b.create_input("int64", (2, 3), "idx")
    s = b.create_input("float32", (2, 3), "src")
    g = b.gather(x, i, axis=0, name="g")
    t = b.take(x, i, axis=0, name="t")
    u = b.scatter(x, i, s, axis=0, reduce="add", name="u")
    return cl.compile(b.build(outputs=[g, t, u]), target=request.param)


def expected(x, idx, src):
    return (R.gather(x, idx, axis=0), R.take(x, idx, axis=0), R.scatter(x, idx, src, axis=0, reduce="add"))


def check_all(exe, x, idx, src):
    """Run on ``x, idx, src`` (any layout); the results match the reference on plain copies and
    no input changes."""
    before = [np.array(a, copy=True) for a in (x, idx, src)]
    got = exe(x=x, idx=idx, src=src)
    for g, e, name in zip(got, expected(*before), ("gather", "take", "scatter")):
        np.testing.assert_array_equal(g, e, err_msg=name, strict=True)
    for a, b0, name in zip((x, idx, src), before, ("x", "idx", "src")):
        np.testing.assert_array_equal(a, b0, err_msg=f"input {name} was modified", strict=True)
    return got


def test_plain_inputs(exe):
    check_all(exe, XS.copy(), IDX.copy(), SRC.copy())


# -- wrong dtype ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name,value,expected_dtype", [
    ("x", XS.astype(np.float64), "float32"),
    ("x", XS.astype(np.float16), "float32"),
    ("x", XS.astype(np.int32), "float32"),
    ("x", XS.tolist(), "float32"),            # a list becomes float64: no silent cast
    ("x", None, "float32"),
    ("x", "not an array", "float32"),
    ("x", XS.astype(np.complex64), "float32"),
    ("idx", IDX.astype(np.int32), "int64"),   # int32 where int64 is declared: no silent widening
    ("idx", IDX.astype(np.uint64), "int64"),
    ("idx", IDX.astype(np.float64), "int64"),
    ("idx", IDX != 0, "int64"),
    ("src", SRC.astype(np.float64), "float32"),
], ids=lambda v: type(v).__name__ if not isinstance(v, (str, np.ndarray)) else (
    v if isinstance(v, str) else str(v.dtype)))
def test_wrong_dtype_is_an_input_type_error(exe, name, value, expected_dtype):
    args = dict(x=XS, idx=IDX, src=SRC)
    args[name] = value
    with pytest.raises(InputTypeError) as info:
        exe(**args)
    assert isinstance(info.value, TypeError) and isinstance(info.value, CinnliteError)
    msg = str(info.value)
    assert f"'{name}'" in msg and expected_dtype in msg, msg


@pytest.mark.parametrize("name", ["x", "idx"])
def test_byte_swapped_arrays_compute_or_raise_a_clear_error(exe, name):
    """A non-native byte order is either handled or reported as such; an error that says
    "expected float32, got float32" does not tell the user what is wrong."""
    args = dict(x=XS.copy(), idx=IDX.copy(), src=SRC.copy())
    args[name] = args[name].astype(args[name].dtype.newbyteorder(">" if np.little_endian else "<"))
    try:
        got = exe(**args)
    except InputTypeError as e:
        msg = str(e)
        assert f"'{name}'" in msg
        assert "byte order" in msg or "endian" in msg or ">" in msg or "<" in msg, (
            f"the error does not say how the dtypes differ: {msg}")
    else:
        for g, e in zip(got, expected(XS, IDX, SRC)):
            np.testing.assert_array_equal(g, e)


# -- wrong shape ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name,shape", [
    ("x", (3, 4)), ("x", (4, 3, 1)), ("x", (12,)), ("x", (4, 2)), ("x", (0, 3)),
    ("idx", (3, 2)), ("idx", (2, 3, 1)), ("idx", ()), ("idx", (1, 2, 3)),
    ("src", (2, 4)), ("src", (6,)),
])
def test_wrong_shape_is_an_input_error(exe, name, shape):
    args = dict(x=XS, idx=IDX, src=SRC)
    args[name] = np.zeros(shape, args[name].dtype)
    with pytest.raises(InputError) as info:
        exe(**args)
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert f"'{name}'" in msg and str(shape) in msg and str(args[name].shape) in msg


def test_scalar_for_a_rank0_input_and_rank0_for_rank1():
    b = cl.NetBuilder("scalars")
    x = b.create_input("float64", (5,), "x")
    i = b.create_input("int64", (), "i")
    j = b.create_input("int64", (1,), "j")
    exe = cl.compile(b.build(outputs=[b.take(x, i), b.take(x, j)]))
    xs = np.linspace(0, 1, 5)
    got_i, got_j = exe(x=xs.tolist(), i=-2, j=[4])     # Python values of the right kind work
    assert got_i.shape == () and got_i == xs[3] and got_j.tolist() == [xs[4]]
    with pytest.raises(InputError, match="'j'"):
        exe(x=xs, i=np.int64(1), j=np.int64(1))          # rank 0 where rank 1 is declared
    with pytest.raises(InputError, match="'i'"):
        exe(x=xs, i=np.array([1]), j=np.array([1]))      # rank 1 where rank 0 is declared


# -- names ---------------------------------------------------------------------------------------


def test_missing_input_is_named(exe):
    with pytest.raises(InputError) as info:
        exe(x=XS, src=SRC)
    msg = str(info.value)
    assert "missing" in msg and "'idx'" in msg and "'x'" not in msg.split("(expects")[0]


def test_unknown_input_is_named(exe):
    with pytest.raises(InputError) as info:
        exe(x=XS, idx=IDX, src=SRC, index=IDX)
    assert "unknown" in str(info.value) and "'index'" in str(info.value)


def test_missing_and_unknown_together(exe):
    with pytest.raises(InputError) as info:
        exe(x=XS, idx=IDX, SRC=SRC)
    msg = str(info.value)
    assert "'src'" in msg and "'SRC'" in msg


def test_no_inputs_at_all(exe):
    with pytest.raises(InputError, match="missing"):
        exe()
    with pytest.raises(InputError, match="missing"):
        exe.run({})


@pytest.mark.parametrize("arg", [[XS, IDX, SRC], None, (("x", XS),), "x"])
def test_run_takes_a_dict(exe, arg):
    with pytest.raises(InputError):
        exe.run(arg)


def test_run_with_a_dict_returns_outputs_by_name(exe):
    outs = exe.run({"x": XS, "idx": IDX, "src": SRC})
    assert sorted(outs) == ["g", "t", "u"]
    for name, e in zip(("g", "t", "u"), expected(XS, IDX, SRC)):
        np.testing.assert_array_equal(outs[name], e)


# -- awkward but legal layouts ---------------------------------------------------------------------


def strided(a, step=2):
    """``a``'s values in an array whose rows are ``step`` apart in memory."""
    big = np.zeros((a.shape[0] * step,) + a.shape[1:], a.dtype)
    big[::step] = a
    return big[::step]


def transposed_view(a):
    """``a``'s values in a view that is the transpose of a C array (Fortran-like strides)."""
    return np.ascontiguousarray(a.T).T


def negative_strides(a):
    return np.ascontiguousarray(a[::-1, ::-1])[::-1, ::-1]


def unaligned(a):
    """``a``'s values at an address that is not a multiple of the element size."""
    raw = np.zeros(a.nbytes + 1, np.uint8)
    out = raw[1:].view(a.dtype).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned
    return out


def read_only(a):
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


LAYOUTS = {
    "strided": strided,
    "fortran": np.asfortranarray,
    "transposed-view": transposed_view,
    "negative-strides": negative_strides,
    "unaligned": unaligned,
    "read-only": read_only,
    "column-slice": lambda a: np.concatenate([a, a], axis=1)[:, :a.shape[1]],
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("which", ["x", "idx", "src", "all"])
def test_awkward_layouts_compute_the_right_result(exe, layout, which):
    make = LAYOUTS[layout]
    args = dict(x=XS.copy(), idx=IDX.copy(), src=SRC.copy())
    for name in (["x", "idx", "src"] if which == "all" else [which]):
        args[name] = make(args[name])
        flags = args[name].flags
        # The layout is what it claims to be, so the test exercises it.
        if layout == "read-only":
            assert not flags.writeable
        elif layout == "unaligned":
            assert not flags.aligned
        else:
            assert not flags.c_contiguous
    check_all(exe, **args)


def test_broadcast_views_with_zero_strides(exe):
    """np.broadcast_to gives read-only views whose strides are 0."""
    x = np.broadcast_to(np.float32(2.5), (4, 3))
    idx = np.broadcast_to(np.array([1, -1, 2]), (2, 3))
    src = np.broadcast_to(np.arange(3, dtype=np.float32), (2, 3))
    assert x.strides == (0, 0)
    check_all(exe, x, idx, src)


def test_same_array_for_two_inputs(exe):
    a = XS[:2].copy()
    b = cl.NetBuilder("alias")
    x = b.create_input("float32", (2, 3), "x")
    s = b.create_input("float32", (2, 3), "s")
    i = b.create_input("int64", (2, 3), "i")
    e = cl.compile(b.build(outputs=[b.scatter(x, i, s, reduce="mul")]), target=exe.target)
    idx = np.array([[1, 0, 1], [1, 1, 0]])
    got = e(x=a, s=a, i=idx)
    np.testing.assert_array_equal(got, R.scatter(XS[:2], idx, XS[:2], reduce="mul"))
    np.testing.assert_array_equal(a, XS[:2])


def test_out_of_range_error_with_non_contiguous_index_names_the_logical_position(exe):
    """The position in the error is the position in the array the user passed, whatever its
    memory layout."""
    idx = IDX.copy()
    idx[1, 0] = 9
    for arr in (np.asfortranarray(idx), strided(idx), negative_strides(idx)):
        with pytest.raises(IndexOutOfRangeError) as info:
            exe(x=XS, idx=arr, src=SRC)
        assert info.value.position == (1, 0) and info.value.value == 9


# -- outputs ---------------------------------------------------------------------------------------


def test_outputs_are_fresh_writable_arrays(exe):
    x, idx, src = XS.copy(), IDX.copy(), SRC.copy()
    first = exe(x=x, idx=idx, src=src)
    for out in first:
        assert out.flags.writeable and out.flags.c_contiguous
        assert not any(np.shares_memory(out, a) for a in (x, idx, src))
        out[...] = 0
    second = exe(x=x, idx=idx, src=src)
    for got, e in zip(second, expected(XS, IDX, SRC)):
        np.testing.assert_array_equal(got, e)
    assert not any(np.shares_memory(a, b) for a in first for b in second)


def test_an_output_that_is_a_reshape_of_an_input_is_a_copy(backend):
    b = cl.NetBuilder("reshape_out")
    x = b.create_input("int32", (2, 3), "x")
    exe = cl.compile(b.build(outputs=[b.reshape(x, (3, 2))]), target=backend)
    xs = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = exe(x=xs)
    np.testing.assert_array_equal(out, xs.reshape(3, 2))
    out[0, 0] = 99
    assert xs[0, 0] == 0 and not np.shares_memory(out, xs)


# -- zero-size arrays --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["raise", "clip", "wrap", "fill"])
def test_zero_size_inputs(backend, mode):
    """Empty index tensors, empty data and empty trailing slices, in every mode."""
    def build(b):
        x = b.create_input("float32", (3, 0, 2), "x")
        i = b.create_input("int64", (0, 4), "i")
        j = b.create_input("int32", (5,), "j")
        k = b.create_input("int64", (2, 0, 2), "k")
        s = b.create_input("float32", (0, 4, 2), "s")
        outs = [b.take(x, i, axis=0, mode=mode),                  # (0, 4, 0, 2)
                b.take(x, j, axis=2, mode=mode),                  # (3, 0, 5)
                b.take(x, j, axis=0, mode=mode),                  # (5, 0, 2)
                b.gather(x, k, axis=0, mode=mode),                 # (2, 0, 2)
                b.scatter(x, k, b.fill_constant((2, 0, 2), 1.0, "float32"), axis=0, reduce="add", mode=mode),
                b.scatter_nd(b.fill_constant((0, 4, 2), 0.0, "float32"), b.create_input("int64", (0, 1), "e"),
                             b.create_input("float32", (0, 4, 2), "es"), mode=mode)]
        return outs

    b = cl.NetBuilder("zero")
    exe = cl.compile(b.build(outputs=build(b)), target=backend)
    x = np.zeros((3, 0, 2), np.float32)
    i = np.zeros((0, 4), np.int64)
    j = np.array([0, 1, -1, 7, -9], np.int32) if mode != "raise" else np.array([0, 1, -1, 1, -2], np.int32)
    k = np.zeros((2, 0, 2), np.int64)
    got = exe(x=x, i=i, j=j, k=k, s=np.zeros((0, 4, 2), np.float32), e=np.zeros((0, 1), np.int64),
              es=np.zeros((0, 4, 2), np.float32))
    want = [R.take(x, i, axis=0, mode=mode), R.take(x, j, axis=2, mode=mode), R.take(x, j, axis=0, mode=mode),
            R.gather(x, k, axis=0, mode=mode), R.scatter(x, k, np.ones((2, 0, 2), np.float32), reduce="add", mode=mode),
             np.zeros((0, 4, 2), np.float32)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("mode,fill", [("raise", None), ("fill", 3)])
def test_non_empty_index_into_an_empty_axis(backend, mode, fill):
    """Nothing is in range on an empty axis: raise names the first position; fill fills."""
    b = cl.NetBuilder("empty_axis")
    x = b.create_input("int16", (2, 0), "x")
    i = b.create_input("int64", (2, 3), "i")
    kwargs = dict(mode=mode) if fill is None else dict(mode=mode, fill_value=fill)
    exe = cl.compile(b.build(outputs=[b.gather(x, i, axis=1, **kwargs)]), target=backend)
    idx = np.array([[0, -1, 5], [1, 2, 3]])
    if mode == "raise":
        with pytest.raises(IndexOutOfRangeError) as info:
            exe(x=np.zeros((2, 0), np.int16), i=idx)
        assert info.value.position == (0, 0) and info.value.value == 0 and info.value.size == 0
        assert "empty" in str(info.value)
    else:
        got = exe(x=np.zeros((2, 0), np.int16), i=idx)
        np.testing.assert_array_equal(got, np.full((2, 3), fill, np.int16), strict=True)


def test_big_results_kept_only_through_a_view_are_never_overwritten(backend):
    """Large outputs: a result the caller keeps only through a view, a memoryview or a slice of
    its base must keep its values however many calls come after."""
    b = cl.NetBuilder("big_outputs")
    x = b.create_input("float32", (512, 1024), "x")
    i = b.create_input("int64", (512, 1024), "i")
    exe = cl.compile(b.build(outputs=[b.gather(x, i, axis=1, mode="wrap")]), target=backend)
    xs = np.arange(512 * 1024, dtype=np.float32).reshape(512, 1024)
    kept, wants = [], []
    for call in range(6):
        idx = np.full((512, 1024), call, np.int64)
        out = exe(x=xs, i=idx)
        want = xs[:, call:call + 1].repeat(1024, axis=1)
        keep = [out[1:], memoryview(out), out.reshape(-1), out.T][call % 4]
        del out
        kept.append(keep)
        wants.append(want)
    for call, (keep, want) in enumerate(zip(kept, wants)):
        got = np.asarray(keep)
        expected = [want[1:], want, want.reshape(-1), want.T][call % 4]
        np.testing.assert_array_equal(got, expected, err_msg=f"result of call {call} was overwritten")


def test_two_gathers_with_one_index_check_it_once_and_name_the_first(backend):
    """Fused into one kernel, both takes bring a check of the same index; the CPU runs it once,
    and the error names the take that comes first in the program, as it would unfused."""
    b = cl.NetBuilder("twice")
    x, idx = b.create_input("float32", (5, 3), "x"), b.create_input("int64", (4,), "idx")
    first, second = b.take(x, idx, axis=0, name="first"), b.take(b.exp(x), idx, axis=0, name="second")
    exe = cl.compile(b.build([b.add(first, second)]), target=backend, cache=False)
    if backend == "cpu":
        assert exe.source("lowered").count("report_index_error") == 1
    xs = np.arange(15, dtype=np.float32).reshape(5, 3) / 10
    np.testing.assert_allclose(exe(x=xs, idx=np.array([4, 0, -1, 2])), xs[[4, 0, -1, 2]] + np.exp(xs)[[4, 0, -1, 2]],
                               rtol=1e-6)
    with pytest.raises(IndexOutOfRangeError) as info:
        exe(x=xs, idx=np.array([0, 1, 5, 2]))
    assert info.value.position == (2,) and info.value.value == 5 and "first" in str(info.value)
