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

ROWS = 12  # not a power of two: mode="raise" then resolves indices with a clamp


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
