"""The operator registry (cinnlite.ir.ops.OPERATORS) against its two users: NetBuilder, whose
methods must agree with each operator's declared operands and attribute defaults, and the
graph nodes, whose attrs format (names, order, values) the printed graph and the compile cache
key depend on. Also: a new operator needs nothing but its OpDef to build, lower and run.
"""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.ir import ops
from cinnlite.ir.loopnest import Binary, Load, Store, const
from cinnlite.ir.lower import LoopVars, buffer_of, loop_nest, make_kernel
from cinnlite.runtime.cache import program_fingerprint

BUILDER_METHODS = sorted(ops.OPERATORS)


def _parameters(op):
    params = list(inspect.signature(getattr(NetBuilder, op)).parameters.values())[1:]  # without self
    return [p for p in params if p.name != "name"]


def test_every_operator_has_a_builder_method_and_every_builder_method_an_operator():
    not_operators = {"create_input", "build"} | set(NetBuilder.SPELLINGS)
    public = {n for n, f in vars(NetBuilder).items() if callable(f) and not n.startswith("_")} - not_operators
    assert public == set(ops.OPERATORS)


@pytest.mark.parametrize("op", BUILDER_METHODS)
def test_builder_operands_are_the_declared_operand_roles(op):
    """Errors name an operand by its role; the builder method's parameters have those names."""
    definition = ops.OPERATORS[op]
    names = [p.name for p in _parameters(op)]
    assert tuple(names[:len(definition.operands)]) == definition.operands


@pytest.mark.parametrize("op", BUILDER_METHODS)
def test_builder_defaults_are_the_declared_attribute_defaults(op):
    definition = ops.OPERATORS[op]
    params = {p.name: p for p in _parameters(op)}
    for field in dataclasses.fields(definition.attrs):
        assert field.name in params, f"{op}: attribute {field.name} is no argument of NetBuilder.{op}"
        declared = field.default
        given = params[field.name].default
        if declared is dataclasses.MISSING:
            assert given is inspect.Parameter.empty, f"{op}.{field.name}: the builder has a default, the attrs none"
        else:
            assert given == declared and type(given) is type(declared), f"{op}.{field.name}: {given!r} vs {declared!r}"


def _program(operators=None):
    """A program with a node or two of each of ``operators`` (default: every registered one),
    in that order. A new operator adds its entry to ``make``."""
    b = NetBuilder("every_op")
    x = b.create_input("float32", (4, 3), "x")
    i = b.create_input("int64", (2, 3), "i")
    make = {
        "fill_constant": lambda: [b.fill_constant((4, 3), 0.5, "float32")],
        "constant": lambda: [b.constant(np.arange(3, dtype=np.int32))],
        "reshape": lambda: [b.reshape(x, (3, -1))],
        "cast": lambda: [b.cast(x, "int8")],
        "take": lambda: [b.take(x, i, axis=-1, mode="fill", fill_value=2)],
        "gather": lambda: [b.gather(x, i, axis=1, mode="wrap")],
        "gather_nd": lambda: [b.gather_nd(x, i, index_layout="first", mode="clip"),
                              b.gather_nd(x, b.reshape(i, (2, 3, 1)), dims=[-2])],
        "scatter": lambda: [b.scatter(x, i, x, axis=0, reduce="mean")],
        "scatter_nd": lambda: [
            b.scatter_nd(x, b.reshape(i, (6, 1)), b.fill_constant((6, 3), 1.0, "float32"), reduce="add"),
            b.scatter_nd(x, b.reshape(i, (1, 2, 3)), b.fill_constant((2, 3), 1.0, "float32"), dims=[1],
                         index_layout="first", mode="fill")],
        **{op: (lambda op=op: [getattr(b, op)(x, x)]) for op in ops.ELEMENTWISE_BINARY + tuple(ops.COMPARISONS)},
        "where": lambda: [b.where(b.less(x, x), x, b.fill_constant((), 1.0, "float32"))],
        "reduce_sum": lambda: [b.reduce_sum(x, axes=[-1], keepdims=True), b.reduce_sum(x)],
        "reduce_max": lambda: [b.reduce_max(x, axes=0)],
        "reduce_min": lambda: [b.reduce_min(x, keepdims=True)],
        **{op: (lambda op=op: [getattr(b, op)(x)]) for op in ops.UNARY_VALUES},
        "iota": lambda: [b.iota((4, 3), "int32", axis=1)],
    }
    operators = sorted(ops.OPERATORS) if operators is None else operators
    assert set(operators) <= set(make), f"no node made for {sorted(set(operators) - set(make))}"
    return b.build([t for op in operators for t in make[op]()])


