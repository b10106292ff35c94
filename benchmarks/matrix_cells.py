"""The cells of the benchmark matrix (``matrix.py``) and every implementation of a cell.

A cell is one operator on one kind of work: which axis it indexes (first, middle, last, or the
flattened array), the data dtype, the index dtype, the number of elements it produces (gathers)
or combines (scatters), the index mode, the reduction, and the shape's extents: powers of two,
or ``odd`` (the indexed axis about three quarters of that plus one, rows of 61 or 7 elements,
inner slices of 13: no extent a power of two, none a multiple of a vector's lanes).
``matrix_cells`` walks the matrix as a covering design: every factor is varied against a common
base (float32 data, int64 indices, a million elements, valid indices, power-of-two extents), and
the sizes are swept from 64 elements to about 100 MB of output for every operator, since a full
cartesian product would take hours on two cores.

``build_case`` turns a cell into arrays, a numpy reference and the implementations: cinnlite's
compiled program and every peer that has the operation (numpy, PyTorch, Apache TVM with a
parallel, vectorised hand schedule). Every implementation writes into a preallocated output,
cinnlite included (``exe(..., out=)``), so that none pays for page faults the others skip.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import libraries
from arrays import aligned, aligned_empty
from tvm_driver import tvm_peer
from workloads import cinnlite_compile

BASE_ELEMENTS = 1 << 20
SIZES = (64, 1 << 10, 1 << 14, 1 << 18, 1 << 22, 25 << 20)
DTYPES = ("float16", "float32", "float64", "int32", "int64")
REDUCES = ("none", "add", "max", "min", "mean", "mul")
DUPLICATES = 8  # updates per target row in the scatters that reduce


@dataclass(frozen=True)
class Cell:
    op: str
    axis: str  # take/gather: first | middle | last | flat; gather_nd: slices | elements | batch
    dtype: str = "float32"
    index_dtype: str = "int64"
    elements: int = BASE_ELEMENTS
    mode: str = "raise"
    reduce: str = "-"
    extents: str = "pow2"  # pow2 | odd (see the module's docstring)

    @property
    def label(self) -> str:
        parts = [self.op, self.axis, self.dtype, "i" + self.index_dtype[3:], _size_text(self.elements)]
        if self.mode != "raise":
            parts.append(self.mode)
        if self.reduce != "-":
            parts.append(self.reduce)
        if self.extents != "pow2":
            parts.append(self.extents)
        return " ".join(parts)


def _size_text(n: int) -> str:
    for unit, scale in (("M", 1 << 20), ("k", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def matrix_cells(quick: bool = False) -> list[Cell]:
    """Every cell, in a stable order. ``quick``: sizes up to 4M elements only."""
    sizes = [s for s in SIZES if not quick or s <= 1 << 22]
    cells: list[Cell] = []

    def add(*new):
        cells.extend(c for c in new if c not in cells)

    for op, axes in (("take", ("first", "middle", "last", "flat")), ("gather", ("first", "middle", "last")),
                     ("gather_nd", ("slices", "elements", "batch"))):
        for axis in axes:
            add(*(Cell(op, axis, dtype) for dtype in DTYPES))
            add(Cell(op, axis, index_dtype="int32"))
        add(*(Cell(op, axes[0], elements=s) for s in sizes))
        add(*(Cell(op, axes[-1], elements=s) for s in sizes))
    add(Cell("take", "first", "float16", "int32"))  # an embedding lookup: half table, int32 ids
    for axis in ("first", "flat"):
        add(*(Cell("take", axis, mode=mode) for mode in ("clip", "wrap")))
    for op, axes in (("scatter", ("first", "last")), ("scatter_nd", ("slices",))):
        for axis in axes:
            add(*(Cell(op, axis, reduce=r) for r in REDUCES))
        add(*(Cell(op, axes[0], dtype, reduce="add") for dtype in DTYPES))
        add(Cell(op, axes[0], index_dtype="int32", reduce="add"))
        add(*(Cell(op, axes[0], elements=s, reduce="add") for s in sizes))
    add(*_odd_cells())
    return cells


def _odd_cells() -> list[Cell]:
    """The base cell of every operator and axis with odd extents, and the modes that resolve
    an index against the axis's size (``clip``, ``wrap``) on an odd axis."""
    gathers = [Cell(op, axis, extents="odd") for op, axes in (
        ("take", ("first", "middle", "last", "flat")), ("gather", ("first", "middle", "last")),
        ("gather_nd", ("slices", "elements", "batch"))) for axis in axes]
    scatters = [Cell(op, axis, reduce="add", extents="odd")
                for op, axes in (("scatter", ("first", "last")), ("scatter_nd", ("slices",))) for axis in axes]
    modes = [Cell("take", "first", mode=mode, extents="odd") for mode in ("clip", "wrap")]
    return gathers + scatters + modes


