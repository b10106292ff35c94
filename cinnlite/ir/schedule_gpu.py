"""GPU passes over the loop-nest IR: how scatter updates run in parallel, and the GPU schedule.

After these passes every top-level statement of a kernel is one GPU launch: a chain of loops
of kind ``gpu.grid`` (collapsed by the CUDA renderer into one flat, 64-bit, grid-stride loop over
blocks x threads) around a body that may hold serial loops. On the GPU a :class:`Reduce` is an
atomic read-combine-write and a :class:`Store` a plain one. A scatter's update nest runs one of
three ways:

- **ordered** (:func:`order_update_nests`): a loop variable that is a whole coordinate of every
  target separates the targets (two updates with different values of it never touch one
  element), so those loops run in parallel and the others serially inside each thread, in
  row-major order, exactly as on the CPU: no atomics, no scratch buffer, deterministic, and the
  last update wins. Chosen when each thread's serial chain is short, always for a complex
  ``mul`` (no atomic can multiply both parts at once), and always for float and complex
  reductions with ``deterministic=True``.
- **winner** (:func:`scatter_last_write_wins`), for ``reduce="none"`` otherwise: every target
  element gets a winner, the largest row-major position of the updates that hit it (an atomic
  max over all updates in parallel), and then only the winner writes.
- **atomic**, for ``add``/``mul``/``max``/``min`` otherwise: the ``Reduce`` stays, and the
  renderer makes it an atomic update (a complex add: one atomic add per part). Integer results
  do not depend on the order; float and complex ones may, which is what ``deterministic=True``
  is for.

Symbolic sizes (``cinnlite.ir.symbolic``): a loop extent or a buffer size may be an int64
expression over the symbol buffers, known only per call. The passes never need its value: a
winner buffer is int64 whenever the update count is symbolic, launches merge when their grid
extents are the same expressions, and the cost decisions (:func:`prefer_ordered`) count every
symbol as ``SYMBOLIC_SIZE_ESTIMATE`` (2**20; so ``64*E`` counts as 2**26): large, since a size
left open is usually one that grows with the data.

``GPU_PIPELINE`` and ``GPU_PIPELINE_DETERMINISTIC`` in ``cinnlite/backends/gpu.py`` list the
passes, as ``CPU_PIPELINE`` in ``cinnlite/backends/cpu.py`` does for the CPU; the CPU's
counterpart of this module is ``schedule_cpu.py``.
"""
from __future__ import annotations

from dataclasses import replace

from ..dtypes import int32, int64
from ..errors import CompileError
from .loopnest import (Binary, Buffer, Cast, Cmp, Const, For, If, Kernel, Load, Reduce,
                       ReportIndexError, Seq, Store, Var, as_expr, const)
from .passes import verify
from .transform import (build_nest, flat_position, map_stmt, perfect_nest, sequence, stmt_exprs, substitute,
                        top_level, walk_expr, walk_stmt)

GRID = "gpu.grid"

# -- helpers ------------------------------------------------------------------------------------


def grid_chain(stmt):
    """The leading ``gpu.grid`` loops of a launch and the body inside them."""
    loops = []
    while isinstance(stmt, For) and stmt.kind == GRID:
        loops.append(stmt)
        stmt = stmt.body
    return loops, stmt


#: What a symbol counts as where a pass weighs sizes (see the module docstring).
SYMBOLIC_SIZE_ESTIMATE = 2**20


def size_estimate(size) -> int:
    """A number for a size in cost decisions: the size itself when it is an int or a constant;
    for the int64 expression of a symbolic size, its value with every symbol (every load of a
    symbol buffer) counted as ``SYMBOLIC_SIZE_ESTIMATE``. At least 1 for a symbolic size."""
    if isinstance(size, int):
        return size
    if isinstance(size, Const):
        return int(size.value)
    if isinstance(size, Binary) and size.op in ("add", "sub", "mul", "min", "max"):
        a, b = size_estimate(size.a), size_estimate(size.b)
        value = {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}[size.op]
        return max(1, value)
    return SYMBOLIC_SIZE_ESTIMATE  # a symbol, or anything else a pass cannot weigh


