"""The CPU schedule: which stages of a kernel run split across threads, and how, and where a
``mode="raise"`` check can ride along a loop that reads the index anyway.

Every top-level statement of a kernel is a stage (``kernel_stages``), which the LLVM renderer
exports as a function over a slice ``[range_begin, range_end)`` of its parallel dimension.
:func:`schedule_cpu` sets each stage's kind (``parallel``, ``parallel_rows``,
``parallel_check``, or none), :func:`defer_index_checks` folds check nests into later stages
(``deferred_check``), :func:`split_scatter_columns` splits a scatter of single elements by
the output's column, :func:`stream_rows` and :func:`prefetch_gathers` prefetch what gathers
will read, :func:`collapse_short_loops` runs a short element loop and the loop around it as
one, and :func:`stage_extent` and :func:`stage_work` tell the runtime how big
a stage's parallel dimension and its work are. Vectorising the inner loops is left to LLVM,
which sees each stage's buffers as ``noalias`` arguments. The GPU's counterpart is
``schedule_gpu.py``; ``cinnlite/backends/cpu.py`` puts these passes in its pipeline.
"""
from __future__ import annotations

from dataclasses import replace

from ..dtypes import bool_, int64, uint32, uint64
from .loopnest import (Binary, Buffer, Cast, Cmp, Const, Every, FlagIndexError, For, If, Kernel, Let, Load,
                       Prefetch, Reduce, ReportIndexError, Select, Seq, Store, Var, as_expr, dim_mul, let, logical_and)
from .lower import checked_bound
from .passes import CHUNKED_LOOPS, RANGE_BEGIN, RANGE_END, simplify_expr
from .transform import (buffers_of, data_loads, expr_size, expr_vars, is_data_load, kernel_stages, let_vars, loads_of,
                        map_expr, map_stmt, sequence, stmt_exprs, substitute, substitute_expr, walk_expr, walk_stmt,
                        written_buffers)

#: A stage splits across threads only from this many innermost iterations: below it, handing
#: chunks to other threads costs more than it saves.
PARALLEL_MIN_WORK = 1 << 15

#: How much of a reduction's output row one pass over the reduced loop keeps in registers (see
#: ``_reduce_in_blocks``): 256 bytes, four AVX-512 or eight AVX2 vectors, which leaves half of
#: either's vector registers for the operands.
REDUCE_BLOCK_BYTES = 256
#: At most this many rows of a narrow row reduction are interleaved (see ``_tile_rows``).
TILE_MAX_ROWS = 8
#: A loop that tests one index per iteration for ``mode="raise"`` and then moves a whole slice
#: runs in blocks of this many iterations (see ``_check_in_blocks``): 512 bytes of int64
#: indices, which stay in L1 between the block's tests and its slices.
CHECK_BLOCK = 64
#: A stage's own loop, which the runtime splits across threads, keeps at least this many
#: blocks (shorter ones where it is short), so that threads still share it evenly; below
#: ``MIN_CHECK_BLOCK`` iterations a block does not pay for its loop.
SPLIT_BLOCKS, MIN_CHECK_BLOCK = 64, 8

# -- schedule_cpu -------------------------------------------------------------------------------


def _writes_only_plain_stores(s) -> bool:
    kinds = {type(x) for x in walk_stmt(s)}
    return Reduce not in kinds and ReportIndexError not in kinds


def _guard_rows(nest: For, row):
    """Wrap the body of the innermost loop that ``row`` depends on in
    ``if range_begin <= row < range_end``, so the guard runs once per update slice; None where
    that slice is a single element (no loop under the guard).

    Why None: every chunk walks every update, so a split pays only where the work a guard lets
    through outweighs the walk. With one element per guard it never did: each chunk reads all
    the indices again and mispredicts the guard for a random half of them (on two cores a
    scatter-add of 1 M elements along axis 0 took 2.5 ms alone and 5.9 ms split in two)."""
    deps = expr_vars(row)
    guard = logical_and(Cmp("ge", row, RANGE_BEGIN), Cmp("lt", row, RANGE_END))

    def guarded(body):
        if not any(isinstance(x, For) for x in walk_stmt(body)):
            raise _SingleElement
        return If(guard, body)

    def visit(s, bound):
        if isinstance(s, For):
            inner = bound | {s.var}
            if deps <= inner:
                return replace(s, body=guarded(s.body))
            return replace(s, body=visit(s.body, inner))
        if isinstance(s, Let):
            # The row is a bound value: guard right after the binding that completes it, so that
            # the values the row does not need are computed only for the rows of this chunk.
            inner = set(bound)
            for k, (var, _) in enumerate(s.bindings):
                inner.add(var)
                if deps <= inner:
                    return let(s.bindings[:k + 1], guarded(let(s.bindings[k + 1:], s.body)))
        raise AssertionError("row depends on variables outside the update nest")

    try:
        return visit(nest, frozenset())
    except _SingleElement:
        return None


class _SingleElement(Exception):
    """A row guard would let one element through (see ``_guard_rows``)."""


def _let_values(s) -> dict:
    """Every variable the Lets of ``s`` bind, mapped to its value written without Let variables."""
    return _over_lets(s, substitute_expr)


def _over_lets(s, describe) -> dict:
    """Every variable the Lets of ``s`` bind, mapped to ``describe(value, the map so far)``, in
    the order they bind."""
    out: dict = {}
    for st in walk_stmt(s):
        if isinstance(st, Let):
            for var, value in st.bindings:
                out[var] = describe(value, out)
    return out


def _schedule_stage(s):
    """Returns the stage with loops annotated. Compute nests: the outermost loop is
    ``parallel`` (chunks of it may run on different threads). Scatter update nests: when every
    update of one output row happens in the same iteration of the outermost loop, that loop is
    ``parallel``; otherwise the nest becomes ``parallel_rows``: each chunk walks all updates in
    order and applies those whose output row lies in its range, which keeps the serial order
    of updates to every element (deterministic, and last-wins for reduce="none"), where each
    update is a slice of a row (one element per update stays serial here: ``_guard_rows``;
    ``split_scatter_columns`` may split it by column later)."""
    if not isinstance(s, For):
        return s
    if _writes_only_plain_stores(s):
        return replace(s, kind="parallel")
    kinds = {type(x) for x in walk_stmt(s)}
    if ReportIndexError in kinds:
        if Reduce in kinds or Store in kinds:
            return s
        # A check nest: chunks of its outer loop run on different threads, each reporting the
        # first bad position of its own chunk; the runtime keeps the first chunk that failed,
        # which is the first bad position overall (chunks follow row-major order).
        return replace(s, kind="parallel_check")
    reduces = [x for x in walk_stmt(s) if isinstance(x, Reduce)]
    if any(not r.indices for r in reduces):
        return s
    # Fusion may bind one index in several Lets (one per statement it inlines into): compare
    # the rows by value.
    values = _let_values(s)
    rows = {substitute_expr(r.indices[0], values) for r in reduces}
    shapes = {r.buffer.shape[0] for r in reduces}
    if len(rows) != 1 or len(shapes) != 1:
        return s
    (row,) = rows
    if row == s.var:
        return replace(s, kind="parallel")
    if not expr_vars(row):
        return s  # every update hits one row: nothing to split
    guarded = _guard_rows(s, row)
    return s if guarded is None else replace(guarded, kind="parallel_rows")


def split_scatter_columns(kernel: Kernel) -> Kernel:
    """A scatter nest that ``schedule_cpu`` left serial, split across threads by a column of
    its output where one exists (``_split_column``): in blocks of that column, each thread's
    blocks its own (``_in_column_blocks``). After ``defer_index_checks``, which folds the index
    check into the nest as it stands.

    Why: a scatter along axis 0 (``out[index[i, j], j] += src[i, j]``) ran on one thread
    whatever the thread count (one element per update: ``_guard_rows``)."""
    def split(stage):
        # A nest that reports an error itself stops at the first bad index: serial, in order.
        kinds = {type(x) for x in walk_stmt(stage)} if isinstance(stage, For) and stage.kind == "serial" else set()
        if Reduce not in kinds or ReportIndexError in kinds:
            return stage
        column = _split_column(stage, _let_values(stage))
        return stage if column is None else _in_column_blocks(stage, *column)
    return replace(kernel, body=Seq(tuple(split(stage) for stage in kernel_stages(kernel))))


#: A scatter nest split by a column (``_split_column``) hands each thread blocks of at least a
#: cache line of the narrowest buffer the column walks, and of at most this many blocks.
COLUMN_BLOCKS = 64


def _split_column(nest: For, values: dict):
    """``(loop, block)``: the loop of ``nest`` (below its outermost one, each loop on the way
    the only statement of the one around it, through Lets) whose variable is itself a
    coordinate of every access to every buffer the nest writes, the same coordinate of each
    buffer's accesses, so that iterations of two values of that variable touch distinct
    elements; and how many of its iterations a block takes (``_column_block``). None where no
    loop is such, or where its extent depends on an outer loop or fills one block.

    Why: a scatter along axis 0 updates ``out[index[i, j], j]``, one element per update, whose
    rows ``_guard_rows`` will not split; its columns split it without a guard, each thread
    walking every update row for its own columns, each element getting its updates in the
    order the serial loop gives them (see ``_in_column_blocks``)."""
    written = written_buffers(nest)
    accesses: dict = {}  # a written buffer's name -> the (Buffer, indices) of every access to it
    for x in (x for st in walk_stmt(nest) for x in _accesses(st) if x.buffer.name in written):
        accesses.setdefault(x.buffer.name, []).append((x.buffer, x.indices))
    loop = nest.body
    while isinstance(loop, (For, Let)):
        if isinstance(loop, For) and not expr_vars(loop.extent) and _is_column(loop.var, accesses, values):
            block = _column_block(loop, nest)
            return None if block is None else (loop, block)
        loop = loop.body
    return None


def _is_column(var: Var, accesses: dict, values: dict) -> bool:
    """Whether ``var`` is one coordinate of every access to each buffer (one Buffer, one
    position of that coordinate, per name)."""
    for name, found in accesses.items():
        if len({b for b, _ in found}) != 1:
            return False
        places = None
        for _, indices in found:
            here = {k for k, i in enumerate(indices) if substitute_expr(i, values) == var}
            places = here if places is None else places & here
        if not places:
            return False
    return True