# -- shapes and data ----------------------------------------------------------------------------


def _layout(cell: Cell):
    """(x shape, index shape, indexed axis, indexed extent) for a cell. The indexed extent is
    about half the index count for gathers (rows are read about twice) and an eighth of it for
    scatters that reduce (``DUPLICATES`` updates per target), the whole count for ``none``."""
    n_out, odd = cell.elements, cell.extents == "odd"
    wide = (61 if odd else 64) if n_out >= 1 << 12 else (7 if odd else 8)
    outer, inner = (7, 13) if odd else (8, 16)
    if cell.op in ("scatter", "scatter_nd"):
        shrink = 1 if cell.reduce == "none" else DUPLICATES
    else:
        shrink = 2

    def indexed(n):  # the indexed extent: n, or an odd one near it
        return n - n // 4 + 1 if odd and n >= 4 else n
    if cell.axis in ("first", "slices"):
        m = max(1, n_out // wide)
        n = indexed(max(1, m // shrink))
        if cell.op == "take":
            return (n, wide), (m,), 0, n
        if cell.op in ("gather", "scatter"):
            return (n, wide), (m, wide), 0, n
        return (n, wide), (m, 1), 0, n  # gather_nd / scatter_nd slices
    if cell.axis == "middle":
        m = max(1, n_out // (outer * inner))
        n = indexed(max(1, m // shrink))
        if cell.op == "take":
            return (outer, n, inner), (m,), 1, n
        return (outer, n, inner), (outer, m, inner), 1, n
    if cell.axis == "last":
        m = max(1, n_out // wide)
        n = indexed(max(1, m // shrink))
        if cell.op == "take":
            return (wide, n), (m,), 1, n
        return (wide, n), (wide, m), 1, n
    if cell.axis == "flat":
        n = indexed(max(1, n_out // shrink))
        return (n,), (n_out,), None, n
    if cell.axis == "elements":
        n = indexed(max(1, n_out // 64))
        return (n, 61 if odd else 64), (n_out, 2), None, n
    if cell.axis == "batch":
        m = max(1, n_out // (outer * inner))
        n = indexed(max(1, m // shrink))
        return (outer, n, inner), (outer, m, 1), 1, n
    raise ValueError(cell.axis)


def _data(rng, shape, dtype: str) -> np.ndarray:
    kind = np.dtype(dtype).kind
    values = rng.integers(-50, 50, size=shape) if kind == "i" else rng.random(shape) * 4 - 2
    return aligned(values.astype(dtype))


def _indices(rng, cell: Cell, shape, n: int) -> np.ndarray:
    """Valid indices for ``raise``; a third of them past either end for ``clip`` and ``wrap``;
    for a scatter without reduction, a permutation in every column (no two updates of a target,
    whose order PyTorch leaves undefined)."""
    if cell.mode in ("clip", "wrap"):
        values = rng.integers(-n, 2 * n, size=shape)
    elif cell.reduce == "none":
        perm = rng.permutation(shape[cell_axis(cell)] if cell.op == "scatter" else shape[0])
        if cell.op == "scatter" and cell_axis(cell) == 1:
            values = (perm[None, :] + np.arange(shape[0])[:, None]) % n
        else:
            values = (perm.reshape((-1,) + (1,) * (len(shape) - 1)) + np.arange(int(np.prod(shape[1:])))
                      .reshape(shape[1:])) % n
    else:
        values = rng.integers(0, n, size=shape)
    return aligned(values.astype(cell.index_dtype))


def cell_axis(cell: Cell):
    return _layout(cell)[2]


@dataclass
class Case:
    cell: Cell
    arrays: dict
    out_shape: tuple
    reference: np.ndarray
    bytes_moved: int
    impls: list = field(default_factory=list)  # (name, factory) pairs


def build_case(cell: Cell, rng, threads: int) -> Case:
    x_shape, index_shape, axis, n = _layout(cell)
    x = _data(rng, x_shape, cell.dtype)
    if cell.axis == "elements":
        index = np.stack([rng.integers(0, x_shape[0], index_shape[0]),
                          rng.integers(0, x_shape[1], index_shape[0])], axis=1)
        index = aligned(index.astype(cell.index_dtype))
    else:
        index = _indices(rng, cell, index_shape, n)
    arrays = {"x": x, "index": index}
    if cell.op in ("scatter", "scatter_nd"):
        src_shape = index_shape if cell.op == "scatter" else index_shape[:1] + x_shape[1:]
        arrays["src"] = _data(rng, src_shape, cell.dtype)
    reference = REFERENCES[cell.op](cell, axis, **arrays)
    nbytes = reference.nbytes + index.nbytes + (reference.nbytes if cell.op in GATHERS else
                                                 arrays["src"].nbytes + reference.nbytes)
    case = Case(cell, arrays, reference.shape, reference, nbytes)
    case.impls = [("cinnlite", lambda: cinnlite_impl(case, axis, threads))]
    case.impls += [(name, factory) for name, factory in PEERS[cell.op](case, axis, threads)
                   if libraries.available(name)]
    return case


GATHERS = ("take", "gather", "gather_nd")


# -- references (numpy, written for clarity, not speed) -----------------------------------------


def _take_ref(cell, axis, x, index):
    if cell.mode == "raise":
        return np.take(x, index, axis=axis)
    return np.take(x, index, axis=axis, mode=cell.mode)


def _gather_ref(cell, axis, x, index):
    return np.take_along_axis(x, index.astype(np.int64), axis=axis)


def _gather_nd_ref(cell, axis, x, index):
    index = index.astype(np.int64)
    if cell.axis == "slices":
        return x[index[:, 0]]
    if cell.axis == "elements":
        return x[index[:, 0], index[:, 1]]
    return x[np.arange(x.shape[0])[:, None], index[..., 0]]  # batch_dims=1


UFUNCS = {"add": np.add, "max": np.maximum, "min": np.minimum, "mul": np.multiply}


def _scatter_positions(cell, axis, index):
    """The numpy fancy-index tuple of every update's target."""
    index = index.astype(np.int64)
    if cell.op == "scatter_nd":
        return (index[:, 0],)
    grids = list(np.indices(index.shape, sparse=True))
    grids[axis] = index
    return tuple(grids)


def _scatter_ref(cell, axis, x, index, src):
    pos = _scatter_positions(cell, axis, index)
    if cell.reduce == "none":
        out = x.copy()
        out[pos] = src
        return out
    if cell.reduce == "mean":
        wide = np.float64 if x.dtype.kind == "f" else np.int64
        total, count = x.astype(wide), np.ones(x.shape, np.int64)
        np.add.at(total, pos, src.astype(wide))
        np.add.at(count, pos, 1)
        mean = total / count
        return (mean if x.dtype.kind == "f" else np.floor(mean)).astype(x.dtype)
    out = x.copy()
    UFUNCS[cell.reduce].at(out, pos, src)
    return out


REFERENCES = {"take": _take_ref, "gather": _gather_ref, "gather_nd": _gather_nd_ref,
              "scatter": _scatter_ref, "scatter_nd": _scatter_ref}


# -- implementations ----------------------------------------------------------------------------


@dataclass
class Impl:
    name: str
    run: object
    result: object  # the last result as a numpy array, for the check
    note: str = ""


def cinnlite_program(cell: Cell, axis, arrays: dict):
    import cinnlite as cl

    b = cl.NetBuilder("cell")
    x = b.create_input(arrays["x"].dtype, arrays["x"].shape, "x")
    index = b.create_input(arrays["index"].dtype, arrays["index"].shape, "index")
    if cell.op == "take":
        b.take(x, index, axis=axis, mode=cell.mode)
    elif cell.op == "gather":
        b.gather(x, index, axis=axis, mode=cell.mode)
    elif cell.op == "gather_nd":
        b.gather_nd(x, index, batch_dims=1 if cell.axis == "batch" else 0, mode=cell.mode)
    else:
        src = b.create_input(arrays["src"].dtype, arrays["src"].shape, "src")
        if cell.op == "scatter":
            b.scatter(x, index, src, axis=axis, reduce=cell.reduce, mode=cell.mode)
        else:
            b.scatter_nd(x, index, src, reduce=cell.reduce, mode=cell.mode)
    return b.build()


def cinnlite_impl(case: Case, axis, threads: int) -> Impl:
    exe = cinnlite_compile(cinnlite_program(case.cell, axis, case.arrays), threads)
    out = aligned_empty(case.out_shape, case.reference.dtype)
    arrays = case.arrays
    return Impl("cinnlite", lambda: exe(out=out, **arrays), lambda: out, "exe(out=)")


def _numpy_out(case):
    return aligned_empty(case.out_shape, case.reference.dtype)


def take_peers(case: Case, axis, threads: int):
    x, index, cell = case.arrays["x"], case.arrays["index"], case.cell
    mode = "clip" if cell.mode == "raise" else cell.mode  # all valid: clip avoids numpy's buffering

    def numpy_impl():
        out = _numpy_out(case)
        return Impl("numpy", lambda: np.take(x, index, axis=axis, out=out, mode=mode), lambda: out,
                    f"np.take(out=, mode={mode!r})")

    def torch_impl():
        torch = libraries.torch
        xt, it = torch.from_numpy(x), torch.from_numpy(index)
        if axis is None:
            xt = xt.reshape(-1)
        out = torch.empty(case.out_shape, dtype=xt.dtype)
        return Impl("torch", lambda: torch.index_select(xt, axis or 0, it, out=out), out.numpy,
                    "index_select(out=)")

    def tvm_impl():
        from tvm import topi
        tvm_mode = "fast" if cell.mode == "raise" else cell.mode
        return _tvm_impl(lambda a, i: topi.take(a, i, axis=axis, mode=tvm_mode), [x, index], case, threads,
                         f"topi.take mode={tvm_mode}")

    peers = [("numpy", numpy_impl), ("tvm", tvm_impl)]
    if cell.mode == "raise":
        peers.append(("torch", torch_impl))
    return peers


def _tvm_impl(make_op, arrays, case, threads, note):
    run, result, schedule = tvm_peer(make_op, arrays, case.out_shape, case.reference.dtype, threads)
    return Impl("tvm", run, result, f"{note}, {schedule}")


def gather_peers(case: Case, axis, threads: int):
    x, index = case.arrays["x"], case.arrays["index"]

    def numpy_impl():
        # take_along_axis has no out=: it allocates, like its users do.
        return Impl("numpy", lambda: np.take_along_axis(x, index, axis=axis), None, "take_along_axis")

    def torch_impl():
        torch = libraries.torch
        xt, it = torch.from_numpy(x), torch.from_numpy(index)
        out = torch.empty(case.out_shape, dtype=xt.dtype)
        return Impl("torch", lambda: torch.gather(xt, axis, it, out=out), out.numpy, "gather(out=)")

    def tvm_impl():
        from tvm import topi
        return _tvm_impl(lambda a, i: topi.gather(a, axis, i), [x, index], case, threads, "topi.gather")

    peers = [("numpy", numpy_impl), ("tvm", tvm_impl)]
    if index.dtype == np.int64:  # torch.gather takes int64 indices only
        peers.append(("torch", torch_impl))
    return peers


def gather_nd_peers(case: Case, axis, threads: int):
    x, index, cell = case.arrays["x"], case.arrays["index"], case.cell

    def numpy_impl():
        if cell.axis == "slices":
            out = _numpy_out(case)
            return Impl("numpy", lambda: np.take(x, index[:, 0], axis=0, out=out, mode="clip"), lambda: out,
                        "np.take(x, index[:, 0], out=)")
        if cell.axis == "elements":
            return Impl("numpy", lambda: x[index[:, 0], index[:, 1]], None, "x[index[:, 0], index[:, 1]]")
        rows = np.arange(x.shape[0])[:, None]
        return Impl("numpy", lambda: x[rows, index[..., 0]], None, "x[arange[:, None], index[..., 0]]")

    def torch_impl():
        torch = libraries.torch
        xt, it = torch.from_numpy(x), torch.from_numpy(index)
        if cell.axis == "slices":
            out = torch.empty(case.out_shape, dtype=xt.dtype)
            col = it[:, 0].contiguous()
            return Impl("torch", lambda: torch.index_select(xt, 0, col, out=out), out.numpy,
                        "index_select(index[:, 0], out=)")
        if cell.axis == "elements":
            return Impl("torch", lambda: xt[it[:, 0], it[:, 1]], None, "x[index[:, 0], index[:, 1]]")
        rows = torch.arange(x.shape[0])[:, None]
        return Impl("torch", lambda: xt[rows, it[..., 0]], None, "x[arange[:, None], index[..., 0]]")

    def tvm_impl():
        from tvm import topi
        moved = aligned(np.moveaxis(index, -1, 0))  # topi takes the tuples along the first axis
        batch = 1 if cell.axis == "batch" else 0
        return _tvm_impl(lambda a, i: topi.gather_nd(a, i, batch_dims=batch), [x, moved], case, threads,
                         "topi.gather_nd (index transposed once, untimed)")

    return [("numpy", numpy_impl), ("torch", torch_impl), ("tvm", tvm_impl)]


TORCH_REDUCE = {"max": "amax", "min": "amin", "mean": "mean", "mul": "prod"}
#: PyTorch's in-place methods for (none, add, the other reductions): along an axis of elements
#: (scatter), and of whole rows (scatter_nd: index_*).
TORCH_METHODS = {"scatter": ("scatter_", "scatter_add_", "scatter_reduce_"),
                 "scatter_nd": ("index_copy_", "index_add_", "index_reduce_")}


def torch_scatter(cell: Cell, axis, x, index, src):
    """PyTorch's version of a scatter cell on tensors of any device: ``(run, out, note)``, where
    ``run()`` copies ``x`` into the preallocated ``out`` and scatters into it in place."""
    out = x.new_empty(x.shape)
    if cell.op == "scatter_nd":
        index = index[:, 0].contiguous()
    update, note = _torch_update(cell, 0 if cell.op == "scatter_nd" else axis, out, index, src)

    def run():
        out.copy_(x)
        update()
        return out
    return run, out, "copy_ + " + note


def scatter_peers(case: Case, axis, threads: int):
    x, index, src, cell = case.arrays["x"], case.arrays["index"], case.arrays["src"], case.cell
    pos = _scatter_positions(cell, axis, index)

    def numpy_impl():
        out = _numpy_out(case)
        if cell.reduce == "none":
            def run():
                np.copyto(out, x)
                out[pos] = src
        else:
            ufunc = UFUNCS[cell.reduce]

            def run():
                np.copyto(out, x)
                ufunc.at(out, pos, src)
        return Impl("numpy", run, lambda: out, "copyto + " + ("out[pos] = src" if cell.reduce == "none"
                                                              else f"np.{UFUNCS[cell.reduce].__name__}.at"))

    def torch_impl():
        torch = libraries.torch
        run, out, note = torch_scatter(cell, axis, torch.from_numpy(x), torch.from_numpy(index), torch.from_numpy(src))
        return Impl("torch", run, out.numpy, note)

    peers = [("numpy", numpy_impl)] if cell.reduce != "mean" else []
    if index.dtype == np.int64:  # torch's scatter and index_* take int64 indices only
        peers.append(("torch", torch_impl))
    return peers


def _torch_update(cell, axis, out, it, st):
    """The PyTorch call that does the cell's update of ``out`` in place, and its name."""
    none, add, reduce = TORCH_METHODS[cell.op]
    if cell.reduce == "none":
        return (lambda: getattr(out, none)(axis, it, st)), none
    if cell.reduce == "add":
        return (lambda: getattr(out, add)(axis, it, st)), add
    name = TORCH_REDUCE[cell.reduce]
    return (lambda: getattr(out, reduce)(axis, it, st, name, include_self=True)), f"{reduce}({name!r})"


PEERS = {"take": take_peers, "gather": gather_peers, "gather_nd": gather_nd_peers,
         "scatter": scatter_peers, "scatter_nd": scatter_peers}