def _is_static(loops) -> bool:
    return all(isinstance(l.extent, Const) for l in loops)


def _update_nest(kernel, stmt, what):
    """``stmt`` as a perfect nest of serial loops around a body without loops, or an error."""
    loops, body = perfect_nest(stmt)
    if any(isinstance(s, For) for s in walk_stmt(body)) or any(l.kind != "serial" for l in loops):
        raise CompileError(f"GPU schedule, kernel {kernel.name}: {what} must be a perfect serial loop nest")
    return loops, body


def _fresh_name(base: str, taken: set) -> str:
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}{n}"
    taken.add(name)
    return name


def _buffer_names(kernel) -> set:
    return {b.name for b in kernel.params} | {t.name for t in kernel.temps}


# -- scatter_last_write_wins ----------------------------------------------------------------------


def scatter_last_write_wins(kernel: Kernel) -> Kernel:
    """Rewrite every update nest that holds ``Reduce(combine="none")`` into three nests:

    1. ``winner[t] = -1`` for every target element ``t``;
    2. over the updates, in parallel: ``winner[target] = max(winner[target], position)`` (atomic);
    3. over the updates, in parallel: ``if winner[target] == position: out[target] = value``.

    ``position`` is the update's row-major position, so the winner is the last update in
    row-major order, whatever order the GPU runs them in. The winner buffer is int32 when every
    position fits, int64 otherwise (always when the number of updates is symbolic).
    """
    stmts, temps = [], list(kernel.temps)
    taken = _buffer_names(kernel)
    changed = False
    for stmt in top_level(kernel.body):
        nones = [s for s in walk_stmt(stmt) if isinstance(s, Reduce) and s.combine == "none"]
        if not nones:
            stmts.append(stmt)
            continue
        changed = True
        loops, body = _update_nest(kernel, stmt, "a scatter update")
        wdtype = int32 if _is_static(loops) and _extent(loops) <= 2**31 - 1 else int64
        position = flat_position([l.var for l in loops], [l.extent for l in loops])
        wpos = position if wdtype == int64 else Cast(int32, position)
        winners = {}
        for r in nones:
            if r.buffer.name not in winners:
                name = _fresh_name(f"{r.buffer.name}__winner", taken)
                winners[r.buffer.name] = Buffer(name, wdtype, r.buffer.shape)
        for w in winners.values():
            unit = [isinstance(d, int) and d == 1 for d in w.shape]
            zs = [const(0) if u else Var(f"z{k}") for k, u in enumerate(unit)]
            init = Store(w, tuple(zs), const(-1, wdtype))
            loops_w = [For(z, as_expr(d), None) for z, d, u in zip(zs, w.shape, unit) if not u]
            stmts.append(build_nest(loops_w, init))
            temps.append(w)

        def claim(s):
            if isinstance(s, Reduce) and s.combine == "none":
                return Reduce(winners[s.buffer.name], s.indices, wpos, "max")
            return s

        def write(s):
            if isinstance(s, Reduce) and s.combine == "none":
                won = Cmp("eq", Load(winners[s.buffer.name], s.indices), wpos)
                return If(won, Store(s.buffer, s.indices, s.value))
            return s

        stmts.append(build_nest(loops, map_stmt(body, None, claim)))
        stmts.append(build_nest(loops, map_stmt(body, None, write)))
    if not changed:
        return kernel
    return replace(kernel, body=sequence(stmts), temps=tuple(temps))


# -- order_update_nests ---------------------------------------------------------------------------