def _column_block(loop: For, nest: For):
    """How many of ``loop``'s iterations a block of ``_in_column_blocks`` takes: a cache line
    of the narrowest buffer ``nest`` indexes by ``loop``'s variable, more where that would make
    more than ``COLUMN_BLOCKS`` blocks; None where one block would take the whole loop."""
    widths = [x.buffer.dtype.itemsize for st in walk_stmt(nest) for x in _accesses(st) if loop.var in x.indices]
    line = max(1, CACHE_LINE_BYTES // min(widths))
    extent = _size(loop.extent)
    if not isinstance(extent, int):
        return line
    size = -(-max(line, -(-extent // COLUMN_BLOCKS)) // line) * line
    return size if size < extent else None


def _accesses(st):
    """The loads in a statement's expressions, and the statement itself where it writes."""
    yield from (x for e in stmt_exprs(st) for x in walk_expr(e) if isinstance(x, Load))
    if isinstance(st, (Store, Reduce)):
        yield st


def _in_column_blocks(nest: For, column: For, size: int) -> For:
    """``nest`` as ``for b (parallel) { nest, with column's loop over block b's iterations }``,
    blocks of ``size`` iterations. A thread runs whole blocks, so every element (one column
    value) gets all its updates from one thread, in the serial order of the loops around the
    column's; the deterministic results of the serial nest, including which update of an
    element comes last."""
    def block(over, first, count):
        return map_stmt(nest, stmt_fn=lambda st: over(st.var, [st.body]) if isinstance(st, For) and st.var == column.var
                        else st)
    return replace(_in_blocks(column, Const(size), block, suffix="columns"), kind="parallel")


def schedule_cpu(kernel: Kernel) -> Kernel:
    """Annotate every stage of the kernel for the CPU (see ``_schedule_stage``), and run the
    initialisation of a row together with its updates where both go row by row
    (``_row_init_with_updates``)."""
    stages: list = []
    for stage in map(_schedule_stage, _without_repeated_checks(kernel_stages(kernel))):
        merged = _row_init_with_updates(stages[-1], stage) if stages else None
        if merged is None:
            stages.append(stage)
        else:
            stages[-1] = merged
    stages = [tiled for stage in stages for tiled in _tile_rows(stage)]
    stages = [_rewrite_loops(stage, _split_at_bounds, _has_select) for stage in stages]
    stages = [_rewrite_loops(stage, _reduce_in_blocks, lambda x: _row_reduction(x) is not None) for stage in stages]
    return replace(kernel, body=Seq(tuple(stages)))


def _rewrite_loops(stage, rule, candidate):
    """``stage`` with ``rule`` applied to each of its loops (inner first), rebuilt only where
    ``candidate`` holds for one of its statements: most stages have nothing a rule takes, and
    rebuilding every one of them for every rule costs compile time and memory for nothing."""
    if not any(candidate(x) for x in walk_stmt(stage)):
        return stage
    return map_stmt(stage, stmt_fn=rule)


def _has_select(stmt) -> bool:
    return any(isinstance(x, Select) for e in stmt_exprs(stmt) for x in walk_expr(e))


def _without_repeated_checks(stages) -> list:
    """``stages`` less every check stage that tests what an earlier one tests (the same
    condition on the same index values; two gathers fused into one kernel with one index bring
    one check each): the earlier one raises first, so the later can never fire."""
    seen: dict = {}  # a check, canonical -> the buffers it reads
    kept = []
    for stage in stages:
        if _is_check_stage(stage):
            key = _canonical_check(stage)
            if key in seen:
                continue
            seen[key] = {b.name for b in buffers_of(stage)}
        else:  # a stage that writes what a check read makes a later one a new check
            written = written_buffers(stage)
            seen = {key: reads for key, reads in seen.items() if not reads & written}
        kept.append(stage)
    return kept


def _is_check_stage(stage) -> bool:
    kinds = {type(x) for x in walk_stmt(stage)}
    return ReportIndexError in kinds and Store not in kinds and Reduce not in kinds


def _canonical_check(stage):
    """``stage`` with its variables renamed in the order they are bound and its check id 0:
    equal for two checks of one condition whatever their names."""
    names: dict = {}
    for st in walk_stmt(stage):
        bound = [st.var] if isinstance(st, For) else [v for v, _ in st.bindings] if isinstance(st, Let) else []
        for var in bound:
            names.setdefault(var, Var(f"_{len(names)}", var.dtype))

    def rename(st):
        if isinstance(st, For):
            return For(names[st.var], st.extent, st.body, st.kind)
        if isinstance(st, Let):
            return Let(tuple((names[v], e) for v, e in st.bindings), st.body)
        if isinstance(st, ReportIndexError):
            return ReportIndexError(0, st.position, st.value)
        return st
    return map_stmt(stage, lambda e: names.get(e, e) if isinstance(e, Var) else e, rename)


def _split_at_bounds(loop):
    """``for v { .. select(v < c, a, b) .. }`` as ``for v < c { .. a .. }`` then the rest with
    ``b``; at every such bound inside the loop. A concatenation is such a select, one per
    boundary between its parts (the ONNX importer's ``Concat``): split, each range reads only
    its own part, where the select evaluated every part at every element. Serial loops of a
    static extent only: a parallel loop keeps its one range of rows."""
    if not (isinstance(loop, For) and loop.kind == "serial" and isinstance(loop.extent, Const)):
        return loop
    values = _let_values(loop.body)
    extent = loop.extent.value
    cuts = sorted({c for st in walk_stmt(loop.body) for e in stmt_exprs(st) for x in walk_expr(e)
                   if isinstance(x, Select) and (c := _cut(substitute_expr(x.cond, values), loop.var)) is not None
                   and 0 < c < extent})
    if not cuts:
        return loop
    parts = []
    for first, end in zip([0] + cuts, cuts + [extent]):
        body = map_stmt(loop.body, lambda e: _decided(e, values, loop.var, first, end))
        var = loop.var
        if first:
            var = Var(f"{loop.var.name}_from{first}")
            body = substitute(body, {loop.var: Binary("add", var, Const(first))})
        parts.append(For(var, Const(end - first), body, loop.kind))
    return Seq(tuple(parts))


#: ``v < c`` and ``v >= c`` change value at ``c``; ``v <= c`` and ``v > c`` at ``c + 1``.
_CUT_OFFSET = {"lt": 0, "ge": 0, "le": 1, "gt": 1}


def _cut(cond, var):
    """Where ``cond``, a comparison of ``var`` with a number, changes value; None for other
    conditions."""
    if not (isinstance(cond, Cmp) and cond.op in _CUT_OFFSET and cond.a == var and isinstance(cond.b, Const)):
        return None
    return int(cond.b.value) + _CUT_OFFSET[cond.op]


def _decided(e, values, var, first: int, end: int):
    """``e``, or the branch a select of ``var`` against a bound takes for every ``var`` in
    ``[first, end)``."""
    if not isinstance(e, Select):
        return e
    cond = substitute_expr(e.cond, values)
    cut = _cut(cond, var)
    if cut is None or first < cut < end:
        return e
    holds_below = cond.op in ("lt", "le")
    return e.a if (end <= cut) == holds_below else e.b


def _reduce_in_blocks(loop):
    """``for r { for j { t[.., j] (+)= f(r, j) } }`` as ``for jb { for r { for jl < B {..} } }``
    over blocks of ``B`` columns (``REDUCE_BLOCK_BYTES``), then the columns left over.

    The matrix product and every reduction over a middle axis take this form: an output row
    that every iteration of the reduced loop ``r`` updates whole. Walked row by row, the row is
    loaded and stored once per ``r``; one block of it is loaded once, accumulated in vector
    registers over all of ``r`` (the block loop has a constant trip count, which LLVM unrolls,
    so the block's addresses are loop-invariant and its loads and stores leave the ``r`` loop),
    and stored once. Each element still takes its updates in ``r`` order: the same sums. Other
    statements are returned as they are."""
    match = _row_reduction(loop)
    if match is None or _one_block(match):
        return loop
    lets, inner, width = match
    name, extent = inner.var.name, inner.extent

    def over(runs):
        """``for r { lets; for c < count { body at first + c } .. }`` over ``runs`` of (column
        variable, first column, count): the runs side by side under one ``r`` loop, so that their
        accumulators are independent chains the CPU overlaps."""
        columns = []
        for var, first, count in runs:
            at = var if first == 0 else Binary("add", as_expr(first), var)
            columns.append(For(var, as_expr(count), substitute(inner.body, {inner.var: at})))
        nest = Seq(tuple(columns)) if len(columns) > 1 else columns[0]
        for bindings in reversed(lets):
            nest = Let(bindings, nest)
        return For(loop.var, loop.extent, nest)

    block = Var(f"{name}_block")
    blocks = extent.value // width if isinstance(extent, Const) else Binary("div", extent, Const(width))
    parts = [For(block, as_expr(blocks), over([(Var(f"{name}_lane"), Binary("mul", block, Const(width)), width)]))]
    first = dim_mul(blocks, width)
    if not isinstance(extent, Const):
        parts.append(over([(Var(f"{name}_left"), first, Binary("sub", extent, first))]))
        return Seq(tuple(parts))
    # The columns left over, in runs of halving width (100 floats: one block of 64, then runs of
    # 32 and 4 under one loop), so that each run, too, is a constant-trip loop LLVM unrolls into
    # registers; together they are less than one block.
    left, runs = extent.value - first, []
    while left:
        width //= 2
        if left >= width:
            runs.append((Var(f"{name}_left{width}"), first, width))
            first, left = first + width, left - width
    if runs:
        parts.append(over(runs))
    parts = [p for p in parts if not (isinstance(p.extent, Const) and p.extent.value == 0)]
    return Seq(tuple(parts)) if len(parts) > 1 else parts[0]


def _tile_rows(stage) -> list:
    """``for i { init(i); for r { for j { t[i, j] += f } } }`` whose row is narrow (at most half
    a register block) as ``for it { for k < R { init(i) }; for r { row iR; row iR + 1; ..} }``
    (each row its own ``for j``, ``i = it * R + k``), then the rows left over as they were;
    ``[stage]`` otherwise.

    A narrow row accumulates in one or two vectors, and each step of ``r`` waits for the last
    (16 columns of float32: one vector, 16 dependent additions per row). Interleaved, ``R``
    rows (``R * j`` up to a block, ``TILE_MAX_ROWS`` at most) are independent chains the CPU
    overlaps, and each load of ``f``'s shared operand serves ``R`` rows. Only where iteration
    ``i`` touches row ``i`` of what the stage writes and nothing else: rows are independent,
    and each element still takes its updates in ``r`` order."""
    if not (isinstance(stage, For) and stage.kind == "parallel"):
        return [stage]
    body = list(stage.body.stmts) if isinstance(stage.body, Seq) else [stage.body]
    matches = [_row_reduction(x) for x in body]
    matches = [m if m is not None and isinstance(m[1].extent, Const) and 2 * m[1].extent.value <= m[2] else None
               for m in matches]  # the narrow ones
    narrow = [m for m in matches if m is not None]
    if not narrow or not _row_local(stage):
        return [stage]
    rows = min(TILE_MAX_ROWS, min(width // inner.extent.value for _, inner, width in narrow))
    rows = 1 << (rows.bit_length() - 1)  # a power of two
    if rows < 2:
        return [stage]
    name = stage.var.name
    tile, k = Var(f"{name}_tile"), Var(f"{name}_row")
    row = {stage.var: Binary("add", Binary("mul", tile, Const(rows)), k)}
    parts = []
    for x, m in zip(body, matches):
        if m is None:
            parts.append(For(k, Const(rows), substitute(x, row)))
            continue
        lets, inner, _ = m
        columns = inner
        for bindings in reversed(lets):
            columns = Let(bindings, columns)
        # The rows written out one after the other (not a loop over k, which LLVM would keep
        # as a loop, its accumulators in memory): each row's loop over j is one vector.
        at = {stage.var: Binary("mul", tile, Const(rows))}
        copies = [substitute(columns, {stage.var: Binary("add", at[stage.var], Const(n))} if n else at)
                  for n in range(rows)]
        parts.append(For(x.var, x.extent, Seq(tuple(copies))))
    extent = stage.extent
    tiles = Const(extent.value // rows) if isinstance(extent, Const) else Binary("div", extent, Const(rows))
    done = dim_mul(tiles.value if isinstance(tiles, Const) else tiles, rows)
    out = [For(tile, tiles, Seq(tuple(parts)), stage.kind)]
    left = Var(f"{name}_left")
    count = extent.value - done if isinstance(extent, Const) else Binary("sub", extent, done)
    if count != 0:
        out.append(For(left, as_expr(count), substitute(stage.body, {stage.var: Binary("add", as_expr(done), left)})))
    return out


def _row_local(stage) -> bool:
    """Whether iteration ``i`` of ``stage`` writes, and reads of what it writes, row ``i`` only."""
    values = _let_values(stage)
    written = {x.buffer.name for x in walk_stmt(stage) if isinstance(x, (Store, Reduce))}

    def own_row(indices) -> bool:
        return bool(indices) and substitute_expr(indices[0], values) == stage.var

    for x in walk_stmt(stage):
        if isinstance(x, (Store, Reduce)) and not own_row(x.indices):
            return False
        for e in stmt_exprs(x):
            if any(isinstance(y, Load) and y.buffer.name in written and not own_row(y.indices) for y in walk_expr(e)):
                return False
    return True


def _one_block(match) -> bool:
    """Whether a row reduction's row is one constant-trip loop of at most a block already."""
    _, inner, width = match
    columns = inner.extent.value if isinstance(inner.extent, Const) else None
    return columns is not None and columns <= width and not columns & (columns - 1)


def _row_reduction(loop):
    """``(lets, inner loop, block width)`` where ``loop`` is a serial ``for r`` whose body (after
    Lets) is one serial ``for j`` updating one buffer at ``[.., j]`` with indices free of ``r``,
    reading nothing of that buffer; else None. The width: a block's elements of that buffer."""
    if not (isinstance(loop, For) and loop.kind == "serial"):
        return None
    lets, inner = [], loop.body
    while isinstance(inner, Let):
        lets.append(inner.bindings)
        inner = inner.body
    if not (isinstance(inner, For) and inner.kind == "serial"):
        return None
    body = list(walk_stmt(inner.body))
    reduces = [x for x in body if isinstance(x, Reduce)]
    if len(reduces) != 1 or any(not isinstance(x, (Let, Reduce)) for x in body):
        return None
    (update,) = reduces
    values = _let_values(loop)
    target = [substitute_expr(i, values) for i in update.indices]
    if (not target or target[-1] != inner.var or any(loop.var in expr_vars(i) for i in target)
            or any(inner.var in expr_vars(i) for i in target[:-1])
            or any(loads_of(e, update.buffer.name) for x in body for e in stmt_exprs(x))):
        return None
    return lets, inner, max(1, REDUCE_BLOCK_BYTES // update.buffer.dtype.itemsize)


def _row_init_with_updates(init, updates):
    """One stage of ``init`` (a nest that writes row ``r`` of a buffer in its iteration ``r``:
    the fill or copy a scatter starts from) and ``updates`` (an update nest whose iteration
    ``r`` updates row ``r`` of that buffer and nothing else, and reads no row of it), or None
    where they are not such a pair. Filled and then updated while it is in the cache, a row is
    read from memory once instead of twice; every row is still written before it is updated,
    and no iteration touches another's row, so the result is the same."""
    if not (isinstance(init, For) and isinstance(updates, For) and init.kind == updates.kind == "parallel"
            and init.extent == updates.extent):
        return None
    stores = [x for x in walk_stmt(init) if isinstance(x, (Store, Reduce))]
    reduces = [x for x in walk_stmt(updates) if isinstance(x, (Store, Reduce))]
    target = {x.buffer for x in stores}
    if (len(target) != 1 or not reduces or any(not isinstance(x, Reduce) for x in reduces)
            or {x.buffer for x in reduces} != target or any(not isinstance(x, Store) for x in stores)):
        return None
    (buffer,) = target
    if buffer.shape[0] != _size(init.extent) and buffer.shape[0] != init.extent:
        return None
    init_values, update_values = _let_values(init), _let_values(updates)
    if any(substitute_expr(x.indices[0], init_values) != init.var for x in stores):
        return None
    if any(substitute_expr(x.indices[0], update_values) != updates.var for x in reduces):
        return None
    reads = [e for st in (init, updates) for x in walk_stmt(st) for e in stmt_exprs(x)]
    if any(loads_of(e, buffer.name) for e in reads):
        return None
    body = Seq((substitute(init.body, {init.var: updates.var}), updates.body))
    return replace(updates, body=body)


def stage_extent(stage):
    """The size of a stage's parallel dimension: its loop extent, or the output rows. An int, or
    the int64 expression of a symbolic size, which the runtime evaluates per call."""
    if isinstance(stage, For) and stage.kind in CHUNKED_LOOPS:
        return _size(stage.extent)
    if isinstance(stage, For) and stage.kind == "parallel_rows":
        return next(x for x in walk_stmt(stage) if isinstance(x, Reduce)).buffer.shape[0]
    return 1


def _size(extent):
    return extent.value if isinstance(extent, Const) else extent


def _invariant_bound(extent):
    """Of ``min(k, x)`` (the last block of a blocked loop), the operand ``k`` that uses no loop
    variable (a number, or an expression of the symbolic sizes); else ``extent``."""
    if isinstance(extent, Binary) and extent.op == "min":
        bounds = [x for x in (extent.a, extent.b) if not expr_vars(x)]
        if bounds:
            return bounds[0]
    return extent


def stage_work(stage):
    """How many innermost iterations a stage runs: decides whether threads pay off. An int, or
    an int64 expression of the symbolic sizes (loop extents inside a symbolic loop that depend
    on its variable count as 1, or as their bound: ``min(64, n - 64 b)`` as 64). Prefetches are
    hints, not work: they count as none."""
    def work(s):
        if isinstance(s, Prefetch):
            return 0
        if isinstance(s, For):
            extent, inner = _size(_invariant_bound(s.extent)), work(s.body)
            if isinstance(inner, int) and inner == 0:
                return 0
            return dim_mul(extent if isinstance(extent, int) or not expr_vars(extent) else 1, inner)
        if isinstance(s, Seq):
            return dim_sum([work(x) for x in s.stmts])
        if isinstance(s, If):  # one branch runs: the larger counts
            return work(s.then) if s.orelse is None else _dim_max(work(s.then), work(s.orelse))
        if isinstance(s, Let):
            return work(s.body)
        return 1
    return work(stage)


def _dim_max(a, b):
    """The larger of two sizes (ints or int64 expressions), an int when both are."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return a if a == b else Binary("max", as_expr(a), as_expr(b))


def _gathers(stage):
    """``(load, dimension, index width)`` for every load in the stage's innermost loops whose
    index in that dimension reads data (another buffer) and changes with the loop: the loads a
    vectoriser turns into gathers (a row copy, whose index is fixed across its loop, is not
    one). The index width is the widest element of data the index reads, in bytes; both are
    found through the loop's Lets too."""
    for loop in walk_stmt(stage):
        if not isinstance(loop, For) or not _innermost(loop):
            continue
        facts = _over_lets(loop.body, _index_facts)
        for load in (x for s in walk_stmt(loop.body) for e in stmt_exprs(s) for x in walk_expr(e)):
            if isinstance(load, Load):
                for dim, index in enumerate(load.indices):
                    width, uses = _index_facts(index, facts)
                    if width and loop.var in uses:
                        yield load, dim, width


def _innermost(loop: For) -> bool:
    """Whether no loop runs inside ``loop``."""
    return not any(isinstance(x, For) for x in walk_stmt(loop.body))


def _index_facts(e, facts: dict):
    """(the widest element of data ``e`` reads, in bytes, 0 for none; the variables it uses),
    through the Let variables that ``facts`` describes (in time linear in the bindings, where
    writing the values out would grow with every link of a chain of fused gathers)."""
    width, uses = 0, set()
    for x in walk_expr(e):
        if is_data_load(x):
            width = max(width, x.buffer.dtype.itemsize)
        elif isinstance(x, Var) and x in facts:
            width, uses = max(width, facts[x][0]), uses | facts[x][1]
        elif isinstance(x, Var):
            uses.add(x)
    return width, frozenset(uses)


def position_facts(e, facts: dict) -> tuple:
    """(whether ``e`` reads data, whether it divides a loop variable or takes its remainder),
    through the Let variables ``facts`` describes (variable -> its value's facts, in time
    linear in the bindings, as ``_index_facts``)."""
    data = divides = False
    for x in walk_expr(e):
        if is_data_load(x):
            data = True
        elif isinstance(x, Var) and x in facts:
            data, divides = data or facts[x][0], divides or facts[x][1]
        elif isinstance(x, Binary) and x.op in ("div", "mod") and expr_vars(x):
            divides = True
    return data, divides


def lane_sum(buffer, indices, facts: dict) -> tuple:
    """The positions of the coordinates of a load of ``buffer`` whose sum the LLVM renderer
    adds first and freezes where the load is a gather built lane by lane (``_lane_terms`` in
    ``codegen/llvm.py``), or ``()``: the coordinates that read data or divide a loop variable
    (``position_facts``; ``facts``: the Lets'), where there are two or more and the elements
    are 32 bits or wider. Such a load is an element of ``gather_nd`` (two indices) or a gather
    in a loop ``collapse_short_loops`` made of two (an index beside the column ``w % E``).

    Why: LLVM's instruction combiner splits a pointer to ``base + (a + b)`` into
    ``(base + a) + b``, and the vectoriser then moves ``a`` and ``b`` out of their vectors
    lane by lane, one extract per coordinate; a sum it cannot split it adds in the vector and
    moves out once. Narrower elements gained nothing (a gather along a middle axis of float16
    rows: 0.62 -> 0.66 ms)."""
    found = tuple(k for k, (data, divides) in enumerate(_coordinate_facts(buffer, indices, facts)) if data or divides)
    return found if len(found) >= 2 else ()


def _coordinate_facts(buffer, indices, facts: dict) -> list:
    """``position_facts`` of each coordinate of an access of ``buffer``; none for elements
    narrower than 32 bits, which both rules of ``lane_sum`` and ``interleave_once`` leave alone."""
    return [position_facts(i, facts) for i in indices] if buffer.dtype.itemsize >= 4 else []


def interleave_once(loop: For) -> bool:
    """Whether ``loop`` is an innermost loop with a gather of elements of 32 bits or wider at
    an index and a divided column (``position_facts``: one coordinate reads data, another
    divides the loop variable without reading data, as in a loop ``collapse_short_loops`` made
    of two: ``x[i0, index[i0, w], w % 16]``): where gathers are built lane by lane, its
    vectorised body should run one vector of iterations a pass, not several interleaved.

    Why: LLVM interleaves a loop that carries a reduction (the index flag) up to four vectors
    a pass, and here each vector's lanes compute a division's remainder and move their
    addresses out one by one: the interleaved body, about 200 instructions, ran slower than one
    vector a pass. Two threads on a Zen 4, 1 M float32 elements, interleaved with the default,
    this rule alone: a gather along a middle axis of 16-element rows 1.59 -> 1.09 ms, along
    axis 0 of 61-element rows 3.15 -> 2.02 ms. Element gathers whose column is the loop
    variable itself (a gather along axis 0 of 64-element rows, along the last axis, a flattened
    take) ran 4-12% slower so, and element ``gather_nd`` gained nothing consistent; they keep
    the default. Narrower elements are inserted into one vector register one after another, a
    chain that only interleaved vectors overlap (float16 rows along a middle axis: 0.62 -> 0.90
    ms with one vector a pass)."""
    return _innermost(loop) and _gathers_at_divided_column(loop)


def _gathers_at_divided_column(loop: For, any_width: bool = False) -> bool:
    """Whether a load in ``loop`` of elements of 32 bits or wider (of any width, ``any_width``)
    has a coordinate that reads data and another that divides the loop variable without
    reading data (``position_facts``)."""
    facts = _over_lets(loop.body, position_facts)
    for load in (x for st in walk_stmt(loop.body) for e in stmt_exprs(st) for x in walk_expr(e) if is_data_load(x)):
        found = ([position_facts(i, facts) for i in load.indices] if any_width
                 else _coordinate_facts(load.buffer, load.indices, facts))
        if any(data for data, _ in found) and any(divides and not data for data, divides in found):
            return True
    return False


def independent_scatter(loop: For) -> bool:
    """Whether ``loop`` is an innermost loop that writes one buffer through data indices (a
    scatter) and no two of its iterations touch one element of it: every write to the buffer,
    and every read of it, indexes it with the same indices, one of which is the loop's variable
    itself (so iterations differ in that coordinate). A scatter along axis 0 updates
    ``out[index[i, j], j]`` for every ``j`` of a row: distinct elements.

    Why: LLVM cannot see that the data index leaves the elements distinct, and keeps such a loop
    scalar; told so (``llvm.loop.parallel_accesses``), it vectorises the index arithmetic, the
    combining and the conversions between the element-by-element loads and stores, and each
    element still gets its updates in row-major order of the index, as the contract asks. On a
    Zen 4, two threads, 1 M updates along axis 0: float16 add 3.6 -> 1.7 ms, float32 add 2.3 ->
    1.7, max 3.0 -> 1.7; 25 M float32 adds 341 -> 199 ms. One buffer: a mean, which writes a
    sum and a count, each element by element, ran slower so (4.0-5.6 -> 4.4-6.6 ms)."""
    if not _innermost(loop):
        return False
    facts = _over_lets(loop.body, _index_facts)
    if loop.var in facts:  # a Let that rebinds the loop's variable
        return False
    writes: dict = {}  # a written buffer's name -> (the Buffer written, its indices)
    through_data = False
    for st in walk_stmt(loop.body):
        if isinstance(st, (Store, Reduce)):
            access = (st.buffer, st.indices)
            if writes.setdefault(st.buffer.name, access) != access or not _walks_a_dimension(loop, *access):
                return False
            through_data = through_data or any(_index_facts(i, facts)[0] for i in st.indices)
    # Buffers of one name are views of one memory: a read of it must be the write's element.
    loads = (x for st in walk_stmt(loop.body) for e in stmt_exprs(st) for x in walk_expr(e) if isinstance(x, Load))
    return through_data and len(writes) == 1 and all(writes.get(x.buffer.name, (x.buffer, x.indices))
                                                     == (x.buffer, x.indices) for x in loads)


def _walks_a_dimension(loop: For, buffer, indices) -> bool:
    """Whether one of ``indices`` is ``loop``'s variable itself, over at most that dimension's
    extent, or ``first + var`` with ``first`` fixed in the loop (a block's column,
    ``_in_column_blocks``; inside the dimension, as every coordinate the lowering makes is):
    two iterations then differ in that coordinate of the element they index."""
    for index, extent in zip(indices, buffer.shape):
        if _is_offset(index, loop.var):
            return True
        if index != loop.var:
            continue
        if as_expr(extent) == loop.extent or (isinstance(extent, int) and isinstance(loop.extent, Const)
                                             and loop.extent.value <= extent):
            return True
    return False


def _is_offset(index, var: Var) -> bool:
    """Whether ``index`` is ``first + var``, ``first`` not using ``var``."""
    return isinstance(index, Binary) and index.op == "add" and index.b == var and var not in expr_vars(index.a)


def gather_reach(stage):
    """How far a gather of the stage's innermost loops reaches (``_gathers``): that dimension's
    extent times its stride, in bytes, the largest. 0 where the stage gathers nothing; None
    where such an extent is a symbolic size (known only at the call).

    Why: a vector gather from a span that caches hold (one row of a take along the last axis)
    is slower on some CPUs than the scalar loads the vectoriser builds a vector from lane by
    lane, and faster from a span beyond them (rows picked from a whole table), where those
    loads miss the cache in a long dependent series of extracts and inserts."""
    reach = 0
    for load, dim, _ in _gathers(stage):
        extent, stride = load.buffer.shape[dim], load.buffer.strides[dim]
        if not (isinstance(extent, int) and isinstance(stride, int)):
            return None
        reach = max(reach, extent * stride * load.buffer.dtype.itemsize)
    return reach


def narrow_gathers(stage) -> bool:
    """Whether the stage gathers, and every gather reads 32-bit data through 32-bit indices:
    one vector of indices addresses one whole vector of data, 16 lanes with AVX-512.

    Why: where vector gathers are microcoded (``gather_reach``), the vectoriser's lane-by-lane
    alternative of such a gather widens two vectors of indices to 64 bits and extracts and
    inserts 16 lanes, which was slower even within the L2 cache (on a Zen 4, 1 M float32
    elements gathered along the last axis through int32 indices: 0.68 -> 0.54 ms on two
    threads, 0.92 -> 0.65 on one; int32 data 0.62 -> 0.52). Wider data or indices fill half as
    many lanes per gather and gained nothing consistent below the L2 size (64-bit data along a
    middle axis lost a fifth), so they keep the reach rule."""
    found = False
    for load, _, index_width in _gathers(stage):
        if load.buffer.dtype.itemsize != 4 or index_width != 4:
            return False
        found = True
    return found


def wide_row_gathers(stage) -> bool:
    """Whether the stage gathers, and every gather reads 64-bit data along a dimension of unit
    stride (elements of one row, as a gather or take along the last axis does).

    Why: where the vectoriser builds such gathers lane by lane (``gather_reach``), a 512-bit
    vector of 64-bit lanes costs cross-lane extracts and the registers to spill them, and
    256-bit vectors ran faster (1 M int64 or float64 elements along the last axis, one or two
    threads: 5-16 % in three runs); with 32-bit lanes, or along a strided dimension (a middle
    axis), they ran 5-14 % slower."""
    found = False
    for load, dim, _ in _gathers(stage):
        if load.buffer.dtype.itemsize != 8 or load.buffer.strides[dim] != 1:
            return False
        found = True
    return found


def threaded_gathers(stage) -> bool:
    """Whether the stage gathers, and its gathers, if they reach far (``gather_reach``), are
    better built lane by lane where it runs on several threads at once: unless they are narrow
    (``narrow_gathers``).

    Why: a microcoded vector gather runs on a part of the core that the core's hardware threads
    share. Where vector gathers are microcoded (a Zen 4: two threads, each looping over vector
    gathers from the L1 cache, took 0.48 s where one alone took 0.26) a stage split over threads
    that are siblings (as a virtual machine's CPUs may be, whatever it reports) halves each
    one's gathers; scalar loads keep their pace. Split over two such threads, a gather along
    axis 0 of 1 M float32 elements ran in 0.99 ms lane by lane against 1.34 with vector gathers,
    a take of a flattened 2 MB table 0.89 against 1.15, the same of 4 M elements 4.0 against
    5.7; run whole, on one thread, vector gathers stay faster. A gather of 32-bit data through
    32-bit indices fills sixteen lanes per gather and kept its lead split. One through index
    tuples (element ``gather_nd``) ran slower lane by lane while each lane moved its two
    coordinates out of their vectors one by one (1 M float32 elements: 3.1 ms against 1.8);
    with their sum added first (``lane_sum``) it runs faster so, two threads, 1 M elements,
    interleaved in one process, two runs: float32 3.86/4.33 -> 3.39/3.42 ms, float64 5.65/6.08
    -> 4.53/5.05, int32 4.11/5.12 -> 3.30/4.96, int64 6.09/5.66 -> 5.81/5.55."""
    return next(_gathers(stage), None) is not None and not narrow_gathers(stage)


def flagged_index_width(stage) -> int:
    """The widest element, in bytes, of the data the stage's flag tests (``if cond: flag``)
    read, through its Lets; 0 where it flags nothing."""
    facts = _over_lets(stage, _index_facts)
    return max([0] + [_index_facts(s.cond, facts)[0] for s in walk_stmt(stage)
                      if isinstance(s, If) and isinstance(s.then, FlagIndexError)])


def dim_sum(sizes):
    """The sum of sizes (ints or int64 expressions), an int when every one is."""
    out = 0
    for d in sizes:
        out = out + d if isinstance(out, int) and isinstance(d, int) else (
            d if out == 0 else out if d == 0 else Binary("add", as_expr(out), as_expr(d)))
    return out


# -- defer_index_checks -------------------------------------------------------------------------


def _check_nest(stage):
    """``(index load, condition, check id)`` of a check nest ``for ..: if cond: report``."""
    s = stage
    while isinstance(s, (For, Let)):
        s = s.body if isinstance(s, For) else substitute(s.body, _let_values(s))
    if not (isinstance(s, If) and s.orelse is None and isinstance(s.then, ReportIndexError)):
        return None
    # The sizes a symbolic bound reads are loop-invariant scalars, not a second index.
    loads = set(data_loads(s.cond))
    if len(loads) != 1:
        return None
    (load,) = loads
    if not all(isinstance(i, Var) or (isinstance(i, Const) and i.value == 0) for i in load.indices):
        return None
    return load, s.cond, s.then.check_id


def _covers(stage, index: Load) -> bool:
    """Whether running ``stage`` whole evaluates a load of every element of the index buffer
    (unconditionally: statements under an ``if`` do not count; ``select`` operands do, since the
    CPU evaluates both)."""
    name, shape = index.buffer.name, index.buffer.shape
    groups: dict = {}

    def visit(s, extents):
        if isinstance(s, For):
            # A symbolic extent is at least 1 wherever shape-generic code runs (symbolic.py).
            if isinstance(s.extent, Const) and s.extent.value <= 0 or expr_vars(s.extent):
                return False
            return visit(s.body, {**extents, s.var: _size(s.extent)})
        if isinstance(s, Seq):
            return any([visit(x, extents) for x in s.stmts])
        for e in stmt_exprs(s):
            for load in loads_of(e, name):
                record(load, extents)
        return False

    def record(load, extents):
        partial, seen_vars = None, set()
        for a, (i, d) in enumerate(zip(load.indices, shape)):
            if isinstance(i, Var) and extents.get(i) == d and i not in seen_vars:
                seen_vars.add(i)
            elif isinstance(i, Const) and d == 1 and i.value == 0:
                pass
            elif isinstance(i, Const) and partial is None:
                partial = a
            else:
                return
        key = (partial, tuple(None if a == partial else i for a, i in enumerate(load.indices)))
        groups.setdefault(key, set()).add(None if partial is None else load.indices[partial].value)

    visit(stage, {})
    return any(p is None or isinstance(shape[p], int) and values == set(range(shape[p]))
               for (p, _), values in groups.items())


def _is_flag(s) -> bool:
    return isinstance(s, If) and isinstance(s.then, FlagIndexError)


def _head_flags(body, takes) -> tuple:
    """(the flags at the head of ``body``, as far as ``takes`` holds for each, the statements
    after them), as lists."""
    stmts = list(body.stmts) if isinstance(body, Seq) else [body]
    n = 0
    while n < len(stmts) and _is_flag(stmts[n]) and takes(stmts[n]):
        n += 1
    return stmts[:n], stmts[n:]


def _flag_loads(stage, index: Load, cond, check_id):
    """Before every statement that loads the index buffer unconditionally, flag an
    out-of-range value (``_covers`` has proven those loads reach every element, so loads
    under an ``if`` need no flag of their own)."""
    check_vars = index.indices

    def flags_for(s):
        out = []
        # A load at a position bound by the statement's own Let has no flag in front of it
        # (``_covers`` never counts such loads either).
        local = {v for v, _ in s.bindings} if isinstance(s, Let) else set()
        for e in stmt_exprs(s):
            for load in loads_of(e, index.buffer.name):
                if local and local & expr_vars(load):
                    continue
                mapping = {v: i for v, i in zip(check_vars, load.indices) if isinstance(v, Var)}
                bad = map_expr(cond, lambda x: mapping.get(x, x) if isinstance(x, Var) else simplify_expr(x))
                flag = If(bad, FlagIndexError(check_id))
                if flag not in out:
                    out.append(flag)
        return out

    def visit(s, seen, top=False):
        """``seen``: the conditions flags in front of ``s`` already test. Every flag raises the
        same stage-wide status, so one flag per condition is enough, and flags (which load the
        index too) need no flags of their own: folding several checks of one index buffer into
        one stage adds one flag, not twice as many for every check. A flag that does not depend
        on a loop's variable moves in front of that loop (not out of the stage's own loop), so
        an inner loop that copies a slice stays a plain, vectorisable copy."""
        if isinstance(s, For):
            loop = _test_first_pass(replace(s, body=visit(s.body, set())))
            return loop if top else _hoist_flags(loop)
        if isinstance(s, Seq):
            out = []
            for x in s.stmts:
                if _is_flag(x):
                    seen.add(x.cond)
                    out.append(x)
                else:  # one level: a statement's flags stand at the head of its loop's body
                    v = visit(x, seen)
                    out.extend(v.stmts if isinstance(v, Seq) else (v,))
            return Seq(tuple(out))
        if _is_flag(s):
            return s
        flags = [f for f in flags_for(s) if f.cond not in seen]
        seen.update(f.cond for f in flags)
        return Seq(tuple(flags) + (s,)) if flags else s

    return visit(stage, set(), top=True)


def _test_first_pass(loop: For):
    """``for v { for w { flags(w); rest } }``, where the flags do not use ``v``, as
    ``for v { if v == first { for w { flags(w); rest } } else { for w { rest } } }``: every pass
    of the inner loop tests the same index values, so the first pass a call makes (``first``:
    ``range_begin`` in a loop threads share in chunks, else 0) tests them for all.

    Why: a ``take`` along the last axis re-reads its index for every row, and tested it every
    time (64 rows of 16 384 elements: a million tests for 16 384 values); the first pass tests
    them where it loads them, the others copy with no test."""
    inner = loop.body
    if not isinstance(inner, For) or loop.var in expr_vars(inner.extent):
        return loop
    flags, rest = _head_flags(inner.body, lambda f: loop.var not in expr_vars(f.cond))
    if not flags or not rest or _is_flag(rest[0]):  # (a flag that uses ``v`` stays in every pass)
        return loop
    first = RANGE_BEGIN if loop.kind in CHUNKED_LOOPS else Const(0)
    untested = replace(inner, body=sequence(rest))
    return replace(loop, body=If(Cmp("eq", loop.var, first), inner, untested))


def _hoist_flags(loop: For):
    """``loop`` with the flags at the head of its body that do not use its variable moved in
    front of it. (A flag raised for a loop that runs zero times only costs the deferred check a
    run that finds nothing.)"""
    hoisted, stmts = _head_flags(loop.body, lambda f: loop.var not in expr_vars(f.cond))
    if not hoisted or not stmts:
        return loop
    rest = stmts[0] if len(stmts) == 1 else Seq(tuple(stmts))
    return Seq(tuple(hoisted) + (replace(loop, body=rest),))


def _check_in_blocks(loop):
    """``for i { flags(i); slice(i) }``, where ``slice`` holds a loop (a row copied or updated),
    as ``for b { for c < K { flags(bK + c) }; for r < K { slice(bK + r) } }`` (``_block_size``;
    the last block shorter where ``K`` does not divide the extent). Other statements are
    returned as they are.

    Why: the flag tested row by row is a handful of scalar instructions in a loop that is
    otherwise one vector load and store per row, and it slowed such loops by a fifth to a
    quarter (a gather of 64-byte rows, 4 M elements, one thread: 2.5 ms against 2.0 ms with no
    test at all). A block's tests are one vectorised pass over indices that stay in L1 for its
    rows, which then copy with no test: within a few percent of no test. Element loops (no loop
    under the flag) are left alone, LLVM vectorises their flag with the elements, unless they
    scatter and stay scalar (``_scalar_scatter``) or test index tuples (``_tests_tuples``)."""
    if not isinstance(loop, For):
        return loop
    flags, rest = _head_flags(loop.body, lambda f: loop.var in expr_vars(f.cond))
    size = _block_size(loop)
    if not flags or size is None or not (any(isinstance(x, For) for s in rest for x in walk_stmt(s))
                                         or _scalar_scatter(loop) or _tests_tuples(flags)):
        return loop
    name = loop.var.name

    def block(over, first, count):
        return Seq((over(Var(f"{name}_check"), flags), over(Var(f"{name}_slice"), rest)))
    return _in_blocks(loop, size, block)


def _in_blocks(loop: For, size, block, suffix: str = "cblock"):
    """``loop`` as ``for b { block(over, first, count) }``, over blocks of ``size`` iterations
    (the last one shorter where ``size`` does not divide the extent); ``over(var, stmts)`` is
    the loop of ``stmts`` over the block's iterations, ``loop``'s variable taken as ``first + var``
    (``first = b * size``), and ``count`` their number. ``b`` is named after ``loop``'s variable
    and ``suffix``."""
    extent, name = loop.extent, loop.var.name
    block_var = Var(f"{name}_{suffix}")
    first = Binary("mul", block_var, size)
    if isinstance(extent, Const):
        blocks = Const(-(-extent.value // size.value))
    else:
        blocks = Binary("div", Binary("add", extent, Binary("sub", size, Const(1))), size)
    if isinstance(extent, Const) and extent.value % size.value == 0:
        count = size
    else:
        count = Binary("min", size, Binary("sub", extent, first))

    def over(var, part):
        return For(var, count, substitute(sequence(part), {loop.var: Binary("add", first, var)}))
    return For(block_var, blocks, block(over, first, count), loop.kind)


def _scalar_scatter(loop: For) -> bool:
    """Whether ``loop`` is an innermost loop that writes through an index read from data and
    whose iterations may update one element (not ``independent_scatter``): a loop LLVM keeps
    scalar, element by element.

    Why: there a flag tested element by element is scalar too: an add, a compare, a set and an
    or of a status for every update, in a loop of about fourteen instructions per update (a
    scatter-add along the last axis); in blocks, the tests are one vectorised pass over the
    block's indices, which stay in L1 for its updates."""
    if not _innermost(loop) or independent_scatter(loop):
        return False
    facts = _over_lets(loop.body, _index_facts)
    return any(isinstance(st, (Store, Reduce)) and any(_index_facts(i, facts)[0] for i in st.indices)
               for st in walk_stmt(loop.body))


def _tests_tuples(flags) -> bool:
    """Whether ``flags`` test two or more elements of one 64-bit index buffer in an iteration:
    the coordinates of an index tuple (``gather_nd`` or ``scatter_nd`` of elements).

    Why: where the host's gathers are scalar loads, LLVM reads such tuples coordinate by
    coordinate to address their elements, then moves the coordinates into vectors for the tests
    (inserts, packs and spills, about seven instructions per tuple on AVX2). In blocks the tests
    read the block's tuples as vectors, and the element loop after them is the scalar loads
    alone: a ``gather_nd`` of 1 M element pairs, two threads, interleaved runs on a Zen 3,
    float32 2.3 -> 2.1 ms, float64 7.6 -> 6.6, int64 11.4 -> 8.7 (one thread 4.3 -> 3.6, 9.4
    -> 6.9, 15.2 -> 10.6). Tuples of 32-bit indices are read as vectors with the gather's
    arithmetic and tested there, and blocks were slower (1.1-1.2 -> 1.4-1.6 ms)."""
    seen = {}
    for flag in flags:
        for load in walk_expr(flag.cond):
            if is_data_load(load) and load.buffer.dtype.itemsize == 8:
                seen.setdefault(load.buffer, set()).add(load.indices)
    return any(len(elements) > 1 for elements in seen.values())


def _block_size(loop, block: int = CHECK_BLOCK):
    """How many iterations of ``loop`` a block takes (a Const, or an expression of the symbolic
    sizes), or None where the loop is too short to block: ``block`` (``CHECK_BLOCK`` for
    ``_check_in_blocks``, ``VERSION_BLOCK`` for ``version_checked_loops``), except in a loop
    the runtime splits across threads (``parallel``), whose blocks are what threads share: there at most a ``SPLIT_BLOCKS``-th of the extent (200 rows
    in blocks of 64 would be four shares, two of them uneven, for any number of threads). A
    ``parallel_rows`` loop is split by output row, each chunk walking every update: its blocks
    are not shared out."""
    extent, split = loop.extent, loop.kind == "parallel"
    if isinstance(extent, Const):
        size = min(block, extent.value // SPLIT_BLOCKS) if split else block
        return Const(size) if size >= MIN_CHECK_BLOCK and extent.value > size else None
    if not split:
        return Const(block)
    share = Binary("max", Const(1), Binary("div", extent, Const(SPLIT_BLOCKS)))
    return Binary("min", Const(block), share)


def _can_report(stage) -> bool:
    """Whether running ``stage`` may report an index error."""
    return any(isinstance(x, ReportIndexError) for x in walk_stmt(stage))


def defer_index_checks(kernel: Kernel) -> Kernel:
    """Fold ``mode="raise"`` checks into the loop that reads the index anyway.

    A check nest reads the whole index tensor once more. Where a later stage of the kernel
    loads every index element unconditionally, that stage sets a flag when it meets a bad value
    (a vectorisable or-reduction, no early exit) and the check nest moves behind it as a
    ``deferred_check`` that runs only if the flag was set, to find and report the first bad
    position exactly as before. Reporting order between checks is kept: a check is deferred
    only when no other check stands between it and the stage that takes it over."""
    stages = list(kernel_stages(kernel))
    k = len(stages) - 1
    while k >= 0:
        stage = stages[k]
        parts = _check_nest(stage) if isinstance(stage, For) and stage.kind == "parallel_check" else None
        if parts is not None:
            index, cond, check_id = parts
            for j in range(k + 1, len(stages)):
                later = stages[j]
                # A stage that can report an error itself (a check nest, whatever its shape, or
                # a deferred check) would then report before this check: the order is lost.
                if not isinstance(later, For) or _can_report(later):
                    break
                if _covers(later, index):
                    flagged = _flag_loads(later, index, cond, check_id)
                    stages[j] = _rewrite_loops(flagged, _check_in_blocks, _is_flag)
                    stages.insert(j + 1, replace(stage, kind="deferred_check"))
                    del stages[k]
                    break
        k -= 1
    return replace(kernel, body=Seq(tuple(stages)))


# -- version_checked_loops ----------------------------------------------------------------------

#: An innermost loop that tests its indices for ``mode="raise"`` runs in blocks of this many
#: iterations (``version_checked_loops``): 2 KB of int64 indices, which stay in L1 between a
#: block's test and its elements.
VERSION_BLOCK = 256
#: A loop shorter than a block is versioned whole from this many iterations.
MIN_VERSIONED = 16


def version_checked_loops(kernel: Kernel) -> Kernel:
    """An innermost loop ``for v { flags(v); rest(v) }``, every flag testing an index against
    an axis (``checked_bound``), as blocks of ``VERSION_BLOCK`` iterations
    ``if every(c < K: each such index at bK + c in [0, size)) { for r < K { rest'(bK + r) } }
    else { for r < K { flags(bK + r); rest(bK + r) } }``: ``rest'`` is ``rest`` with every
    guard of those indices decided (``_assume_positions``), so a block of valid, non-negative
    indices runs with no flag and no position arithmetic; any other block (a negative index, a
    bad one) runs as before, flags and all. A loop shorter than a block (``MIN_VERSIONED``
    iterations or more, not split across threads) is one such block. Loops left alone, each
    slower versioned: those whose coordinate divides the loop variable (a collapsed loop's
    ``w % 13``, which the blocked loop computed from a second induction variable), a scatter
    whose updates vectorise (``independent_scatter``: its test went with the update's vector;
    along axis 0, 1 M float32, 2.9-3.2 -> 3.2-3.6 ms), and blocks of rows (see
    ``_versioned_check_block``).

    Why: the flag (an add, a compare or shift and an or per vector) and the guarded position (a
    mask or two selects) are a fifth to a third of the instructions of an element gather whose
    loads are built lane by lane, and fewer instructions per element keep more of its loads in
    flight. The block's test is one vectorised pass over indices that stay in L1 for its
    elements. Interleaved runs, two threads on a Zen 3, 1 M float32 elements: see the README's
    Performance section (versioned blocks of checked indices)."""
    stages = [_rewrite_loops(stage, _versioned, _is_flag) for stage in kernel_stages(kernel)]
    return replace(kernel, body=Seq(tuple(stages)))


def _versioned(loop):
    """``loop`` versioned where ``version_checked_loops`` takes it; else itself."""
    if not isinstance(loop, For):
        return loop
    return _versioned_elements(loop) if _innermost(loop) else _versioned_check_block(loop)


def _guards(flags, var):
    """``(facts, every)`` of the index tests ``flags`` (of iteration ``var``): each index load
    mapped to the sizes it is tested against, and ``every(first, count)``, the Every that says
    whether all of them lie in ``[0, size)`` at the iterations ``[first, first + count)``; None
    where a flag tests anything else."""
    bounds = [checked_bound(f.cond) for f in flags]
    if not flags or any(b is None for b in bounds):
        return None
    facts: dict = {}
    for raw, size in bounds:
        facts.setdefault(raw, set()).add(size)
    valid = logical_and(*[_in_positions(raw, size) for raw, size in bounds])

    def every(first, count):
        check = Var(f"{var.name}_valid")
        position = check if first == Const(0) else Binary("add", first, check)
        return Every(check, count, substitute_expr(valid, {var: position}))
    return facts, every


def _versioned_elements(loop: For):
    """An innermost loop led by its index tests, in versioned blocks (see
    ``version_checked_loops``)."""
    flags, rest = _head_flags(loop.body, lambda f: True)
    guards = _guards(flags, loop.var)
    if guards is None or not rest or _gathers_at_divided_column(loop, any_width=True) or independent_scatter(loop):
        return loop
    facts, every = guards
    fast = _assume_positions(sequence(rest), facts)

    def block(over, first, count):
        return If(every(first, count), over(Var(f"{loop.var.name}_fast"), [fast]), over(loop.var, list(flags) + rest))
    size = _block_size(loop, VERSION_BLOCK)
    if size is not None and loop.kind == "serial" and isinstance(loop.extent, Const) and isinstance(size, Const):
        # Whole blocks of a constant count, then the rest as it was: a count of min(K, n - bK)
        # left the vectoriser a remainder loop and a runtime count in every block.
        full = loop.extent.value - loop.extent.value % size.value
        blocks = _in_blocks(replace(loop, extent=Const(full)), size, block)
        if full == loop.extent.value:
            return blocks
        tail = Var(f"{loop.var.name}_tail")
        return Seq((blocks, For(tail, Const(loop.extent.value - full),
                                substitute(loop.body, {loop.var: Binary("add", Const(full), tail)}))))
    if size is not None:
        return _in_blocks(loop, size, block)
    if loop.kind in CHUNKED_LOOPS or isinstance(loop.extent, Const) and loop.extent.value < MIN_VERSIONED:
        return loop
    return block(lambda var, part: For(var, loop.extent, substitute(sequence(part), {loop.var: var})),
                 Const(0), loop.extent)


def _versioned_check_block(loop: For):
    """A block of ``_check_in_blocks``, ``for b { for c < K { flags(c) }; for r < K { .. } ..}``,
    as ``for b { if every(..) { the loops over r, guards decided } else { as it was } }``."""
    stmts = loop.body.stmts if isinstance(loop.body, Seq) else ()
    # Element loops only: a block of rows, each a vector copy, has its tests spread thin already
    # (a take of 64-element rows, 1 M float32, two threads: 0.37 -> 0.43 ms versioned).
    if len(stmts) < 2 or not isinstance(stmts[0], For) or not all(
            isinstance(x, For) and x.extent == stmts[0].extent and _innermost(x)
            and not _gathers_at_divided_column(x, any_width=True)
            for x in stmts[1:]):
        return loop
    check = stmts[0]
    flags, rest = _head_flags(check.body, lambda f: True)
    guards = None if rest else _guards(flags, check.var)
    if guards is None:
        return loop
    facts, every = guards

    def fast(part: For):
        at = {substitute_expr(raw, {check.var: part.var}): sizes for raw, sizes in facts.items()}
        return replace(part, body=_assume_positions(part.body, at))
    return replace(loop, body=If(every(Const(0), check.extent), Seq(tuple(fast(x) for x in stmts[1:])), loop.body))


def _in_positions(raw, size):
    """``0 <= raw < size`` as one unsigned compare, in 32 bits where both fit."""
    narrow = raw.dtype.itemsize <= 4 and isinstance(size, int) and size <= 2**31
    unsigned = uint32 if narrow else uint64
    value = raw if raw.dtype == unsigned else Cast(unsigned, raw)
    bound = Const(size, unsigned) if isinstance(size, int) else Cast(unsigned, size)
    return Cmp("lt", value, bound)


def _assume_positions(stmt, facts: dict):
    """``stmt`` where every index load that ``facts`` holds lies in ``[0, size)`` for each of
    its sizes: a guard of such a value decided, and a position made of it taken as the value
    (``v % size``, ``min(v, size - 1)``, ``v < 0``, ``out_of_range``), through casts that keep
    the value and through Lets."""
    lets = _over_lets(stmt, lambda value, known: _sizes_below(value, facts, known))

    def decide(x):
        return simplify_expr(_decided_by_sizes(x, lambda e: _sizes_below(e, facts, lets)))
    return map_stmt(stmt, expr_fn=decide)


def _sizes_below(e, facts: dict, lets: dict) -> set:
    """The sizes ``s`` for which ``0 <= e < s`` is known (empty: none)."""
    if isinstance(e, Load):
        return facts.get(e, set())
    if isinstance(e, Var):
        return lets.get(e, set())
    if isinstance(e, Cast) and e.to.is_int and e.a.dtype.is_int and (
            e.to.itemsize > e.a.dtype.itemsize or e.to.itemsize == e.a.dtype.itemsize and (
                not e.to.is_signed or e.a.dtype.is_signed)):
        return _sizes_below(e.a, facts, lets)  # a wider or as wide type holds the same value
    return set()


def _decided_by_sizes(x, below):
    """``x`` (its operands decided already) where ``below(operand)`` decides it; else ``x``."""
    if isinstance(x, Binary) and x.op in ("mod", "min") and any(
            _at_least(x.b, s, minus=x.op == "min") for s in below(x.a)):
        return x.a
    if not isinstance(x, Cmp):
        return x
    a = x.a
    bound = checked_bound(x) if isinstance(a, Binary) and a.op == "add" and x.op == "ge" else None
    if bound is not None:  # uint64(v) + size >= 2 size: false for any v in [0, size)
        return Const(False, bool_) if bound[1] in below(a.a) else x
    sizes = below(a)
    if not sizes:
        return x
    if x.op in ("lt", "ge") and _non_positive(x.b):
        return Const(x.op == "ge", bool_)
    if x.op in ("lt", "ge") and any(_at_least(x.b, s) for s in sizes):
        return Const(x.op == "lt", bool_)
    return x


def _at_least(bound, size, minus: bool = False) -> bool:
    """Whether ``bound`` is ``size`` or more (``size - 1`` or more, ``minus``), as far as the
    expressions show: numbers compared, else the same expression (``size - 1`` as written), a
    cast of a size (never negative) counting as the size."""
    if isinstance(size, int):
        need = size - 1 if minus else size
        return isinstance(bound, Const) and bound.dtype.is_int and int(bound.value) >= need
    if isinstance(bound, Cast) and bound.to.is_int:
        bound = bound.a
    return bound == (Binary("sub", size, Const(1)) if minus else size)


def _non_positive(bound) -> bool:
    """Whether ``bound`` is 0 or below: a number, or ``0 - size``."""
    if isinstance(bound, Const) and bound.dtype.is_int:
        return int(bound.value) <= 0
    return isinstance(bound, Binary) and bound.op == "sub" and bound.a == Const(0)


# -- collapse_short_loops -----------------------------------------------------------------------

#: An innermost loop shorter than this many iterations whose elements stand alone (a gather's,
#: an elementwise operator's) runs as one loop with the loop around it (``collapse_short_loops``).
SHORT_LOOP = 64
#: ... except one of a power-of-two count of at least this many that gathers through 64-bit
#: indices (``whole_vector_loop``).
WHOLE_VECTOR_LOOP = 16


def collapse_short_loops(kernel: Kernel) -> Kernel:
    """Every ``_collapsible`` pair of loops ``for u < D { for v < E { body } }`` as one loop
    ``for w < D*E``: an access whose last two coordinates are ``(u, v)`` on a buffer whose last
    two dimensions are ``(D, E)`` becomes an access at ``w`` of a view that merges them; ``u``
    and ``v`` elsewhere become ``w / E`` and ``w % E``, in 32-bit unsigned arithmetic (``D*E``
    is below ``2**31``), which LLVM vectorises (a multiply and shifts for an ``E`` that is not
    a power of two, a shift and a mask for one that is).

    Why: LLVM leaves a loop of fewer than 16 iterations scalar, and one of more whose count
    is not a multiple of its lanes ends every pass with scalar iterations and the reduction of
    the index flag: a gather along a middle axis of 13 elements took 19 instructions per
    element. As one loop it is a long element loop like a gather along the last axis (1 M
    float32 elements through int32 indices, two threads on a Zen 3: 1.69 -> 0.69 ms). It runs
    after the prefetching passes: a loop they prefetch for (a table beyond the caches) keeps its
    shape, whose prefetches gained more (a gather along a middle axis of 13 elements from a
    52 MB table: 14-18 ms with them, 26-30 collapsed without)."""
    return _collapse_stages(kernel, keep_masked=True)


def collapse_every_short_loop(kernel: Kernel) -> Kernel:
    """``collapse_short_loops`` for a host without cheap masked vector gathers
    (``backends/cpu.py: masked_vectors``): a ``masked_vector_loop`` collapses too, since LLVM
    builds a masked gather there lane by lane, each lane's mask tested with a branch (an AVX2
    Haswell's 16 lanes of 61: 118 branches in the stage), and where gathers are microcoded the
    collapsed loop's gathers have rules of their own (``lane_sum``, ``interleave_once``)."""
    return _collapse_stages(kernel, keep_masked=False)


def _collapse_stages(kernel: Kernel, keep_masked: bool) -> Kernel:
    def collapsible(loop):
        return _collapsible(loop) and not (keep_masked and masked_vector_loop(loop.body))
    stages = [_rewrite_loops(stage, _collapse, collapsible) for stage in kernel_stages(kernel)]
    return replace(kernel, body=Seq(tuple(stages)))


def _collapsible(loop) -> bool:
    """Whether ``loop`` (``u``) holds only a short innermost loop (``v``, fewer than
    ``SHORT_LOOP`` iterations), both of constant counts, whose every element stands alone:
    every store writes ``_at_pair``, some data load reads ``_at_pair`` (a gather's index, an
    elementwise operand), and every data load inside a coordinate (an index) is at the pair
    too; no reduction, no prefetch. A coordinate read from data at ``u`` alone selects a row
    that the short loop copies (a ``take``), which stays a loop of its own. The outer loop may
    be serial or ``parallel`` (its chunks may then end within a row)."""
    inner = loop.body if isinstance(loop, For) else None
    if not (isinstance(inner, For) and loop.kind in ("serial", "parallel") and inner.kind == "serial"
            and isinstance(loop.extent, Const) and isinstance(inner.extent, Const)):
        return False
    extents = (loop.extent.value, inner.extent.value)
    if not 2 <= extents[1] < SHORT_LOOP or extents[0] < 2 or extents[0] * extents[1] >= 2**31:
        return False
    if whole_vector_loop(inner):
        return False
    if any(isinstance(x, (For, Reduce, Prefetch)) for x in walk_stmt(inner.body)):
        return False
    pair = (loop.var, inner.var)
    stores = [x for x in walk_stmt(inner.body) if isinstance(x, Store)]
    if not stores or not all(_at_pair(x.buffer, x.indices, pair, extents) for x in stores):
        return False
    loads = [x for st in walk_stmt(inner.body) for e in stmt_exprs(st) for x in walk_expr(e) if is_data_load(x)]
    indices = [d for x in loads for i in x.indices for d in data_loads(i)]
    return (any(_at_pair(x.buffer, x.indices, pair, extents) for x in loads)
            and all(_at_pair(d.buffer, d.indices, pair, extents) for d in indices))


def whole_vector_loop(loop) -> bool:
    """Whether ``loop`` is an innermost loop of a constant power-of-two count from
    ``WHOLE_VECTOR_LOOP`` up to ``SHORT_LOOP`` that gathers through 64-bit indices: it stays a
    loop of its own (``collapse_short_loops`` leaves it), which the LLVM renderer vectorises
    whole, one vector of its count and no interleaving, so that each pass of the loop around it
    is straight-line code with its column as constants.

    Why: collapsed, the loop computed its column ``w % 16`` for every vector and packed the
    64-bit indices into 32-bit lanes beside it; whole, it adds constant columns to the shifted
    indices. A gather along a middle axis of 16-element slices, 1 M elements, two threads on a
    Zen 3, interleaved with the collapsed loop, three runs: float32 1.55/1.99/1.80 ->
    1.38/1.87/1.44 ms (TVM 1.58/1.70/1.42), float64 2.89/2.75/3.09 -> 2.43/2.34/2.50, int32
    1.56/1.81/1.87 -> 1.61/1.53/1.38, int64 3.41/3.51/3.15 -> 2.93/3.25/2.75, float16
    1.53/1.21/1.65 -> 1.30/1.04/1.69. Through int32 indices the collapsed loop, 32-bit lanes
    throughout, was faster (float32 1.81/1.43/1.49 -> 1.75/1.66/1.60)."""
    if not (isinstance(loop, For) and _innermost(loop) and isinstance(loop.extent, Const)):
        return False
    count = loop.extent.value
    return (WHOLE_VECTOR_LOOP <= count < SHORT_LOOP and count & (count - 1) == 0
            and any(width == 8 for _, _, width in _gathers(loop)))


#: The lanes of a ``masked_vector_loop``'s vectors: two AVX-512 or four AVX2 vectors of the
#: 64-bit indices that address them.
MASKED_VECTOR_LANES = 16


def masked_vector_loop(loop) -> bool:
    """Whether ``loop`` is an innermost loop of a constant count above ``MASKED_VECTOR_LANES``
    / 2 and below ``SHORT_LOOP``, not a power of two, that gathers data of four or eight bytes
    through 64-bit indices: where the host's vector gathers take a mask at no cost of their
    own (AVX-512, gathers not microcoded) it stays a loop of its own (``collapse_short_loops``
    leaves it, ``version_checked_loops`` versions it whole from ``MIN_VERSIONED`` iterations),
    which the LLVM renderer vectorises in vectors of ``MASKED_VECTOR_LANES``, the last of them
    masked to the count, so that no pass ends in scalar iterations.

    Why: collapsed, the loop computed its column ``w % 61`` in every vector, tested every index
    there (a column that divides the loop variable is not versioned) and packed the 64-bit
    indices into 32-bit lanes beside it; as a loop of its own its column is an induction
    variable, a pass of valid indices runs untested, and the masked lanes of the last vector
    cost no scalar remainder. Two interleaved runs, 1 M elements through int64 indices, two
    threads on an AVX-512 Xeon, against the collapsed loop: along axis 0 of 61-element rows
    float32 1.23/1.33x, float64 1.14/1.06x, int32 1.24/1.17x, int64 0.93/1.15x; along a middle
    axis of 13-element slices 1.07/1.08x, 1.64/1.07x, 1.03/1.05x, 1.11/1.11x. Float16 data,
    which no vector gather loads, and gathers through int32 indices, whose collapsed loop keeps
    32-bit lanes throughout, stay collapsed (float16 along axis 0, masked: 0.82x)."""
    if not (isinstance(loop, For) and _innermost(loop) and isinstance(loop.extent, Const)):
        return False
    count = loop.extent.value
    return (MASKED_VECTOR_LANES // 2 < count < SHORT_LOOP and count & (count - 1) != 0
            and any(width == 8 and load.buffer.dtype.itemsize in (4, 8) for load, _, width in _gathers(loop)))


def _at_pair(buffer, indices, pair, extents) -> bool:
    """Whether an access is at ``(.., u, v)``, ``pair`` being the two loops' variables, of a
    buffer whose last two dimensions are the loops' ``extents``: its elements over the pair
    lie one after the other in memory."""
    return len(indices) >= 2 and tuple(indices[-2:]) == pair and tuple(buffer.shape[-2:]) == extents


def _collapse(loop):
    """``loop`` and the loop inside it as one, where ``_collapsible``; else ``loop`` itself."""
    if not _collapsible(loop):
        return loop
    inner = loop.body
    pair, extents = (loop.var, inner.var), (loop.extent.value, inner.extent.value)
    w, count = Var(f"{loop.var.name}_{inner.var.name}"), extents[0] * extents[1]

    def merged(buffer, indices):
        if not _at_pair(buffer, indices, pair, extents):
            return buffer, indices
        return Buffer(buffer.name, buffer.dtype, tuple(buffer.shape[:-2]) + (count,)), tuple(indices[:-2]) + (w,)

    def expr_fn(x):
        return Load(*merged(x.buffer, x.indices)) if isinstance(x, Load) else x

    def stmt_fn(st):
        return Store(*merged(st.buffer, st.indices), st.value) if isinstance(st, Store) else st
    body = map_stmt(inner.body, expr_fn=expr_fn, stmt_fn=stmt_fn)
    narrow = Cast(uint32, w)
    row, column = (Cast(int64, Binary(op, narrow, Const(extents[1], uint32))) for op in ("div", "mod"))
    return For(w, Const(count), substitute(body, {loop.var: row, inner.var: column}), loop.kind)


# -- stream_rows --------------------------------------------------------------------------------

#: The rows ``stream_rows`` prefetches: from 2 KB (shorter ones the hardware's own prefetcher
#: covers) to 256 KB (longer ones would evict their own first lines before the gathers reach them).
STREAM_ROW_BYTES = (2 << 10, 256 << 10)
CACHE_LINE_BYTES = 64


def stream_rows(kernel: Kernel) -> Kernel:
    """In front of an innermost loop that gathers at random along one row of a buffer (the data
    index addresses its last dimension, every other index is a loop variable of an outer loop,
    the one around it among them, so that each of its passes reads a new row), prefetch the
    row's cache lines in order, where the row is ``STREAM_ROW_BYTES`` long and the loop reads at
    least one element per four of its lines.

    Why: such a row (a ``gather`` or ``take`` along the last axis) arrives by demand misses in
    random order, each waiting on memory, and the hardware's prefetcher sees no stream to follow.
    Prefetched in order it streams in, and the gathers find it in cache: 2048 rows of 16 KB,
    1024 random float32 elements from each, one thread, 7.4-7.9 -> 5.6-5.9 ms in C on a Zen 3.
    A loop run several times per row (a block of a row's updates) would prefetch it every time."""
    def inside(s):
        return _in_front_of_loops(s, lambda loop: _row_prefetch(loop, s.var), lambda cond: True)
    stages = [map_stmt(stage, stmt_fn=inside) if any(_row_gathers(stage)) else stage for stage in kernel_stages(kernel)]
    return replace(kernel, body=Seq(tuple(stages)))


def _row_gathers(stmt):
    """The loads of ``_gathers`` whose data index addresses the last dimension."""
    return (load for load, dim, _ in _gathers(stmt) if dim == len(load.indices) - 1)


def _in_front_of_loops(s, prefetch_for, enter_if):
    """``s`` (a loop) with ``prefetch_for(loop)`` (a statement or None) in front of each loop
    directly inside it, through Seqs and the ifs whose condition ``enter_if`` admits."""
    def front(body):
        if isinstance(body, Seq):
            return Seq(tuple(front(x) for x in body.stmts))
        if isinstance(body, If) and enter_if(body.cond):
            return replace(body, then=front(body.then), orelse=front(body.orelse) if body.orelse is not None else None)
        prefetch = prefetch_for(body) if isinstance(body, For) else None
        return body if prefetch is None else Seq((prefetch, body))
    return replace(s, body=front(s.body)) if isinstance(s, For) else s


def _row_prefetch(loop: For, outer: Var):
    """The loop that prefetches the row ``loop`` gathers from, a row that the variable ``outer``
    of the loop around it selects (see ``stream_rows``), or None."""
    if not _innermost(loop) or not isinstance(loop.extent, Const):
        return None
    bound_inside = {loop.var, *let_vars(loop.body)}
    for load in _row_gathers(loop):
        *row, _ = load.indices
        row_bytes = load.buffer.shape[-1] * load.buffer.dtype.itemsize if isinstance(load.buffer.shape[-1], int) else 0
        lines = -(-row_bytes // CACHE_LINE_BYTES)
        if (all(isinstance(i, (Var, Const)) and i not in bound_inside for i in row) and outer in row
                and STREAM_ROW_BYTES[0] <= row_bytes <= STREAM_ROW_BYTES[1] and 4 * loop.extent.value >= lines):
            line, step = Var(f"{loop.var.name}_line"), Const(max(1, CACHE_LINE_BYTES // load.buffer.dtype.itemsize))
            return For(line, Const(lines), Prefetch(load.buffer, tuple(row) + (Binary("mul", line, step),)))
    return None


# -- prefetch_gathers ---------------------------------------------------------------------------

#: A load through data indices prefetches ahead where the buffer it reads is at least this big:
#: beyond a core's share of the L3 cache its reads wait on memory. Element by element, where a
#: prefetch repeats the element's address arithmetic, from 16 MB; a row's lines, one cheap
#: prefetch per 64 bytes, from 8 MB. A size known only at the call is compared at the call.
PREFETCH_MIN_BYTES = 16 << 20
PREFETCH_MIN_ROW_BYTES = 8 << 20
#: How many cache lines ahead of the loads their prefetches run, and the most lines one pass of
#: an innermost loop may read to be prefetched a pass or more ahead.
PREFETCH_AHEAD_LINES = 64
PREFETCH_MAX_PASS_LINES = 256
#: The most expression nodes an index of a prefetched load may take, its Lets written out.
PREFETCH_MAX_NODES = 128


def prefetch_gathers(kernel: Kernel) -> Kernel:
    """In front of an innermost loop that reads a buffer beyond the caches through data indices
    (a gather, a take of rows, the elements of gather_nd), a loop that prefetches what the same
    loop will read ``PREFETCH_AHEAD_LINES`` cache lines later, some passes of its enclosing loop
    ahead: each element, or each line of a contiguous row.

    Why: such reads go to random places, each a miss the hardware's prefetcher cannot predict,
    and an out-of-order core keeps only so many of them in flight, the loads queued behind the
    index loads, the tests and the stores of the same loop. A prefetch of an address computed
    from indices a few passes ahead starts those misses early and retires at once. Two threads
    on a Zen 3, from tables of 52 MB and more, 25 M float32 elements: a gather along axis 0
    197-226 -> 134-178 ms, a take of 256-byte rows 13.6-14.8 -> 11.2-13.4 ms (16.8 -> 17.3 in a
    third run), gather_nd of 64-byte rows with batch dims 15.7-17.4 -> 10.3-13.1 ms. From
    tables the L3 cache holds (2-4 MB) the prefetch loop's instructions cost more than they
    save (a gather along axis 0 of 1 M elements: 1.02 -> 1.30 ms), hence
    ``PREFETCH_MIN_BYTES``; rows, one prefetch per line, gained from 8 MB tables (4 M
    elements: a take of rows 1.02-1.11 -> 0.83-0.88 ms, a batched gather_nd of rows 1.66-1.83
    -> 1.19-1.44) where elements did not (gather_nd of float64 element pairs from 8 MB,
    2.79-3.30 -> 2.98-3.56 ms)."""
    def inside(s):
        # Behind an if that reads data (a scatter's guard on its output row, which each thread
        # runs for its own rows) the passes ahead may never run the loop.
        return _in_front_of_loops(s, lambda loop: _indirect_prefetch(loop, s), lambda cond: not data_loads(cond))
    stages = [map_stmt(stage, stmt_fn=inside) if _reads_far(stage) else stage for stage in kernel_stages(kernel)]
    return replace(kernel, body=Seq(tuple(stages)))


def _reads_far(stage) -> bool:
    """Whether a data load of the stage reads a buffer that may be far: the stages worth
    rebuilding (most programs have none)."""
    return any(_far_data_load(x) for st in walk_stmt(stage) for e in stmt_exprs(st) for x in walk_expr(e))


def _far_data_load(x) -> bool:
    """Whether ``x`` is a data load from a buffer that may be far enough to prefetch, as
    elements or as rows (``_far`` is not False at the nearer of the two thresholds)."""
    return is_data_load(x) and _far(x.buffer, min(PREFETCH_MIN_BYTES, PREFETCH_MIN_ROW_BYTES)) is not False


def _indirect_prefetch(loop: For, outer: For):
    """The loop that prefetches ahead what ``loop``, inside ``outer``, reads through data indices
    from a far buffer (see ``prefetch_gathers``), or None: the first such load whose address
    moves with ``outer`` only through its data indices. Rows that ``stream_rows`` prefetches
    whole are left to it."""
    length = _size(_invariant_bound(loop.extent))  # a block's length, the last block's too
    if not _innermost(loop) or not isinstance(length, int) or _row_prefetch(loop, outer.var) is not None:
        return None
    ahead = Var(f"{loop.var.name}_ahead")
    for load, indices in _indirect_loads(loop):
        if outer.var not in set().union(*map(expr_vars, indices)):
            continue
        *row, last = indices
        per_line = max(1, CACHE_LINE_BYTES // load.buffer.dtype.itemsize)
        if last == loop.var and load.buffer.strides[-1] == 1 and not any(loop.var in expr_vars(i) for i in row):
            count, step = -(-length // per_line), Binary("mul", ahead, Const(per_line))  # a row's lines
            far = _far(load.buffer, PREFETCH_MIN_ROW_BYTES)
        else:
            count, step, far = length, ahead, _far(load.buffer, PREFETCH_MIN_BYTES)
        if far is False or count > PREFETCH_MAX_PASS_LINES:
            continue
        moves = {outer.var: Binary("add", outer.var, Const(-(-PREFETCH_AHEAD_LINES // count))), loop.var: step}
        moved = _moved_ahead(load.buffer, indices, moves, short_last=not isinstance(loop.extent, Const))
        if moved is None:
            continue
        extent = Const(count) if far is True else Select(far, Const(count), Const(0))
        return For(ahead, extent, Prefetch(load.buffer, tuple(simplify_expr(i) for i in moved)))
    return None


def _indirect_loads(loop: For):
    """``(load, its indices written without Let variables)`` for every data load of ``loop``
    from a buffer that may be far (``_far``), whose address reads data (another load) in some
    dimension, and whose indices so written stay within ``PREFETCH_MAX_NODES`` nodes each:
    written out, the Lets of a chain of fused gathers grow with every link (fusion binds them
    to keep the code linear in the chain), and a prefetch would repeat all of them."""
    values, seen = _let_values(loop.body), set()
    for x in (x for st in walk_stmt(loop.body) for e in stmt_exprs(st) for x in walk_expr(e)):
        if id(x) not in seen and _far_data_load(x):
            seen.add(id(x))
            indices = tuple(substitute_expr(i, values) for i in x.indices)
            if (all(expr_size(i, PREFETCH_MAX_NODES) <= PREFETCH_MAX_NODES for i in indices)
                    and any(data_loads(i) for i in indices)):
                yield x, indices


def _far(buffer, min_bytes: int):
    """Whether ``buffer`` is at least ``min_bytes``: True, False, or, for a size known only at
    the call, the condition that says so."""
    size = dim_mul(buffer.size, buffer.dtype.itemsize)
    return size >= min_bytes if isinstance(size, int) else Cmp("ge", size, Const(min_bytes))


def _moved_ahead(buffer, indices, moves: dict, short_last: bool):
    """``buffer``'s ``indices`` with the enclosing loop's variable (the first of ``moves``) and
    the loop's own (the second) replaced, once, by their moved values, and each coordinate of a
    data load inside them that the enclosing loop's moved variable reaches (other than through
    a nested load, itself clamped) clamped into its dimension: a pass ahead may lie past the
    loop's end, and the prefetch then reads the last index again, never past the index buffer.
    Where the loop's last block is shorter (``short_last``), the loop's moved variable would
    overrun it, and what it reaches is clamped too, ``buffer``'s own coordinates included. None
    where the enclosing loop's variable addresses ``buffer`` outside the data loads. The loads'
    own index arithmetic (a wrap, a clamp) keeps the address inside ``buffer`` whatever the
    index holds, as it does for the load itself."""
    outer, inner = moves
    if any(outer in _vars_outside_loads(i) for i in indices):
        return None
    marks = expr_vars(moves[outer]) | (expr_vars(moves[inner]) if short_last else set())

    def clamped(i, extent):
        if not marks & _vars_outside_loads(i):
            return i
        top = Const(extent - 1) if isinstance(extent, int) else Binary("sub", as_expr(extent), Const(1))
        return Binary("max", Binary("min", i, top), Const(0))

    def move(x):  # bottom-up: a load's coordinates are moved already
        if isinstance(x, Var):
            return moves.get(x, x)
        if is_data_load(x):
            return replace(x, indices=tuple(clamped(i, d) for i, d in zip(x.indices, x.buffer.shape)))
        return x
    moved = [map_expr(i, move) for i in indices]
    return tuple(clamped(i, d) if short_last else i for i, d in zip(moved, buffer.shape))


def _vars_outside_loads(e) -> set:
    """The variables ``e`` uses other than in the indices of its data loads."""
    return expr_vars(map_expr(e, lambda x: Const(0) if is_data_load(x) else x))
