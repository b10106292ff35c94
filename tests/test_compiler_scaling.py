"""The compiler scales with the graph: fused code, compile time and recursion depth grow linearly
with the number of operators, however the operators are chained.

Fusion inlines a producer's value into every place its consumer reads it. Written out naively, a
chain of takes repeats each index expression three times per level (the clamp reads it three
times), so code grows as 3**n; these tests hold the compiler to a bounded number of bytes of
generated code per operator instead, and check the numbers and the errors on the way.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.dtypes import float32, int64
from cinnlite.errors import CompileError
from cinnlite.ir.loopnest import Buffer, Const, For, Kernel, Let, Load, Store, Var
from cinnlite.ir.passes import verify
from cinnlite.ir.printer import kernel_str

ROWS = 12  # not a power of two: mode="raise" then resolves indices with a clamp


# -- the Let statement -------------------------------------------------------------------------


def _let_kernel(bindings, body_value):
    a, out = Buffer("a", float32, (4,)), Buffer("out", float32, (4,))
    i = Var("i")
    body = For(i, Const(4), Let(tuple(bindings), Store(out, (i,), body_value)))
    return Kernel("k", "test", (a, out), out, body)


def test_let_binds_values_in_order_for_the_rest_of_the_statement():
    i, v, w = Var("i"), Var("v", float32), Var("w", float32)
    a = Buffer("a", float32, (4,))
    k = _let_kernel([(v, Load(a, (i,))), (w, v)], w)
    assert verify(k) is k
    assert "let v = a[i]\n" in kernel_str(k) + "\n" and "out[i] = w" in kernel_str(k)


@pytest.mark.parametrize("bad", ["unbound", "twice", "dtype", "loop var"])
def test_verify_rejects_broken_lets(bad):
    i, v = Var("i"), Var("v", float32)
    a = Buffer("a", float32, (4,))
    bindings, value = {
        "unbound": ([(v, Load(a, (i,)))], Var("w", float32)),
        "twice": ([(v, Load(a, (i,))), (v, Load(a, (i,)))], v),
        "dtype": ([(Var("v", int64), Load(a, (i,)))], Load(a, (i,))),
        "loop var": ([(i, Const(0))], Load(a, (i,))),
    }[bad]
    with pytest.raises(CompileError, match="verifier"):
        verify(_let_kernel(bindings, value))


# -- raise checks folded into a loop -----------------------------------------------------------


@pytest.mark.parametrize("n", [3, 4])
def test_checks_of_one_index_buffer_add_one_flag_per_load_not_per_check(n):
    """``n`` takes with one index tensor: when their checks fold into the fused loop, each load
    of the index gets one flag, not one per check, and flags get no flags of their own (which
    once doubled the flags with every check folded)."""
    b = NetBuilder("same_index")
    x = b.create_input("float32", (ROWS,), "x")
    i = b.create_input("int64", (ROWS,), "i")
    t = x
    for _ in range(n):
        t = b.take(t, i)
    exe = cl.compile(b.build([t]), target="cpu", cache=False)
    assert exe.source("lowered").count("flag_index_error") <= n
    args = dict(x=np.arange(ROWS, dtype=np.float32), i=np.arange(ROWS) - 5)
    args["i"][7] = ROWS
    with pytest.raises(cl.IndexOutOfRangeError, match=r"take 'take_0'.*\(7,\)"):
        exe(**args)
