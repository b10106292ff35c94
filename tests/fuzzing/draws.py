"""Draw ``k`` of a seed: the discrete choices, then shapes, attributes and values within caps.

``choose`` picks the operator form and data dtype (cycling with ``k``, so the first draws
cover every pair) and, at random, the index dtype, mode, reduction, layout, producers and
compile options; ``realize`` turns the choices into a ``Spec``; ``revalue`` gives the same
program new values. All take their random numbers from the draw's generator
``np.random.default_rng([seed, k])`` in a fixed order, so a draw is reproducible from
``(seed, k)`` alone.
"""
from __future__ import annotations

import math

import numpy as np

from fuzzing.evaluate import addressed_sizes
from fuzzing.forms import FORMS, Dimensions, Form
from fuzzing.producers import add_producers
from fuzzing.spec import DATA_DTYPES, GATHERS, INDEX_DTYPES, KINDS, MODES, REDUCTIONS, Spec, Step
from fuzzing.values import data, fill_value_for, index_values

MAX_RANK, MAX_DIM = 6, 5
ELEMENT_CAP = 600  # per tensor: the numpy reference visits elements one by one
BIG_ELEMENT_CAP = 1 << 17  # big draws: enough work for the backends to split across threads
ND_KINDS = ("gather_nd", "gather_nd_dims", "scatter_nd", "scatter_nd_dims")
DATA_KIND_OF_REDUCTION = {"none": "any", "add": "small", "sub": "small", "mean": "small", "mul": "factors",
                          "max": "nonan", "min": "nonan"}
BOOL_REDUCTIONS = ("none", "add", "mul", "max", "min")