#: An update nest runs ordered when each thread's serial chain is at most this long, or at most
#: 1/65536 of the output a winner buffer would cover (updates are then few for the output).
ORDERED_MAX_SERIAL = 16
#: ... or when it has at least this many independent chains, none longer than 1024 updates.
ORDERED_MIN_PARALLEL = 2**16


def _split_update_nest(kernel, stmt):
    """(separating loops, serial loops, body, reduces) of an update nest."""
    loops, body = _update_nest(kernel, stmt, "a scatter update")
    reduces = [s for s in walk_stmt(body) if isinstance(s, Reduce)]
    owns = [l for l in loops if all(any(ix == l.var for ix in r.indices) for r in reduces)]
    return owns, [l for l in loops if l not in owns], body, reduces


def _extent(loops) -> int:
    """The number of iterations of ``loops``, a symbolic extent counted by :func:`size_estimate`."""
    total = 1
    for loop in loops:
        total *= size_estimate(loop.extent)
    return total


def prefer_ordered(parallel: int, serial: int, output_size: int) -> bool:
    """Whether an update nest with ``parallel`` independent chains of ``serial`` updates into
    an output of ``output_size`` elements runs faster ordered than with a winner or atomics.
    The numbers are estimates where a size is symbolic (:func:`size_estimate`)."""
    if serial <= max(ORDERED_MAX_SERIAL, output_size // 65536):
        return True
    return parallel >= ORDERED_MIN_PARALLEL and serial <= 1024


def _ordered(kernel, stmt):
    owns, serial, body, _ = _split_update_nest(kernel, stmt)

    def read_combine_write(s):
        if isinstance(s, Reduce):
            if s.combine == "none":
                return Store(s.buffer, s.indices, s.value)
            return Store(s.buffer, s.indices, Binary(s.combine, Load(s.buffer, s.indices), s.value))
        return s

    nest = build_nest(serial, map_stmt(body, None, read_combine_write))
    if owns:
        return build_nest([replace(l, kind=GRID) for l in owns], nest)
    return For(Var("g0"), const(1), nest, GRID)


def _must_order(r: Reduce, always_floats: bool) -> bool:
    """Whether ``r`` must run ordered: a complex multiply always (there is no atomic one: its
    parts depend on each other), and with ``always_floats`` every float or complex reduction."""
    if r.combine == "none":
        return False
    if r.buffer.dtype.is_complex and r.combine == "mul":
        return True
    return always_floats and (r.buffer.dtype.is_float or r.buffer.dtype.is_complex)


def _order_nests(kernel: Kernel, always_floats: bool) -> Kernel:
    stmts, changed = [], False
    for stmt in top_level(kernel.body):
        reduces = [s for s in walk_stmt(stmt) if isinstance(s, Reduce)]
        if not reduces:
            stmts.append(stmt)
            continue
        owns, serial, _, _ = _split_update_nest(kernel, stmt)
        output_size = max(size_estimate(r.buffer.size) for r in reduces)
        required = any(_must_order(r, always_floats) for r in reduces)
        if required or prefer_ordered(_extent(owns), _extent(serial), output_size):
            stmts.append(_ordered(kernel, stmt))
            changed = True
        else:
            stmts.append(stmt)
    return replace(kernel, body=sequence(stmts)) if changed else kernel


def order_update_nests(kernel: Kernel) -> Kernel:
    """Run update nests ordered (see the module docstring) where :func:`prefer_ordered` says
    that is faster; the others keep their ``Reduce`` for the winner pass or atomics."""
    return _order_nests(kernel, always_floats=False)


def order_update_nests_deterministic(kernel: Kernel) -> Kernel:
    """:func:`order_update_nests`, and every nest with a float or complex reduction ordered too,
    so that such results are bit-identical from run to run (and equal to the CPU's). A nest where no
    loop separates the targets then runs on one thread. Integer reductions may stay atomic:
    wrap-around add and mul, max and min give the same bits in any order."""
    return _order_nests(kernel, always_floats=True)


# -- schedule_gpu ---------------------------------------------------------------------------------


def schedule_gpu(kernel: Kernel) -> Kernel:
    """Bind every top-level nest to the GPU grid: the loops of a perfect nest of serial loops all
    become ``gpu.grid`` (one flat grid-stride loop); a nest a pass already bound stays as it is;
    a statement outside any loop runs on a one-item grid."""
    launches = []
    for stmt in top_level(kernel.body):
        if isinstance(stmt, For) and stmt.kind == GRID:
            launches.append(stmt)
        elif isinstance(stmt, For):
            loops, body = perfect_nest(stmt)
            launches.append(build_nest([replace(l, kind=GRID) for l in loops], body))
        else:
            launches.append(For(Var("g0"), const(1), stmt, GRID))
    return replace(kernel, body=sequence(launches) if launches else Seq(()))


# -- fuse_independent_launches --------------------------------------------------------------------


def _reads_writes(stmt):
    reads, writes = set(), set()
    for s in walk_stmt(stmt):
        for e in stmt_exprs(s):
            reads |= {x.buffer.name for x in walk_expr(e) if isinstance(x, Load)}
        if isinstance(s, (Store, Reduce)):
            writes.add(s.buffer.name)
            if isinstance(s, Reduce):
                reads.add(s.buffer.name)
        if isinstance(s, ReportIndexError):
            writes.add("<errors>")
    return reads, writes


def _grid_extents(stmt):
    """The extents of a launch's grid loops: constants, or the expressions of symbolic sizes,
    which compare structurally (``#E`` equals ``#E``)."""
    loops, _ = grid_chain(stmt)
    return tuple(int(l.extent.value) if isinstance(l.extent, Const) else l.extent for l in loops)


def fuse_independent_launches(kernel: Kernel) -> Kernel:
    """Merge adjacent launches over the same grid when neither touches what the other writes
    (for example a scatter's copy of ``x`` and the reset of its winner buffer): one pass over
    the grid instead of two."""
    launches = top_level(kernel.body)
    if len(launches) < 2:
        return kernel
    out = [launches[0]]
    for nxt in launches[1:]:
        prev = out[-1]
        ext = _grid_extents(prev)
        serial_inside = any(isinstance(x, For) for x in walk_stmt(grid_chain(nxt)[1]))
        if ext == _grid_extents(nxt) and not serial_inside:
            r1, w1 = _reads_writes(prev)
            r2, w2 = _reads_writes(nxt)
            if not (w1 & (r2 | w2)) and not (w2 & r1):
                loops1, body1 = grid_chain(prev)
                loops2, body2 = grid_chain(nxt)
                rename = {l2.var: l1.var for l1, l2 in zip(loops1, loops2)}
                body2 = substitute(body2, rename)
                out[-1] = build_nest(loops1, Seq(tuple(top_level(body1)) + tuple(top_level(body2))))
                continue
        out.append(nxt)
    return replace(kernel, body=sequence(out))


# -- verify_gpu -----------------------------------------------------------------------------------


def verify_gpu(kernel: Kernel) -> Kernel:
    """The GPU's invariants on top of :func:`verify`: every top-level statement is a launch
    (a ``gpu.grid`` chain), grid loops appear nowhere else, and no ``Reduce(none)`` is left."""
    verify(kernel)
    for stmt in top_level(kernel.body):
        loops, body = grid_chain(stmt)
        if not loops:
            raise CompileError(f"GPU verifier, kernel {kernel.name}: a top-level statement is not bound to the grid")
        for s in walk_stmt(body):
            if isinstance(s, For) and s.kind != "serial":
                raise CompileError(f"GPU verifier, kernel {kernel.name}: loop {s.var.name} of kind {s.kind} "
                                   "inside a launch")
            if isinstance(s, Reduce) and s.combine == "none":
                raise CompileError(f"GPU verifier, kernel {kernel.name}: a scatter update without a winner")
    return kernel
