"""cinnlite programs over dask arrays (cinnlite.dask.run), on a LocalCluster of two worker
processes and on dask's threaded scheduler, against the numpy reference (tests/reference.py)."""
import numpy as np
import pytest

import reference as ref
import cinnlite as cl

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
cdask = pytest.importorskip("cinnlite.dask")

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def client():
    """Two worker processes, one thread each: every task result crosses a process boundary."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _program(op, shapes, dtypes, **attrs):
    b = cl.NetBuilder(op)
    names = ["x", "i", "s"][:len(shapes)]
    ts = [b.create_input(dt, sh, n) for n, sh, dt in zip(names, shapes, dtypes)]
    getattr(b, op)(*ts, **attrs)
    return b.build()


def _chunked(a, chunks):
    return da.from_array(a, chunks=chunks)


TABLE_CHUNKS = [(13, 5), (100, 5), (7, 5)]  # several chunks, one chunk, uneven chunks


@pytest.mark.parametrize("mode", ["raise", "clip", "wrap", "fill"])
@pytest.mark.parametrize("table_chunks", TABLE_CHUNKS)
def test_take_rows_equals_numpy(client, mode, table_chunks):
    x = RNG.standard_normal((60, 5)).astype(np.float32)
    lo, hi = (-60, 60) if mode == "raise" else (-90, 90)
    i = RNG.integers(lo, hi, (3, 17)).astype(np.int32)
    p = _program("take", [x.shape, i.shape], ["float32", "int32"], axis=0, mode=mode, fill_value=-1.5)
    out = cdask.run(p, x=_chunked(x, table_chunks), i=_chunked(i, (2, 6)))
    np.testing.assert_array_equal(out.compute(), ref.take(x, i, axis=0, mode=mode, fill_value=-1.5))


@pytest.mark.parametrize("dtype", ["float64", "int64", "float16", "bool"])
def test_take_middle_axis_and_dtypes(client, dtype):
    x = (RNG.standard_normal((3, 40, 4)) * 10).astype(dtype)
    i = RNG.integers(0, 40, 25)
    p = _program("take", [x.shape, i.shape], [dtype, "int64"], axis=1)
    out = cdask.run(p, x=_chunked(x, (2, 9, 4)), i=_chunked(i, 8))
    np.testing.assert_array_equal(out.compute(), ref.take(x, i, axis=1))


def test_indices_that_all_hit_one_chunk_and_empty_chunks(client):
    x = RNG.standard_normal((50, 3))
    i = np.full(30, 42)
    p = _program("take", [x.shape, ("E",)], ["float64", "int64"])
    np.testing.assert_array_equal(cdask.run(p, x=_chunked(x, (10, 3)), i=_chunked(i, 7)).compute(), x[i])
    empty = np.zeros(0, np.int64)
    out = cdask.run(p, x=_chunked(x, (10, 3)), i=_chunked(empty, 5))
    assert out.compute().shape == (0, 3)
    # a chunked index array with an empty chunk in the middle
    pieces = da.concatenate([_chunked(i[:5], 5), _chunked(empty, 1), _chunked(i[5:], 9)])
    np.testing.assert_array_equal(cdask.run(p, x=_chunked(x, (10, 3)), i=pieces).compute(), x[i])


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("mode", ["raise", "clip", "wrap", "fill"])
def test_gather_elements(client, axis, mode):
    x = RNG.standard_normal((24, 10)).astype(np.float32)
    shape = (30, 10) if axis == 0 else (24, 15)
    i = RNG.integers(-x.shape[axis], x.shape[axis], shape) if mode == "raise" else RNG.integers(-40, 40, shape)
    p = _program("gather", [x.shape, i.shape], ["float32", "int64"], axis=axis, mode=mode)
    out = cdask.run(p, x=_chunked(x, (7, 4)), i=_chunked(i, (8, 4)))
    np.testing.assert_array_equal(out.compute(), ref.gather(x, i, axis=axis, mode=mode))


REDUCTIONS = ["none", "add", "mul", "max", "min", "mean"]


# include_self=False needs a reduction: ("none", False) is a ValidationError (test_invalid_programs)
@pytest.mark.parametrize("reduce,include_self", [(r, True) for r in REDUCTIONS] + [(r, False) for r in REDUCTIONS[1:]])
@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_scatter_every_reduction(client, reduce, dtype, include_self):
    x = (RNG.standard_normal((40, 6)) * 4).astype(dtype)
    i = RNG.integers(0, 40, (90, 6))
    s = (RNG.standard_normal((90, 6)) * 4).astype(dtype)
    p = _program("scatter", [x.shape, i.shape, s.shape], [dtype, "int64", dtype], axis=0, reduce=reduce,
                 include_self=include_self)
    out = cdask.run(p, x=_chunked(x, (9, 6)), i=_chunked(i, (20, 3)), s=_chunked(s, (25, 6)))
    want = ref.scatter(x, i, s, axis=0, reduce=reduce, include_self=include_self)
    np.testing.assert_allclose(out.compute(), want, rtol=1e-12)


@pytest.mark.parametrize("mode", ["clip", "wrap", "fill"])
@pytest.mark.parametrize("reduce", ["none", "add", "max"])
def test_scatter_modes_axis_one_and_bool(client, mode, reduce):
    x = RNG.standard_normal((5, 30))
    i = RNG.integers(-45, 45, (4, 50))
    s = RNG.standard_normal((5, 60))
    p = _program("scatter", [x.shape, i.shape, s.shape], ["float64", "int64", "float64"], axis=1, reduce=reduce,
                 mode=mode)
    out = cdask.run(p, x=_chunked(x, (5, 7)), i=_chunked(i, (2, 11)), s=_chunked(s, (5, 60)))
    # partial sums meet in a tree: float additions in another order, equal to rounding
    np.testing.assert_allclose(out.compute(), ref.scatter(x, i, s, axis=1, reduce=reduce, mode=mode), rtol=1e-13)
    xb, sb = x > 0, s > 0.5
    pb = _program("scatter", [x.shape, i.shape, s.shape], ["bool", "int64", "bool"], axis=1, reduce="add", mode=mode)
    out = cdask.run(pb, x=_chunked(xb, (5, 7)), i=_chunked(i, (2, 11)), s=_chunked(sb, (5, 60)))
    np.testing.assert_array_equal(out.compute(), ref.scatter(xb, i, sb, axis=1, reduce="add", mode=mode))


def test_scatter_none_keeps_the_last_update_in_global_order(client):
    x = np.zeros((4, 2))
    i = np.tile(np.arange(4)[:, None], (25, 2)).reshape(100, 2) % 4  # every target written 25 times
    s = np.arange(200, dtype=np.float64).reshape(100, 2)
    p = _program("scatter", [x.shape, i.shape, s.shape], ["float64", "int64", "float64"])
    out = cdask.run(p, x=_chunked(x, (1, 2)), i=_chunked(i, (7, 2)), s=_chunked(s, (7, 2))).compute()
    np.testing.assert_array_equal(out, ref.scatter(x, i, s))


@pytest.mark.parametrize("mode", ["raise", "clip", "wrap", "fill"])
def test_gather_nd_routes_index_tuples(client, mode):
    x = RNG.standard_normal((12, 7, 3))
    hi = (12, 7) if mode == "raise" else (20, 11)
    i = np.stack([RNG.integers(-hi[0], hi[0], (4, 9)), RNG.integers(-hi[1], hi[1], (4, 9))], axis=-1)
    p = _program("gather_nd", [x.shape, i.shape], ["float64", "int64"], mode=mode)
    got = cdask.run(p, x=_chunked(x, (5, 7, 3)), i=_chunked(i, (3, 4, 2))).compute()
    np.testing.assert_array_equal(got, ref.gather_nd(x, i, mode=mode))


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("mode", ["raise", "wrap", "fill"])
def test_scatter_nd_rows_and_elements(client, reduce, mode):
    x = RNG.standard_normal((30, 4))
    rows = RNG.integers(-30, 30 if mode == "raise" else 45, (50, 1))
    s = RNG.standard_normal((50, 4))
    p = _program("scatter_nd", [x.shape, rows.shape, s.shape], ["float64", "int64", "float64"], reduce=reduce, mode=mode)
    got = cdask.run(p, x=_chunked(x, (8, 4)), i=_chunked(rows, (12, 1)), s=_chunked(s, (12, 4))).compute()
    np.testing.assert_allclose(got, ref.scatter_nd(x, rows, s, reduce=reduce, mode=mode), rtol=1e-12)
    pairs = np.concatenate([rows, RNG.integers(0, 4, (50, 1))], axis=1)
    p = _program("scatter_nd", [x.shape, pairs.shape, (50,)], ["float64", "int64", "float64"], reduce=reduce,
                 mode=mode)
    got = cdask.run(p, x=_chunked(x, (8, 4)), i=_chunked(pairs, (12, 2)), s=_chunked(s[:, 0].copy(), 12)).compute()
    np.testing.assert_allclose(got, ref.scatter_nd(x, pairs, s[:, 0], reduce=reduce, mode=mode), rtol=1e-12)


def test_nd_errors_match_the_compiled_program(client):
    x = RNG.standard_normal((12, 7))
    i = np.stack([RNG.integers(0, 12, 30), RNG.integers(0, 7, 30)], axis=-1)
    i[17, 1], i[25, 0] = 9, 40
    p = _program("gather_nd", [x.shape, i.shape], ["float64", "int64"])
    with pytest.raises(cl.IndexOutOfRangeError) as want:
        cl.compile(p)(x=x, i=i)
    with pytest.raises(cl.IndexOutOfRangeError) as got:
        cdask.run(p, x=_chunked(x, (5, 7)), i=_chunked(i, (8, 2))).compute()
    assert str(got.value) == str(want.value)


def test_batch_dims_runs_as_one_block(client):
    x = RNG.standard_normal((6, 10, 3))
    i = RNG.integers(0, 10, (6, 4))
    p = _program("take", [x.shape, i.shape], ["float64", "int64"], axis=1, batch_dims=1)
    got = cdask.run(p, x=_chunked(x, (2, 5, 3)), i=_chunked(i, (3, 2))).compute()
    np.testing.assert_array_equal(got, ref.take(x, i, axis=1, batch_dims=1))


def test_message_passing_chain_with_elementwise(client):
    """gather rows by source, scale, scatter-add by destination: a graph network's step."""
    b = cl.NetBuilder("mp")
    x = b.create_input("float32", ("N", 8), "x")
    src = b.create_input("int64", ("E",), "src")
    dst = b.create_input("int64", ("E", 8), "dst")
    w = b.create_input("float32", ("E", 1), "w")
    msg = b.multiply(b.take(x, src), w)
    out = b.scatter(b.fill_constant(("N", 8), 0.0, "float32"), dst, msg, reduce="add")
    p = b.build([out])
    X = RNG.standard_normal((70, 8)).astype(np.float32)
    S, D = RNG.integers(0, 70, 300), RNG.integers(0, 70, 300)
    W = RNG.standard_normal((300, 1)).astype(np.float32)
    got = cdask.run(p, x=_chunked(X, (20, 8)), src=_chunked(S, 64), dst=_chunked(np.repeat(D[:, None], 8, 1), (64, 8)),
                    w=_chunked(W, (64, 1))).compute()
    want = np.zeros((70, 8), np.float32)
    np.add.at(want, D, X[S] * W)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_out_of_range_raises_with_the_global_position(client):
    x = RNG.standard_normal((30, 2))
    i = RNG.integers(0, 30, 40)
    i[23], i[31] = 30, -31
    p = _program("take", [x.shape, i.shape], ["float64", "int64"])
    out = cdask.run(p, x=_chunked(x, (8, 2)), i=_chunked(i, 10))
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        out.compute()
    assert info.value.position == (23,) and info.value.value == 30 and info.value.size == 30
    with pytest.raises(cl.IndexOutOfRangeError) as want:
        cl.compile(p)(x=x, i=i)
    assert str(info.value) == str(want.value)
    s = np.ones((40, 2))
    p = _program("scatter", [x.shape, (40, 2), s.shape], ["float64", "int64", "float64"], reduce="add")
    out = cdask.run(p, x=_chunked(x, (8, 2)), i=_chunked(np.repeat(i[:, None], 2, 1), (10, 2)), s=_chunked(s, (10, 2)))
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        out.compute()
    assert info.value.position == (23, 0)