def choose(rng, k: int) -> dict:
    """The discrete choices of draw ``k``: operator form and data dtype cycle, the rest is random."""
    kind = KINDS[k % len(KINDS)]
    dtype = DATA_DTYPES[(k // len(KINDS)) % len(DATA_DTYPES)]
    if rng.random() < 0.3:
        dtype = str(rng.choice(DATA_DTYPES))
    c = dict(kind=kind, dtype=dtype, index_dtype=str(rng.choice(INDEX_DTYPES)), mode=str(rng.choice(MODES)),
             layout=str(rng.choice(["last", "first"])), in_range=bool(rng.random() < 0.6),
             x_producer=str(rng.choice(["input", "input", "input", "take", "reshape", "fill"])),
             src_producer=str(rng.choice(["input", "input", "input", "take", "fill"])),
             index_producer=str(rng.choice(["input", "input", "input", "input", "take"])),
             tiny_axes=bool(rng.random() < 0.1),
             all_outputs=bool(rng.random() < 0.35), negative_attrs=bool(rng.random() < 0.4),
             axis_none=bool(rng.random() < 0.12), big=bool(rng.random() < 0.07),
             options=dict(opt_level=int(rng.choice([0, 2, 3, 3])), threads=[None, None, 1, 3][int(rng.integers(4))],
                          fuse=bool(rng.random() < 0.75)))
    c["reduce"] = str(rng.choice(BOOL_REDUCTIONS if dtype == "bool" else REDUCTIONS))
    if dtype.startswith("complex") and c["reduce"] in ("max", "min"):
        c["reduce"] = "mul" if c["reduce"] == "max" else "add"  # complex numbers are not ordered
    if c["mode"] == "raise" and rng.random() < 0.5:
        c["in_range"] = True
    c["symbolic"] = bool(rng.random() < 0.3)  # sizes as symbols: the shape-generic code (check.build)
    # include_self=False (scatters with a reduction) and scatter_nd's "sub".
    c["include_self"] = bool(rng.random() < 0.7)
    if kind.startswith("scatter_nd") and dtype != "bool" and rng.random() < 0.15:
        c["reduce"] = "sub"
    if c["tiny_axes"]:
        # A raise-mode chain into axes of size 0 and 1: the computed index is out of range
        # wherever the axis is empty, and the producer's own bad index must still be the error.
        c.update(index_producer="take", mode="raise", producer_mode="raise")
    return c


def realize(rng, c: dict, max_rank: int = MAX_RANK, max_dim: int = MAX_DIM) -> Spec:
    """Shapes, attributes and values for the choices ``c`` within the given caps."""
    for _attempt in range(200):
        if _attempt == 100:
            c = dict(c, big=False)
        spec = _realize_once(rng, c, max_rank, max_dim)
        if spec is not None:
            return spec
        max_dim = max(1, max_dim - 1) if _attempt % 3 == 2 else max_dim
    raise AssertionError("could not draw shapes within the element cap")


def _realize_once(rng, c, max_rank, max_dim):
    """One attempt: None if a tensor would exceed the element cap."""
    kw = dict(mode=c["mode"])
    form = FORMS[c["kind"]](Dimensions(rng, c, max_rank, max_dim), c, kw, c["mode"] in ("clip", "wrap"))
    sizes = [math.prod(form.x_shape), math.prod(form.idx_shape), form.out_size]
    if form.src_shape:
        sizes.append(math.prod(form.src_shape))
    if max(sizes) > (BIG_ELEMENT_CAP if c.get("big", False) else ELEMENT_CAP):
        return None
    if c["reduce"] not in ("none", "sub") and not c.get("include_self", True) and c["kind"] not in GATHERS \
            and c["kind"] != "gather_nd_dims":
        kw["include_self"] = False
    inputs, data_kind = _operands(rng, c, form, kw)
    c = dict(c, data_kind=data_kind)
    method = {"gather_nd_dims": "gather_nd", "scatter_nd_dims": "scatter_nd"}.get(c["kind"], c["kind"])
    args = ("x", "idx", "src") if form.src_shape is not None else ("x", "idx")
    steps = []
    renamed = add_producers(rng, c, inputs, steps)
    steps.append(Step("out", method, tuple(renamed.get(a, a) for a in args), kw))
    outputs = [s.out for s in steps] if c["all_outputs"] else ["out"]
    return Spec(inputs, steps, outputs, dict(c))


def _operands(rng, c: dict, form: Form, kw: dict):
    """The operator's input arrays, and the kind of data values they hold. Index values are
    drawn with the tuple axis last, then laid out; a gather in ``fill`` mode also draws its
    ``fill_value`` into ``kw``."""
    kind, dtype = c["kind"], c["dtype"]
    idx = index_values(rng, form.idx_shape, form.index_sizes, c["index_dtype"], c["in_range"])
    if kind in ND_KINDS and c["layout"] == "first":
        idx = np.ascontiguousarray(np.moveaxis(idx, -1, 0))
    if kind in GATHERS or kind == "gather_nd_dims":
        data_kind = "any"
        if c["mode"] == "fill":
            kw["fill_value"] = fill_value_for(rng, dtype)
    else:
        data_kind = DATA_KIND_OF_REDUCTION[kw.get("reduce")]
        if np.dtype(dtype).kind in "iu":
            data_kind = "any"  # integer results do not depend on the order (a mean sums in int64)
    inputs = {"x": data(rng, form.x_shape, dtype, data_kind), "idx": idx}
    if form.src_shape is not None:
        inputs["src"] = data(rng, form.src_shape, dtype, data_kind)
    return inputs, data_kind


def revalue(rng, spec: Spec, in_range: bool) -> Spec:
    """The same program with new values: data inputs re-drawn with the draw's kind of data, index
    inputs that a step reads directly re-drawn for the sizes that step addresses."""
    inputs = dict(spec.inputs)
    shapes_env = _shapes_before_main(spec)
    readers = {st.args[1]: st for st in spec.steps if len(st.args) >= 2}
    for name, arr in spec.inputs.items():
        if name in readers:
            sizes = addressed_sizes(readers[name], shapes_env)
            inputs[name] = index_values(rng, arr.shape, sizes, arr.dtype.name, in_range)
        elif name.endswith("_rows") and name.startswith("idx"):
            continue  # rows of a computed index keep their values
        elif arr.dtype.kind != "i" or name in ("x", "src", "x_flat", "x_rows", "src_rows"):
            inputs[name] = data(rng, arr.shape, arr.dtype.name, spec.choices.get("data_kind", "any"))
    return Spec(inputs, spec.steps, spec.outputs, spec.choices)


def _shapes_before_main(spec: Spec) -> dict:
    """Arrays of the right shapes (zeros) for the inputs and the producers' results: only the
    shapes of computed tensors matter to the sizes an index addresses."""
    shapes_env = dict(spec.inputs)
    for st in spec.steps:
        if st.method == "fill_constant":
            shapes_env[st.out] = np.zeros(st.kwargs["shape"], st.kwargs["dtype"])
        elif st.method == "reshape":
            shapes_env[st.out] = shapes_env[st.args[0]].reshape(st.kwargs["shape"])
        elif st.out == "out":
            break
        else:
            x, i = shapes_env[st.args[0]], shapes_env[st.args[1]]
            shapes_env[st.out] = np.zeros((i.shape[0],) + x.shape[1:], x.dtype)
    return shapes_env
