"""How the CPU target builds and loads code: stages that repeat the checks just before them
render as functions with nothing to do, a disk cache hit loads the machine code without
optimising or generating code, and the optimised IR and assembly are made when asked for."""
import re

import numpy as np
import pytest

import cinnlite as cl
import cinnlite.backends.cpu as cpu_backend
from cinnlite.codegen.llvm import stage_plan
from cinnlite.runtime import cache as caches
from cinnlite.runtime import cpu


def take_chain(n, distinct=False):
    """``n`` fused takes of rows, through one index tensor or one each, and the inputs."""
    b = cl.NetBuilder("take_chain")
    x = b.create_input("float32", (50, 8), "x")
    names = [f"i{k}" for k in range(n)] if distinct else ["i"]
    idx = {name: b.create_input("int64", (50,), name) for name in names}
    t = x
    for k in range(n):
        t = b.add(b.take(t, idx[names[k % len(names)]], axis=0), x)
    rng = np.random.default_rng(n)
    arrays = {"x": rng.standard_normal((50, 8)).astype(np.float32)}
    arrays.update({name: rng.integers(-50, 50, 50) for name in names})
    return b.build([t]), arrays


def reference(arrays, n, distinct=False):
    t = arrays["x"]
    for k in range(n):
        t = t[arrays[f"i{k}" if distinct else "i"]] + arrays["x"]
    return t


def loops(text: str, symbol: str) -> int:
    """The number of loop headers in function ``symbol`` of an LLVM module's text."""
    body = re.search(r'define [^@]*@"?%s"?\(.*?\n}\n' % symbol, text, re.S).group(0)
    return body.count(".head:")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_chain_through_one_index_checks_it_once(threads):
    n = 6
    prog, arrays = take_chain(n)
    exe = cl.compile(prog, cache=False, threads=threads)
    np.testing.assert_allclose(exe(**arrays), reference(arrays, n), rtol=1e-6)
    text = exe.source("llvm")
    checks = [info.symbol for info, _ in stage_plan(exe.lowered) if "check" in info.kind]
    # Fused into one kernel, the takes' n identical checks are one (the schedule drops the
    # repeats); a repeat in a later kernel would be an empty stage.
    assert all(loops(text, symbol) == 0 for symbol in checks[1:])
    assert sum(loops(text, symbol) for symbol in checks) == 1
    arrays["i"][7] = 50
    with pytest.raises(cl.IndexOutOfRangeError, match=r"take 'take_0'.*position \(7,\) of input 'i'"):
        exe(**arrays)


def test_checks_of_different_indices_all_run():
    n = 4
    prog, arrays = take_chain(n, distinct=True)
    exe = cl.compile(prog, cache=False)
    np.testing.assert_allclose(exe(**arrays), reference(arrays, n, distinct=True), rtol=1e-6)
    text = exe.source("llvm")
    checks = [info.symbol for info, _ in stage_plan(exe.lowered) if "check" in info.kind]
    assert all(loops(text, symbol) == 1 for symbol in checks)
    arrays["i2"][3] = -51
    with pytest.raises(cl.IndexOutOfRangeError, match=r"position \(3,\) of input 'i2'"):
        exe(**arrays)


def test_a_cache_hit_neither_optimises_nor_generates_code(cache_dir, monkeypatch):
    prog, arrays = take_chain(3)
    first = cl.compile(prog)
    want = first(**arrays)
    opt_text, asm = first.source("llvm_opt"), first.source("asm")
    del first
    caches.MEMORY.clear()

    loading = [True]
    real_optimise, real_build = cpu.optimise, cpu_backend.build_module

    def optimise(*args):
        assert not loading[0], "a cache hit optimised code"
        return real_optimise(*args)

    def build_module(*args):
        assert not loading[0], "a cache hit generated code"
        return real_build(*args)

    monkeypatch.setattr(cpu, "optimise", optimise)
    monkeypatch.setattr(cpu_backend, "build_module", build_module)
    exe = cl.compile(prog)
    np.testing.assert_array_equal(exe(**arrays), want)
    loading[0] = False
    # The optimised module and its assembly are made again when asked for, and are the same.
    assert exe.source("llvm_opt") == opt_text and exe.source("asm") == asm