def test_threaded_scheduler_without_a_client_and_numpy_inputs():
    x = RNG.standard_normal((30, 4))
    i = RNG.integers(0, 30, 50)
    p = _program("take", [x.shape, i.shape], ["float64", "int64"])
    out = cdask.run(p, x=x, i=_chunked(i, 9))
    np.testing.assert_array_equal(out.compute(scheduler="threads"), x[i])


def test_building_computes_nothing():
    """An index array whose computation fails: building the result must not touch it."""
    def explode(block):
        raise AssertionError("an index chunk was computed while the graph was built")
    x = RNG.standard_normal((30, 4))
    i = da.from_array(np.zeros(50, np.int64), chunks=10).map_blocks(explode, dtype=np.int64)
    p = _program("take", [x.shape, i.shape], ["float64", "int64"])
    out = cdask.run(p, x=_chunked(x, (10, 4)), i=i)  # must not raise
    assert out.shape == (50, 4)
    with pytest.raises(AssertionError):
        out.compute(scheduler="sync")


def test_one_compile_serves_every_chunk_size(tmp_path, monkeypatch):
    """Chunks of many sizes run on one shape-generic program per node, not one compile each."""
    from cinnlite.backends.registry import get_backend
    from cinnlite.runtime import cache as caches
    monkeypatch.setenv("CINNLITE_CACHE_DIR", str(tmp_path))
    caches.MEMORY.clear()
    backend = get_backend("cpu")
    built = []
    original = backend.build
    monkeypatch.setattr(backend, "build", lambda job: built.append(1) or original(job))
    x = RNG.standard_normal((97, 3))
    i = RNG.integers(0, 97, 211)
    p = _program("take", [x.shape, i.shape], ["float64", "int64"])
    out = cdask.run(p, x=_chunked(x, (11, 3)), i=_chunked(i, 13))
    np.testing.assert_array_equal(out.compute(scheduler="sync"), x[i])
    first = len(built)
    assert first <= 4, f"{first} compiles for {9 * 17} (table, index) chunk pairs"
    out = cdask.run(p, x=_chunked(x, (5, 3)), i=_chunked(i, 7))  # other chunk sizes, many more chunks
    np.testing.assert_array_equal(out.compute(scheduler="sync"), x[i])
    assert len(built) == first, "new chunk sizes compiled again"


