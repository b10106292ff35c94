"""GPU passes over the loop-nest IR: how scatter updates run in parallel, and the GPU schedule.

After these passes every top-level statement of a kernel is one GPU launch: a chain of loops
of kind ``gpu.grid`` (collapsed by the CUDA renderer into one flat, 64-bit, grid-stride loop over
blocks x threads) around a body that may hold serial loops. On the GPU a :class:`Reduce` is an
atomic read-combine-write and a :class:`Store` a plain one. A scatter's update nest runs one of
four ways:

- **ordered** (:func:`order_update_nests`): a loop variable that is a whole coordinate of every
  target separates the targets (two updates with different values of it never touch one
  element), so those loops run in parallel and the others serially inside each thread, in
  row-major order, exactly as on the CPU: no atomics, no scratch buffer, deterministic, and the
  last update wins. Chosen when each thread's serial chain is short, always for a complex
  ``mul`` (no atomic can multiply both parts at once), and with ``deterministic=True`` for the
  float and complex reductions that do not run sorted.
- **sorted** (:func:`sort_update_nests`), with ``deterministic=True``, for float and complex
  reductions whose ordered chains would be long: a stable radix sort of the updates' positions
  by target, then one thread per target combining its run of updates in row-major order, as the
  CPU does. Scratch buffers grow with the number of updates; the only atomics count digits.
- **winner** (:func:`scatter_last_write_wins`), for ``reduce="none"`` otherwise: every target
  element gets a winner, the largest row-major position of the updates that hit it (an atomic
  max over all updates in parallel), and then only the winner writes.
- **atomic**, for ``add``/``mul``/``max``/``min`` otherwise: the ``Reduce`` stays, and the
  renderer makes it an atomic update (a complex add: one atomic add per part). Integer results
  do not depend on the order; float and complex ones may, which is what ``deterministic=True``
  is for.

Symbolic sizes (``cinnlite.ir.symbolic``): a loop extent or a buffer size may be an int64
expression over the symbol buffers, known only per call. The passes never need its value: a
winner buffer is int64 whenever the update count is symbolic, the sorted plan's scratch is
sized by such expressions and its radix passes cover ``SYMBOLIC_BITS`` of key (those a call's
keys do not need do nothing), launches merge when their grid extents are the same expressions,
and the cost decisions (:func:`prefer_ordered`) count every symbol as ``SYMBOLIC_SIZE_ESTIMATE``
(2**20; so ``64*E`` counts as 2**26): large, since a size left open is usually one that grows
with the data.

``GPU_PIPELINE`` and ``GPU_PIPELINE_DETERMINISTIC`` in ``cinnlite/backends/gpu.py`` list the
passes, as ``CPU_PIPELINE`` in ``cinnlite/backends/cpu.py`` does for the CPU; the CPU's
counterpart of this module is ``schedule_cpu.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..dtypes import bool_, int32, int64
from ..errors import CompileError
from .loopnest import (Binary, Buffer, Cast, Cmp, Const, For, If, Kernel, Let, Load, Reduce,
                       ReportIndexError, Select, Seq, Store, Var, as_expr, const, dim_mul, let)
from .passes import RANGE_VARS, verify
from .transform import (build_nest, expr_vars, flat_position, map_stmt, perfect_nest, sequence, stmt_exprs,
                        stmt_vars, substitute, top_level, unflatten_position, walk_expr, walk_stmt)

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


def _bound(stmt) -> bool:
    """Whether ``stmt`` is a launch already (an earlier pass bound it to the grid)."""
    return isinstance(stmt, For) and stmt.kind == GRID


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


def _read_combine_write(s):
    """A ``Reduce`` as the plain read, combine and write of a thread that owns its target."""
    if isinstance(s, Reduce):
        if s.combine == "none":
            return Store(s.buffer, s.indices, s.value)
        return Store(s.buffer, s.indices, Binary(s.combine, Load(s.buffer, s.indices), s.value))
    return s


def _ordered(kernel, stmt):
    owns, serial, body, _ = _split_update_nest(kernel, stmt)
    nest = build_nest(serial, map_stmt(body, None, _read_combine_write))
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
        if not reduces or _bound(stmt):  # no update, or one an earlier pass scheduled
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
    """:func:`order_update_nests`, and every nest with a float or complex reduction that
    :func:`sort_update_nests` left ordered too, so that such results are bit-identical from run
    to run (and equal to the CPU's). Integer reductions may stay atomic: wrap-around add and
    mul, max and min give the same bits in any order. Float max and min do not (the signs of
    zeros, the payloads of NaNs), so they are ordered or sorted as sums are."""
    return _order_nests(kernel, always_floats=True)


# -- sort_update_nests ----------------------------------------------------------------------------

#: The sorted plan's counting passes sort at most this many bits of the key each.
RADIX_BITS = 8
#: The bits of a symbolic number of targets or updates, as the sorted plan assumes them: the
#: radix passes past the bits a call needs do nothing. 2**40 elements is more than any device
#: memory holds.
SYMBOLIC_BITS = 40


def _update_group(body):
    """``(group, reduces)``: the statement holding every ``Reduce`` of an update body, when the
    body is Let and else-less If wrappers around one ``Reduce`` or a Seq of ``Reduce`` s, all
    at the same indices (a mean's sum and count); else None."""
    s = body
    while isinstance(s, Let) or (isinstance(s, If) and s.orelse is None):
        s = s.body if isinstance(s, Let) else s.then
    if isinstance(s, Reduce):
        reduces = [s]
    elif isinstance(s, Seq) and s.stmts and all(isinstance(x, Reduce) for x in s.stmts):
        reduces = list(s.stmts)
    else:
        return None
    if any(r.combine == "none" or r.indices != reduces[0].indices for r in reduces):
        return None
    return s, reduces


def _replace_group(body, group, new):
    """``body`` (see :func:`_update_group`) with ``group`` replaced by ``new``."""
    if body is group:
        return new
    if isinstance(body, Let):
        return Let(body.bindings, _replace_group(body.body, group, new))
    return If(body.cond, _replace_group(body.then, group, new))


def _without_ifs(body):
    """``body`` (see :func:`_update_group`) without its If wrappers."""
    if isinstance(body, Let):
        return Let(body.bindings, _without_ifs(body.body))
    if isinstance(body, If):
        return _without_ifs(body.then)
    return body


def _prune_lets(stmt):
    """``stmt`` without the Let bindings nothing uses."""
    def visit(s):
        if isinstance(s, Let):
            needed, kept = stmt_vars(s.body), []
            for var, value in reversed(s.bindings):
                if var in needed:
                    kept.append((var, value))
                    needed |= expr_vars(value)
            return let(reversed(kept), s.body)
        return s

    return map_stmt(stmt, None, visit)


def _var_names(kernel) -> set:
    names = {v.name for v in RANGE_VARS}
    for s in walk_stmt(kernel.body):
        if isinstance(s, For):
            names.add(s.var.name)
        elif isinstance(s, Let):
            names |= {v.name for v, _ in s.bindings}
        for e in stmt_exprs(s):
            names |= {v.name for v in expr_vars(e)}
    return names


def _product(sizes):
    out = 1
    for d in sizes:
        out = dim_mul(out, d)
    return out


def _size(extent):
    """A loop extent as a size: an int, or the int64 expression of a symbolic one."""
    return int(extent.value) if isinstance(extent, Const) else extent


def _ceil_div(a, k: int):
    if isinstance(a, int):
        return -(-a // k)
    return a if k == 1 else Binary("div", Binary("add", a, const(k - 1)), const(k))


def _add(a, b):
    return Binary("add", a, b)


def _int64(e):
    return e if e.dtype == int64 else Cast(int64, e)


def _run_end(j, k, n, levels: int, key_at, var):
    """``(bindings, end)``: where the run of sorted keys equal to ``k`` that starts at ``j`` ends
    (its last position plus one), found by one thread: probes ``j + 1, j + 2, j + 4, ...`` up to
    the first other key, then a binary search between the last equal probe and that one.
    ``levels`` bits hold the number of entries ``n``; ``key_at(ix)`` is the sorted key at
    ``ix``. A probe or step that is not needed any more reads nothing (C's ``&&``); every index
    stays in bounds either way, so the reference evaluator, which evaluates every operand, runs it too."""
    bindings = []
    hit, lo, hi = Const(True, bool_), j, n
    last = Binary("sub", n, const(1))
    for t in range(levels):
        probe = _add(j, const(2**t))
        same = Binary("and", Cmp("lt", probe, n), Cmp("eq", key_at(Binary("min", probe, last)), k))
        h, lo2, hi2 = var("s_hit", bool_), var("s_lo"), var("s_hi")
        bindings += [(h, Binary("and", hit, same)), (lo2, Select(h, probe, lo)),
                     (hi2, Select(h, hi, Binary("min", hi, probe)))]
        hit, lo, hi = h, lo2, hi2
    for _ in range(levels):
        width = Binary("sub", hi, lo)
        mid, h, lo2, hi2 = var("s_mid"), var("s_in", bool_), var("s_lo"), var("s_hi")
        bindings += [(mid, Binary("div", _add(lo, hi), const(2))),
                     (h, Binary("and", Cmp("gt", width, const(1)), Cmp("eq", key_at(mid), k))),
                     (lo2, Select(h, mid, lo)), (hi2, Select(Binary("or", h, Cmp("le", width, const(1))), hi, mid))]
        lo, hi = lo2, hi2
    return tuple(bindings), hi


def sort_update_nests(kernel: Kernel) -> Kernel:
    """With ``deterministic=True``: every update nest with a float or complex reduction that the
    ordered plan would run in long serial chains (where :func:`prefer_ordered` does not pick it)
    runs sorted instead, as launches of its own (:func:`_sorted_plan`); the others are left to
    :func:`order_update_nests_deterministic`. The result is bit-identical to the CPU's: every
    target combines its updates in row-major order, starting from its value."""
    stmts, temps, changed = [], list(kernel.temps), False
    buffers, names = _buffer_names(kernel), _var_names(kernel)
    for stmt in top_level(kernel.body):
        plan = _sorted_plan(kernel, stmt, buffers, names)
        if plan is None:
            stmts.append(stmt)
            continue
        launches, scratch = plan
        stmts += launches
        temps += scratch
        changed = True
    if not changed:
        return kernel
    return replace(kernel, body=sequence(stmts), temps=tuple(temps))


def _sorted_plan(kernel, stmt, buffers: set, names: set):
    """The launches and scratch buffers that run update nest ``stmt`` sorted (see
    :class:`_SortedPlan`), or None where the nest is not one to sort. ``buffers`` and ``names``
    are the buffer and variable names taken: the plan's scratch buffers and variables get fresh
    ones, in a fixed order, so that the same kernel always gets the same source."""
    nest = _nest_to_sort(kernel, stmt)
    if nest is None:
        return None
    plan = _SortedPlan(nest, buffers, names)
    return plan.launches(), plan.scratch


@dataclass(frozen=True)
class _SortNest:
    """An update nest to sort: what :class:`_SortedPlan` reads of it."""

    body: object        # the nest's body, inside its loops
    group: object       # the statement in ``body`` holding its Reduces (:func:`_update_group`)
    reduces: list       # its Reduces; the first one's target gives the keys
    axes: list          # the target's axes that the key covers (not a parallel loop's variable)
    key: object         # the target's flat position over ``axes``
    parallel: list      # the loops that stay parallel, on the last launch
    entry_loops: list   # the other loops: their iterations are the entries
    n: object           # the number of entries: an int, or an int64 expression
    t: object           # the number of keys (targets over ``axes``): an int or an expression

    @property
    def target(self):
        return self.reduces[0]


def _nest_to_sort(kernel, stmt):
    """``stmt`` as a :class:`_SortNest`, or None where it is not one to sort: already bound, no
    float or complex reduction that needs an order, chains short enough for the ordered plan,
    no update group, or no target at all."""
    if _bound(stmt):
        return None
    reduces = [s for s in walk_stmt(stmt) if isinstance(s, Reduce)]
    if not reduces or not any(_must_order(r, always_floats=True) for r in reduces):
        return None
    owns, serial, body, _ = _split_update_nest(kernel, stmt)
    # No allowance for a large output: the sorted plan's scratch does not grow with it.
    if prefer_ordered(_extent(owns), _extent(serial), output_size=0):
        return None
    found = _update_group(body)
    if found is None:
        return None
    group, reduces = found
    loops, _ = perfect_nest(stmt)
    parallel, axes, key = _parallel_loops(owns, reduces[0], body, group)
    pvars = {l.var for l in parallel}
    entry_loops = [l for l in loops if l.var not in pvars]
    n = _product(_size(l.extent) for l in entry_loops)
    t = _product(reduces[0].buffer.shape[k] for k in axes)
    if isinstance(t, int) and t == 0:
        return None  # no target: nothing to sort (every update is dropped or an index error)
    return _SortNest(body, group, reduces, axes, key, parallel, entry_loops, n, t)


def _parallel_loops(owns, target, body, group):
    """``(parallel, axes, key)``: the parallel loops of the last launch, owning loops that nothing
    but their axis uses; the target's other axes; the key, the target's flat position over them.
    Loops are dropped until every one left is used by nothing else."""
    dummy = Buffer("__key", int64, (1,))
    parallel = list(owns)
    while True:
        pvars = {l.var for l in parallel}
        axes = [k for k, ix in enumerate(target.indices) if not (isinstance(ix, Var) and ix in pvars)]
        key = flat_position([target.indices[k] for k in axes], [target.buffer.shape[k] for k in axes])
        used = stmt_vars(_prune_lets(_replace_group(body, group, Store(dummy, (const(0),), key))))
        kept = [l for l in parallel if l.var not in used]
        if len(kept) == len(parallel):
            return parallel, axes, key
        parallel = kept


class _SortedPlan:
    """The sorted plan of one update nest (:class:`_SortNest`): its launches (:meth:`launches`)
    and scratch buffers (``scratch``).

    The updates are *entries*: the iterations of the nest's loops, but for the loops whose
    variable is a whole coordinate of the target and is used nowhere else in the target or the
    conditions (the columns of a row scatter); those stay in parallel, on the last launch. An
    entry's *key* is its target's flat position over the other axes, or the number of keys
    (``T``) where no update happens (fill mode). A stable least-significant-digit radix sort
    of the entries' row-major positions by key then leaves every target's updates together and
    in row-major order:

    1. zero: the digit counts of the first two passes, and the digit totals;
    2. keys: every entry's key, in parallel, counted in its chunk's digits of the first pass
       (the entries cut into chunks of ``chunk``); then per pass, ``RADIX_BITS`` or fewer bits
       of the key at a time: *prefix* the counts over chunks, per digit, a group of chunks per
       thread (adding each group's total to the digit's total); *scan* the groups of each digit,
       starting from the entries of the smaller digits; *scatter*, a thread walking each chunk
       in order, every entry (key and position) to its place, the entries of a digit in chunk
       order, so in the order they came in, and count it in its new chunk's digits of the next
       pass;
    3. reduce: the first entry of each run of equal keys, for every value of the parallel
       loops, finds where its run ends (:func:`_run_end`) and combines the updates of the run
       into the target, in order, starting from the target's value, each update computed from
       its position as the nest computes it.

    The only atomics count digits and sum digit totals: integer sums, whose result no order
    changes. With ``P`` passes this is ``3 P + 3`` launches. The scratch grows with the number
    of entries ``N``, never with the output: two keys and two positions per entry (one position
    where ``P == 1``), two sets (one where ``P == 1``) of ``ceil(N / chunk) * radix`` digit
    counts (``chunk`` is the radix, at least 32: at most ``N`` rounded up to a chunk), a group
    sum per digit and group of chunks (about ``sqrt(chunks) / 4`` chunks a group), two numbers
    per digit.
    Keys are int32 where the number of targets is static and below 2**31, positions and counts
    where the number of entries is; else int64. ``P`` is ``ceil(bits / RADIX_BITS)`` for the
    bits of ``T``; where ``T`` is symbolic, ``P`` covers ``SYMBOLIC_BITS`` and a pass whose
    bits are all zero does nothing, the last launch reading what the last pass that ran wrote.

    The launches' variables take fresh names as they are built, in launch order (the same
    kernel always gets the same source): call :meth:`launches` once.
    """

    def __init__(self, nest: _SortNest, buffers: set, names: set):
        self.nest, self.names = nest, names
        n, t = nest.n, nest.t
        self.kd = int32 if isinstance(t, int) and t <= 2**31 - 1 else int64  # keys: 0 .. t
        self.nd = int32 if isinstance(n, int) and n <= 2**31 - 1 else int64  # positions and counts: 0 .. n
        self.symbolic_keys, self.symbolic_entries = not isinstance(t, int), not isinstance(n, int)
        bits = SYMBOLIC_BITS if self.symbolic_keys else max(1, t.bit_length())
        self.passes = -(-bits // RADIX_BITS)
        self.digit_bits = -(-bits // self.passes)
        self.radix = 2**self.digit_bits
        self.chunk = max(self.radix, 32)                     # entries a scatter thread walks
        self.chunks = _ceil_div(n, self.chunk)
        # Chunks per prefix thread: sqrt(chunks) / 4 (a scan thread per digit walks the groups, and
        # steps there cost a fraction of those of the prefix threads, which read scattered counts).
        self.per_group = max(1, -(-(math.isqrt(-(-size_estimate(n) // self.chunk)) + 1) // 4))
        self.groups = _ceil_div(self.chunks, self.per_group)
        self.n_e, self.t_e, self.chunks_e = as_expr(n), as_expr(t), as_expr(self.chunks)
        self.zero, self.one = const(0, self.nd), const(1, self.nd)
        self._take_scratch(buffers)

    def _take_scratch(self, buffers: set):
        """The scratch buffers, named after the target: two keys and two positions per entry (the
        first positions only where a pass after the first may run), the digit counts of two
        passes (of one where there is only one), group sums, digit totals and digit bases."""
        base, n, kd, nd = self.nest.target.buffer.name, self.nest.n, self.kd, self.nd

        def buf(what, dtype, shape):
            return Buffer(_fresh_name(f"{base}__{what}", buffers), dtype, shape)

        self.keys = [buf("keys", kd, (n,)), buf("keys", kd, (n,))]
        both = self.passes > 1 or self.symbolic_keys
        self.pos = [buf("pos", nd, (n,)) if both else None, buf("pos", nd, (n,))]
        self.hists = [buf("digits", nd, (self.chunks, self.radix)) for _ in range(min(self.passes, 2))]
        self.gsum = buf("groups", nd, (self.groups, self.radix))
        self.dtot = buf("digit_total", nd, (self.radix,))
        self.dbase = buf("digit_base", nd, (self.radix,))
        per_entry = [b for b in self.keys + self.pos if b is not None]
        self.scratch = per_entry + self.hists + [self.gsum, self.dtot, self.dbase]

    def launches(self) -> list:
        """Zero, keys, prefix, scan and scatter per pass, reduce: ``3 P + 3`` launches."""
        launches = [self.zero_counts(), self.make_keys()]
        for p in range(self.passes):
            launches += self.radix_pass(p)
        return launches + [self.reduce()]

    # -- helpers shared by the launches

    def var(self, name, dtype=int64):
        return Var(_fresh_name(name, self.names), dtype)

    @staticmethod
    def grid(pairs, body):
        return build_nest([For(v, as_expr(x), None, GRID) for v, x in pairs], body)

    def needed(self, p):
        """None where pass ``p`` always runs, else the condition that it has bits to sort."""
        if not self.symbolic_keys or p == 0:
            return None
        return Cmp("ge", self.t_e, const(2**(self.digit_bits * p)))

    def guarded(self, p, s):
        cond = self.needed(p)
        return s if cond is None else If(cond, s)

    def digit(self, k, p):
        x = _int64(k)
        if p:
            x = Binary("div", x, const(2**(self.digit_bits * p)))
        return Binary("mod", x, const(self.radix))

    def count(self, hist, e, k, p):
        """Count entry ``e`` (sorted position), of key ``k``, in its chunk's digits of pass ``p``."""
        return Reduce(hist, (Binary("div", e, const(self.chunk)), self.digit(k, p)), self.one, "add")

    # -- the launches, in order

    def zero_counts(self):
        """Zero the first passes' digit counts and the digit totals."""
        c, r = self.var("s_c"), self.var("s_r")
        zeros = [Store(h, (c, r), self.zero) for h in self.hists[:self.passes]]
        zeros.append(If(Cmp("eq", c, const(0)), Store(self.dtot, (r,), self.zero)))
        return self.grid([(c, self.chunks), (r, self.radix)], Seq(tuple(zeros)))

    def make_keys(self):
        """Every entry's key, in parallel, counted for the first pass."""
        nest, keys, kd, nd = self.nest, self.keys, self.kd, self.nd
        e = self.var("s_e")
        sentinel = Cast(kd, self.t_e) if self.symbolic_keys else const(nest.t, kd)
        key_store = Store(keys[0], (e,), nest.key if kd == int64 else Cast(kd, nest.key))
        dropped = any(isinstance(s, If) for s in walk_stmt(nest.body))  # an update may be dropped (fill mode)
        key_body = [Store(keys[0], (e,), sentinel)] if dropped else []
        if self.symbolic_keys:  # read where no pass after the first runs (see sorted_binding)
            key_body.append(Store(self.pos[0], (e,), Cast(nd, e) if nd != int64 else e))
        key_body += [_prune_lets(_replace_group(nest.body, nest.group, key_store)),
                     self.count(self.hists[0], e, Load(keys[0], (e,)), 0)]
        position = flat_position([l.var for l in nest.entry_loops], [l.extent for l in nest.entry_loops])
        return build_nest([replace(l, kind=GRID) for l in nest.entry_loops],
                          Let(((e, position),), Seq(tuple(key_body))))

    def following(self, p):
        """The digit counts of the pass after ``p``, None after the last."""
        return self.hists[(p + 1) % 2] if p + 1 < self.passes else None

    def radix_pass(self, p):
        """The prefix, scan and scatter launches of pass ``p``. The scan's digit variable is also
        the scatter's, where it zeroes the next pass's digit totals."""
        prefix = self.prefix(p)
        r = self.var("s_r")
        return [prefix, self.scan(p, r), self.scatter(p, r)]

    def prefix(self, p):
        """Radix pass ``p``, prefix: the counts over chunks, per digit, a group of chunks per
        thread, each group's total added to the digit's total."""
        gsum, hist, following, zero = self.gsum, self.hists[p % 2], self.following(p), self.zero
        g, r, j, cc, h = self.var("s_g"), self.var("s_r"), self.var("s_j"), self.var("s_c"), self.var("s_h", self.nd)
        running = Load(gsum, (g, r))
        steps = [Store(hist, (cc, r), running), Store(gsum, (g, r), _add(running, h))]
        if following is not None and p > 0:  # free since the last scatter: counts for the next pass
            steps.append(Store(following, (cc, r), zero))
        prefix = Seq((
            Store(gsum, (g, r), zero),
            For(j, as_expr(self.per_group), Let(((cc, _add(Binary("mul", g, const(self.per_group)), j)),), If(
                Cmp("lt", cc, self.chunks_e), Let(((h, Load(hist, (cc, r))),), Seq(tuple(steps)))))),
            Reduce(self.dtot, (r,), running, "add"),
        ))
        return self.grid([(g, self.groups), (r, self.radix)], self.guarded(p, prefix))

    def scan(self, p, r):
        """Radix pass ``p``, scan: the groups of each digit, starting from the entries of the
        smaller digits."""
        gsum, dbase = self.gsum, self.dbase
        q, g, v = self.var("s_q"), self.var("s_g"), self.var("s_v", self.nd)
        acc = Load(dbase, (r,))
        scan = Seq((
            Store(dbase, (r,), self.zero),
            For(q, r, Store(dbase, (r,), _add(acc, Load(self.dtot, (q,))))),
            For(g, as_expr(self.groups), Let(((v, Load(gsum, (g, r))),),
                                             Seq((Store(gsum, (g, r), acc), Store(dbase, (r,), _add(acc, v)))))),
        ))
        return self.grid([(r, self.radix)], self.guarded(p, scan))

    def scatter(self, p, r):
        """Radix pass ``p``, scatter: a thread walking each chunk in order moves every entry (key
        and position) to its place, and counts it in its new chunk's digits of the next pass."""
        k_in, k_out = self.keys[p % 2], self.keys[(p + 1) % 2]
        p_in, p_out = self.pos[p % 2], self.pos[(p + 1) % 2]
        hist, following, nd = self.hists[p % 2], self.following(p), self.nd
        c, i, ee, k = self.var("s_c"), self.var("s_i"), self.var("s_e"), self.var("s_k", self.kd)
        dg, slot = self.var("s_d"), self.var("s_slot")
        group_base = Load(self.gsum, (Binary("div", c, const(self.per_group)), dg))
        place = _add(_int64(group_base), _int64(Load(hist, (c, dg))))
        moved = Load(p_in, (ee,)) if p else (Cast(nd, ee) if nd != int64 else ee)
        steps = [Store(k_out, (slot,), k), Store(p_out, (slot,), moved),
                 Store(hist, (c, dg), _add(Load(hist, (c, dg)), self.one))]
        scatter = []
        if following is not None:  # count for the next pass, and zero its digit totals
            steps.append(self.count(following, slot, k, p + 1))
            scatter.append(If(Cmp("eq", c, const(0)), For(r, as_expr(self.radix), Store(self.dtot, (r,), self.zero))))
        scatter.append(For(i, as_expr(self.chunk), Let(((ee, _add(Binary("mul", c, const(self.chunk)), i)),), If(
            Cmp("lt", ee, self.n_e), Let(((k, Load(k_in, (ee,))), (dg, self.digit(k, p)), (slot, place)),
                                         Seq(tuple(steps)))))))
        return self.grid([(c, self.chunks)], self.guarded(p, sequence(scatter)))

    def sorted_binding(self):
        """Where the sorted entries are, the buffers the last pass that ran wrote: ``(bindings,
        at)``, ``at(buffers, i)`` reading entry ``i`` of the right one of a pair of buffers."""
        passes = self.passes
        if not self.symbolic_keys:
            return (), (lambda b, ix: Load(b[passes % 2], (ix,)))
        odd = self.var("s_odd", bool_)
        ran = const(1)
        for p in range(1, passes):
            ran = _add(ran, Cast(int64, self.needed(p)))
        binding = ((odd, Cmp("eq", Binary("mod", ran, const(2)), const(1))),)
        return binding, (lambda b, ix: Select(odd, Load(b[1], (ix,)), Load(b[0], (ix,))))

    def reduce(self):
        """The first entry of every run, for every value of the parallel loops, combines its run."""
        nest, keys = self.nest, self.keys
        j, k, q, u = self.var("s_j"), self.var("s_k"), self.var("s_q"), self.var("s_u")
        bound, at = self.sorted_binding()
        first = Binary("or", Cmp("eq", j, const(0)),
                       Cmp("ne", _int64(at(keys, Binary("max", Binary("sub", j, const(1)), const(0)))), k))
        levels = SYMBOLIC_BITS if self.symbolic_entries else max(1, nest.n.bit_length())
        search, run_end = _run_end(j, k, self.n_e, levels, lambda ix: _int64(at(keys, ix)), self.var)
        target_at, update = self.run_update(j, k, q, u, at)
        run = Let(search + target_at, For(q, Binary("sub", run_end, j), update))
        reduce_body = Let(bound + ((k, _int64(at(keys, j))),), If(Binary("and", Cmp("lt", k, self.t_e), first), run))
        return build_nest([For(j, self.n_e, None, GRID)] + [replace(l, kind=GRID) for l in nest.parallel],
                          reduce_body)

    def run_update(self, j, k, q, u, at):
        """``(target_at, update)``: the target's coordinates, bound from key ``k``; and the update
        of sorted entry ``j + q`` (the run starts at ``j``), computed from its position ``u`` as
        the nest computes it and combined into the target."""
        nest = self.nest
        # The target is the key's (and the parallel loops'): the same element all along the run, so
        # the compiler may keep it in a register; the conditions held when the key was made.
        where = [self.var("s_t") for _ in nest.axes]
        at_target = dict(zip(nest.axes, where))

        def combine(r):
            ix = tuple(at_target.get(a, x) for a, x in enumerate(r.indices))
            return Store(r.buffer, ix, Binary(r.combine, Load(r.buffer, ix), r.value))

        combined = _replace_group(nest.body, nest.group, sequence(combine(r) for r in nest.reduces))
        values = _prune_lets(_without_ifs(combined))
        unflat = unflatten_position(u, [l.extent for l in nest.entry_loops])
        loop_values = tuple((l.var, x) for l, x in zip(nest.entry_loops, unflat))
        update = Let(((u, _int64(at(self.pos, _add(j, q)))),) + loop_values, values)
        target_at = tuple(zip(where, unflatten_position(k, [nest.target.buffer.shape[a] for a in nest.axes])))
        return target_at, update


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


#: A launch that only checks indices may run its innermost grid loops serially inside each
#: thread, where their constant extents multiply to at most this many items, to take the grid
#: of the launch after it and fuse with it (see ``_check_on_grid``).
CHECK_SERIAL_ITEMS = 8


def fuse_independent_launches(kernel: Kernel) -> Kernel:
    """Merge adjacent launches over the same grid when neither touches what the other writes
    (for example a scatter's copy of ``x`` and the reset of its winner buffer): one pass over
    the grid instead of two. A check launch over an index with a short last dimension first
    takes the next launch's grid where ``_check_on_grid`` allows."""
    launches = top_level(kernel.body)
    if len(launches) < 2:
        return kernel
    out = [launches[0]]
    for nxt in launches[1:]:
        fused = _fused(_check_on_grid(out[-1], _grid_extents(nxt)) or out[-1], nxt)
        if fused is None:
            out.append(nxt)
        else:
            out[-1] = fused
    return replace(kernel, body=sequence(out))


def _fused(prev, nxt):
    """``prev`` and then ``nxt`` as one launch, or None where their grids differ, ``nxt`` holds
    serial loops, or one touches what the other writes."""
    serial_inside = any(isinstance(x, For) for x in walk_stmt(grid_chain(nxt)[1]))
    if _grid_extents(prev) != _grid_extents(nxt) or serial_inside:
        return None
    r1, w1 = _reads_writes(prev)
    r2, w2 = _reads_writes(nxt)
    if w1 & (r2 | w2) or w2 & r1:
        return None
    loops1, body1 = grid_chain(prev)
    loops2, body2 = grid_chain(nxt)
    body2 = substitute(body2, {l2.var: l1.var for l1, l2 in zip(loops1, loops2)})
    return build_nest(loops1, Seq(tuple(top_level(body1)) + tuple(top_level(body2))))


def _check_on_grid(launch, extents: tuple):
    """``launch``, a launch that only reports index errors, with its grid loops past the first
    ``len(extents)`` made serial, where the first ones have ``extents`` and the others constant
    extents of at most ``CHECK_SERIAL_ITEMS`` items together; else None.

    Why: gather_nd checks its (M, K) index tuples over an (M, K) grid and gathers over (M,);
    one thread checking a whole tuple lets the check ride in the gather's launch, which reads
    the same tuple, instead of a launch of its own that reads the index a second time."""
    loops, body = grid_chain(launch)
    n, own = len(extents), _grid_extents(launch)
    tail = own[n:]
    if (not n or own[:n] != extents or not tail or not all(isinstance(e, int) for e in tail)
            or math.prod(tail) > CHECK_SERIAL_ITEMS or _reads_writes(launch)[1] != {"<errors>"}):
        return None
    return build_nest(loops[:n] + [replace(l, kind="serial") for l in loops[n:]], body)


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