def test_node_attrs_are_the_attribute_fields_in_order():
    program = _program()
    assert {n.op for n in program.nodes} == set(ops.OPERATORS)
    for node in program.nodes:
        definition = ops.OPERATORS[node.op]
        assert [k for k, _ in node.attrs] == [f.name for f in dataclasses.fields(definition.attrs)]
        assert definition.node_attrs(definition.attrs_of(node)) == node.attrs


def test_node_attrs_keep_their_format():
    """Names, order and normalised values, as the printed graph and the cache key have them."""
    attrs = {n.output.name: n.attrs for n in _program(PINNED_OPERATORS).nodes}
    assert attrs["fill_constant_0"] == (("value", 0.5),)
    assert attrs["reshape_0"] == (("shape", (3, 4)),)
    assert attrs["cast_0"] == (("dtype", cl.Int(8)),)
    assert attrs["take_0"] == (("axis", 1), ("batch_dims", 0), ("mode", "fill"), ("fill_value", 2.0))
    assert attrs["gather_0"] == (("axis", 1), ("mode", "wrap"), ("fill_value", 0.0))
    assert attrs["gather_nd_0"] == (("batch_dims", 0), ("dims", None), ("index_layout", "first"), ("mode", "clip"),
                                    ("fill_value", 0.0))
    assert attrs["gather_nd_1"][1] == ("dims", (0,))
    assert attrs["scatter_0"] == (("axis", 0), ("reduce", "mean"), ("mode", "raise"), ("include_self", True))
    assert attrs["scatter_nd_1"] == (("dims", (1,)), ("reduce", "none"), ("index_layout", "first"), ("mode", "fill"),
                                     ("include_self", True))
    assert attrs["add_0"] == ()
    assert [type(v) for _, v in attrs["take_0"]] == [int, int, str, float]


def test_program_fingerprint_is_stable():
    """The compile cache key of a program follows from its nodes; a change here makes every
    cached program compile again, so it must be deliberate."""
    assert program_fingerprint(_program(PINNED_OPERATORS)) == PINNED_FINGERPRINT


#: The operators whose node format is pinned, in the order of the pinned program.
PINNED_OPERATORS = ("fill_constant", "constant", "reshape", "cast", "take", "gather", "gather_nd", "scatter",
                    "scatter_nd", "add", "subtract", "multiply", "divide", "maximum", "minimum")
# Names are written as literals in the fingerprint, so that no name can imitate another line of it.
PINNED_FINGERPRINT = "1a574a25ff838471e84635cf7ab74ed1f0c6fa6f7c6fd0787106a1a9521c1243"


# -- a new operator: one OpDef, registered, and it builds, lowers and runs ----------------------


@dataclasses.dataclass(frozen=True)
class AddScalarAttrs:
    value: float = 1.0


def _infer_add_scalar(inputs, value):
    (x,) = inputs
    return AddScalarAttrs(ops.check_scalar("add_scalar", "value", value, x.dtype)), x.shape, x.dtype


def _lower_add_scalar(ctx, node, attrs):
    x, out = buffer_of(node.inputs[0]), buffer_of(node.output)
    o = LoopVars().make(len(out.shape))
    value = Binary("add", Load(x, tuple(o)), const(attrs.value, x.dtype))
    return make_kernel(node, loop_nest(o, out.shape, Store(out, tuple(o), value)))


def test_an_operator_needs_only_its_definition(monkeypatch):
    add_scalar = ops.OpDef("add_scalar", operands=("x",), attrs=AddScalarAttrs, infer=_infer_add_scalar,
                           lower=_lower_add_scalar)
    monkeypatch.setitem(ops.OPERATORS, "add_scalar", add_scalar)
    b = NetBuilder("extended")
    x = b.create_input("float32", (3, 2), "x")
    y = b._add("add_scalar", [x], None, value=2.5)
    with pytest.raises(cl.ValidationError, match=r"add_scalar: value='a' is not a number"):
        b._add("add_scalar", [x], None, value="a")
    with pytest.raises(cl.ValidationError, match=r"add_scalar: x must be a tensor handle"):
        b._add("add_scalar", [np.zeros(2)], None, value=1.0)
    program = b.build([b.take(y, b.create_input("int64", (2,), "i"), mode="wrap"), y])
    exe = cl.compile(program, target="cpu", cache=False)
    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    taken, added = exe(x=xs, i=np.array([2, -4]))
    np.testing.assert_array_equal(added, xs + 2.5)
    np.testing.assert_array_equal(taken, (xs + 2.5)[[2, 2]])