def test_bad_inputs_are_clear_errors():
    p = _program("take", [(10, 2), (5,)], ["float64", "int64"])
    with pytest.raises(cl.InputError):
        cdask.run(p, x=np.zeros((10, 2)))
    with pytest.raises(cl.InputTypeError):
        cdask.run(p, x=np.zeros((10, 2), np.float32), i=np.zeros(5, np.int64))
    with pytest.raises(cl.InputError):
        cdask.run(p, x=np.zeros((10, 2)), i=np.zeros(5, np.int64), j=1)
    with pytest.raises(cl.InputError, match="shape"):
        cdask.run(p, x=np.zeros((10, 3)), i=np.zeros(5, np.int64))
    with pytest.raises(cl.InputError, match="shape"):
        cdask.run(p, x=np.zeros((10, 2)), i=np.zeros((5, 1), np.int64))
    b = cl.NetBuilder("g")
    b.gather(b.create_input("float64", ("N", "F"), "x"), b.create_input("int64", ("M", "G"), "i"))
    with pytest.raises(cl.ValidationError, match="index.shape"):  # a rule the sizes break: the operator's error
        cdask.run(b.build(), x=np.zeros((10, 2)), i=np.zeros((4, 3), np.int64))


def _message_passing(reduce="add", take_mode="raise", weights=("E", 1), nd=True, outputs_messages=False):
    b = cl.NetBuilder("mp")
    x = b.create_input("float64", ("N", 6), "x")
    src = b.create_input("int64", ("E",), "src")
    w = b.create_input("float64", weights, "w")
    msg = b.multiply(b.take(x, src, mode=take_mode), w)
    zeros = b.fill_constant(("N", 6), 0.0, "float64")
    if nd:
        out = b.scatter_nd(zeros, b.create_input("int64", ("E", 1), "dst"), msg, reduce=reduce)
    else:
        out = b.scatter(zeros, b.create_input("int64", ("E", 6), "dst"), msg, reduce=reduce)
    return b.build([out, msg] if outputs_messages else [out])


def _mp_inputs(e=400, n=50, weights=(400, 1), nd=True):
    x = RNG.standard_normal((n, 6))
    src = RNG.integers(0, n, e)
    dst = RNG.integers(0, n, (e, 1)) if nd else np.repeat(RNG.integers(0, n, (e, 1)), 6, axis=1)
    return {"x": x, "src": src, "w": RNG.standard_normal(weights), "dst": dst}


def _chunks(arrays, rows=64):
    return {k: _chunked(v, (13, 6) if k == "x" else (rows,) + v.shape[1:]) for k, v in arrays.items()}


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("nd", [True, False])
def test_fused_message_passing_equals_the_program(client, reduce, nd):
    """gather -> multiply -> scatter runs as one compiled program per update block: the messages
    are never an array of the graph, and the result is the one-machine program's."""
    p = _message_passing(reduce, nd=nd)
    arrays = _mp_inputs(nd=nd)
    out = cdask.run(p, **_chunks(arrays))
    assert not any("cinnlite-take" in str(k) or "cinnlite-multiply" in str(k) for k in out.__dask_graph__())
    np.testing.assert_allclose(out.compute(), cl.compile(p)(**arrays), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("take_mode", ["wrap", "clip", "fill"])
def test_fused_chain_keeps_the_take_mode_and_broadcast_operands(client, take_mode):
    p = _message_passing("add", take_mode=take_mode, weights=(6,))
    arrays = _mp_inputs(weights=(6,))
    arrays["src"] = RNG.integers(-80, 80, 400)
    out = cdask.run(p, **_chunks(arrays))
    np.testing.assert_allclose(out.compute(), cl.compile(p)(**arrays), rtol=1e-12)


def test_fused_chain_reports_a_bad_gather_index_globally(client):
    p = _message_passing("add")
    arrays = _mp_inputs()
    arrays["src"][301] = 50
    with pytest.raises(cl.IndexOutOfRangeError) as want:
        cl.compile(p)(**arrays)
    with pytest.raises(cl.IndexOutOfRangeError) as got:
        cdask.run(p, **_chunks(arrays)).compute()
    assert str(got.value) == str(want.value) and got.value.position == (301,)


def test_messages_that_are_also_an_output_are_not_fused(client):
    p = _message_passing("add", outputs_messages=True)
    arrays = _mp_inputs()
    out, msg = cdask.run(p, **_chunks(arrays))
    want_out, want_msg = cl.compile(p)(**arrays)
    np.testing.assert_allclose(out.compute(), want_out, rtol=1e-12)
    np.testing.assert_array_equal(msg.compute(), want_msg)
