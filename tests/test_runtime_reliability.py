"""The CPU runtime under stress: interrupted calls, forked children, threads that cannot be
started, results the caller keeps, executables dropped, compiles next to running calls, thread
counts, and the native memory of many compiles.

Whatever must not touch the test process (signals, fork, a broken ``Thread.start``) runs in a
child process with a timeout, so a hang or a crash fails the test instead of the run.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import cinnlite as cl
from cinnlite.runtime import cpu
from cinnlite.runtime.cpu import PARALLEL_MIN_WORK
from cinnlite.runtime.executable import HUGE_PAGE, BufferPool, _huge_extent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 4 * PARALLEL_MIN_WORK  # rows of a take big enough to be split across threads

CHILD_PRELUDE = """
import json, os, signal, sys, threading, time
import numpy as np
import cinnlite as cl
from cinnlite.runtime.cpu import PARALLEL_MIN_WORK
from cinnlite.runtime.executable import HUGE_PAGE, BufferPool, _huge_extent
N = 4 * PARALLEL_MIN_WORK

def parallel_take(name, threads):
    b = cl.NetBuilder(name)
    x = b.create_input("float32", (1000, 16), "x")
    i = b.create_input("int64", (N,), "i")
    return cl.compile(b.build([b.take(x, i, axis=0)]), threads=threads, cache=False)

def inputs(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1000, 16)).astype(np.float32), rng.integers(0, 1000, N)
"""


def run_child(code: str, timeout: float = 120) -> dict:
    """Run ``code`` after ``CHILD_PRELUDE`` in a fresh interpreter that imports this checkout
    of cinnlite; return the JSON object it prints last."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
               CINNLITE_CACHE_DIR="off")
    env.pop("CINNLITE_NUM_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"child failed, rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parallel_take(name: str, threads: int, **options):
    b = cl.NetBuilder(name)
    x = b.create_input("float32", (1000, 16), "x")
    i = b.create_input("int64", (N,), "i")
    return cl.compile(b.build([b.take(x, i, axis=0)]), threads=threads, **options)


def take_inputs(seed: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1000, 16)).astype(np.float32), rng.integers(0, 1000, N)


# -- executables go with their last reference ------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
def test_an_executable_is_freed_when_its_last_reference_goes(threads):
    """No reference cycle: with the cyclic collector off, dropping the last reference frees the
    executable (its machine code and its pooled buffers) at once."""
    gc.collect()
    gc.disable()
    try:
        exe = parallel_take(f"dropped_{threads}", threads=threads, cache=False)
        x, i = take_inputs(40)
        out = exe(x=x, i=i)
        exe.source("asm")
        bad = i.copy()
        bad[7] = 5000
        with pytest.raises(cl.IndexOutOfRangeError):
            exe(x=x, i=bad)
        ref = weakref.ref(exe)
        del exe
        assert ref() is None, "the executable outlived its last reference"
        np.testing.assert_array_equal(out, x[i])  # a result outlives its executable
    finally:
        gc.enable()


# -- native memory of many compiles ----------------------------------------------------------------

LEAK_CHILD = """
import gc

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def compile_one(k):
    b = cl.NetBuilder(f"leak_probe_{k}")
    x = b.create_input("float32", (k % 11 + 3, 4), "x")
    i = b.create_input("int64", (5,), "i")
    cl.compile(b.build([b.take(x, i, mode="clip")]), cache=False, threads=1)

for k in range(30):     # warm-up: LLVM's and Python's caches fill up
    compile_one(k)
gc.collect()
before = rss()
n = 200  # the heap grows in steps of ~130 KiB: over 50 compiles they alone read as 18-33 KiB each
for k in range(30, 30 + n):
    compile_one(k)
gc.collect()
print(json.dumps(dict(per_compile=(rss() - before) / n)))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc/self/statm (Linux) to read RSS")
def test_compiling_many_programs_does_not_leak_native_memory():
    """Compile distinct small programs with no cache and drop each: after a warm-up, RSS grows
    by well under the 80-130 KiB per compile it grew by while LLVM's module pass managers were
    never freed (what is left, 3-4 KiB of allocations and the steps of the heap's growth, is
    llvmlite's pass instrumentation). In a fresh process, where a leak cannot hide in memory
    that earlier tests freed."""
    per_compile = run_child(LEAK_CHILD)["per_compile"]
    assert per_compile < 32 * 1024, f"RSS grew by {per_compile / 1024:.1f} KiB per compile"


# -- results the caller keeps ----------------------------------------------------------------------


def _pooled_take():
    """A take whose 4 MiB output comes from the buffer pool, and a way to make inputs whose
    expected output differs from call to call."""
    b = cl.NetBuilder("kept_results")
    x = b.create_input("float32", (64, 1024), "x")
    i = b.create_input("int64", (1024,), "i")
    exe = cl.compile(b.build([b.take(x, i, axis=0)]), threads=1)
    x = np.arange(64 * 1024, dtype=np.float32).reshape(64, 1024)

    def call(seed):
        idx = np.random.default_rng(seed).integers(0, 64, 1024)
        return exe(x=x, i=idx), x[idx]

    return call


def test_a_result_changed_in_place_and_dropped_never_comes_back_changed():
    """A result reshaped in place, given another dtype or made read-only, then dropped: the
    next call's result has its own shape, dtype and flags."""
    call = _pooled_take()
    for change in ("shape", "dtype", "readonly"):
        out, _ = call(0)
        if change == "shape":
            out.shape = (-1,)
        elif change == "dtype":
            out.dtype = np.int32
        else:
            out.flags.writeable = False
        del out
        again, want = call(1)
        assert again.shape == want.shape and again.dtype == want.dtype and again.flags.writeable, change
        np.testing.assert_array_equal(again, want)


def test_results_kept_by_the_caller_are_never_overwritten_by_later_calls():
    """Whatever the caller keeps of a result (the array changed in place, a view, a view of a
    view, a memoryview), later calls of the same program never write into it."""
    call = _pooled_take()
    kept, wants = [], []
    out, want = call(10)
    out.shape = (-1,)                     # reshaped in place, and kept
    kept.append(out)
    wants.append(want.reshape(-1))
    out, want = call(11)
    kept.append(out[3:, ::2])             # a view only: the array itself is dropped
    wants.append(want[3:, ::2])
    del out
    out, want = call(12)
    kept.append(memoryview(out))          # a buffer export only
    wants.append(want)
    del out
    out, want = call(13)
    kept.append(out.T.reshape(-1)[5:])    # a view of a view
    wants.append(want.T.reshape(-1)[5:])
    del out
    out, want = call(14)
    out.flags.writeable = False
    kept.append(out[::-1])
    wants.append(want[::-1])
    del out
    for seed in range(20, 26):
        later, want = call(seed)
        np.testing.assert_array_equal(later, want)
    for k, (got, want) in enumerate(zip(kept, wants)):
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"kept result {k} was overwritten")


def test_a_dropped_result_is_gone_not_reused_behind_a_weak_reference():
    """A weak reference to a dropped result must not lead to an array that later calls write."""
    call = _pooled_take()
    out, want = call(30)
    ref = weakref.ref(out)
    del out
    call(31)
    kept = ref()
    assert kept is None or np.array_equal(kept, want), "a dropped result was reused while still reachable"


def test_pool_blocks_lie_on_large_pages_where_that_wastes_at_most_half():
    """A block is rounded up to whole 2 MiB pages where that adds at most half as much again,
    else only its whole pages are large; under one page and a half of a page, none."""
    page = HUGE_PAGE
    assert _huge_extent(3_000_000) == 2 * page         # 4 MiB for 2.9 MiB: a third more
    assert _huge_extent(1_600_000) == page             # 2 MiB for 1.5 MiB
    assert _huge_extent(page + 1) == page              # one byte over: its whole page only
    assert _huge_extent(page // 2) == 0
    assert _huge_extent(5 * page) == 5 * page


def _vm_flags(address: int) -> list:
    """The kernel's flags of the mapping that holds ``address`` (Linux's /proc/self/smaps)."""
    flags, inside = None, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                flags = line.split()[1:]
    return flags


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage"), reason="no transparent huge pages")
def test_a_big_pooled_output_starts_on_a_large_page_and_asks_for_them():
    call = _pooled_take()                     # a 4 MiB output
    out, want = call(40)
    np.testing.assert_array_equal(out, want)
    address = out.__array_interface__["data"][0]
    assert address % HUGE_PAGE == 0
    assert "hg" in _vm_flags(address)          # madvise(MADV_HUGEPAGE) on its mapping


def test_views_of_a_pooled_result_keep_the_result_itself():
    """The pool knows a block is free by a weak reference to the array it handed out: every
    view must keep that array, which holds only while its base is not an array (numpy would
    collapse a view's base down to the array that owns the memory)."""
    call = _pooled_take()
    out, _ = call(41)
    assert not isinstance(out.base, np.ndarray)
    view = out[2:, ::3].T
    assert view.base is out and out.reshape(-1).base is out and out.view(np.int32).base is out
    ref = weakref.ref(out)
    del out
    assert ref() is not None                  # the view keeps it, so the block is not reused
    del view
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("nbytes", [1 << 16, 4 << 20])  # malloc'd, and on its own mapping
def test_a_pooled_block_comes_back_only_once_no_view_of_its_array_is_left(nbytes):
    pool, dtype = BufferPool(), np.dtype(np.float32)
    shape = (nbytes // 64, 16)
    first = pool.empty(shape, dtype, nbytes, 1, 1 << 16)
    address = first.__array_interface__["data"][0]
    assert not isinstance(first.base, np.ndarray)
    view = first[::2]
    del first
    second = pool.empty(shape, dtype, nbytes, 1, 1 << 16)
    assert second.__array_interface__["data"][0] != address  # the view keeps the first block
    del view, second
    gc.collect()
    third = pool.empty(shape, dtype, nbytes, 1, 1 << 16)
    assert third.__array_interface__["data"][0] == address  # free again: the first block, reused
    assert [len(shelf) for shelf in pool._blocks.values()] == [2]


# -- Ctrl-C during a parallel call -----------------------------------------------------------------

INTERRUPT_CHILD = """
# The Python pool's chunks, as where there is no native pool (a stage split by main on the
# native pool runs to its end in machine code, and the interrupt is raised after the call).
from cinnlite.runtime import native_pool
native_pool.shared_native_pool().native = False
exe = parallel_take("interrupted", threads=4)
main = threading.main_thread()
first_helper_chunk = threading.Event()
ended = []   # (call, time) of every chunk that finished
call = [0]

def watched(fn):
    # In the first call, a helper's chunk sends Ctrl-C to the main thread and takes 0.4 s
    # more; the caller's own chunk waits for that, so the interrupt lands while a helper works.
    def chunk(table, begin, end, err):
        if call[0] == 0:
            if threading.current_thread() is main:
                first_helper_chunk.wait(10)
            elif not first_helper_chunk.is_set():
                first_helper_chunk.set()
                signal.pthread_kill(main.ident, signal.SIGINT)
                time.sleep(0.4)
        status = fn(table, begin, end, err)
        ended.append((call[0], time.monotonic()))
        return status
    return chunk

exe._stages = [(info, watched(fn)) for info, fn in exe._stages]
x1, i1 = inputs(1)
try:
    exe(x=x1, i=i1)
    outcome, returned = "returned", time.monotonic()
except KeyboardInterrupt:
    outcome, returned = "KeyboardInterrupt", time.monotonic()
call[0] = 1
x2, i2 = inputs(2)
got = exe(x=x2, i=i2)
right_at_once = bool(np.array_equal(got, x2[i2]))
time.sleep(0.6)   # a chunk of the interrupted call still running would have written by now
right_later = bool(np.array_equal(got, x2[i2]))
late = sum(1 for c, t in ended if c == 0 and t > returned)
print(json.dumps(dict(outcome=outcome, late=late, right_at_once=right_at_once, right_later=right_later)))
"""


def test_an_interrupted_parallel_call_returns_only_after_every_chunk_stopped():
    """Ctrl-C while helpers run chunks: the KeyboardInterrupt comes out of the call only once
    no chunk of it runs any more, and the next call, reusing the same pooled output, is right
    and stays right."""
    result = run_child(INTERRUPT_CHILD)
    assert result["outcome"] == "KeyboardInterrupt"
    assert result["late"] == 0, f"{result['late']} chunk(s) of the interrupted call ran on after it returned"
    assert result["right_at_once"] and result["right_later"], result


# -- threads that cannot be started ----------------------------------------------------------------

THREAD_START_CHILD = """
import warnings

def refuse(self):
    raise RuntimeError("can't start new thread")

threading.Thread.start = refuse
x, i = inputs(5)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    exe = parallel_take("no_threads", threads=4)  # the native pool starts its helpers here
    first = bool(np.array_equal(exe(x=x, i=i), x[i]))
    second = bool(np.array_equal(exe(x=x, i=i), x[i]))
print(json.dumps(dict(first=first, second=second,
                      warnings=[(issubclass(w.category, cl.CinnliteWarning), str(w.message)) for w in caught])))
"""


def test_threads_that_cannot_be_started_give_a_warning_and_the_right_result():
    result = run_child(THREAD_START_CHILD)
    assert result["first"] and result["second"]
    assert len(result["warnings"]) == 1, result["warnings"]  # once, not per call
    is_cinnlite, message = result["warnings"][0]
    assert is_cinnlite and "could not start" in message and "can't start new thread" in message


# -- compiling next to running ---------------------------------------------------------------------


def test_parallel_calls_complete_while_another_thread_compiles(monkeypatch):
    """While one thread is inside LLVM compiling, another thread's parallel calls go on: the
    compile waits, inside LLVM's optimisation, for three more calls to complete."""
    exe = parallel_take("running", threads=2)
    x, i = take_inputs(50)
    finished = [0]
    stop = threading.Event()

    def runner():
        while not stop.is_set():
            exe(x=x, i=i)
            finished[0] += 1

    seen = {}
    real_optimise = cpu.optimise

    def optimise_once_calls_went_on(module, tm, opt):
        before = finished[0]
        deadline = time.monotonic() + 10
        while finished[0] < before + 3 and time.monotonic() < deadline:
            time.sleep(0.002)
        seen["calls"] = finished[0] - before
        return real_optimise(module, tm, opt)

    monkeypatch.setattr(cpu, "optimise", optimise_once_calls_went_on)
    thread = threading.Thread(target=runner)
    thread.start()
    try:
        b = cl.NetBuilder("compiled_meanwhile")
        y = b.create_input("float64", (300, 7), "y")
        j = b.create_input("int32", (50, 7), "j")
        cl.compile(b.build([b.gather(y, j, axis=0), b.scatter(y, j, b.gather(y, j, axis=0), reduce="add")]),
                   cache=False)
    finally:
        stop.set()
        thread.join(60)
    assert seen["calls"] >= 3, f"only {seen['calls']} parallel call(s) completed during the compile"


# -- thread counts ---------------------------------------------------------------------------------


def test_thread_counts_above_the_maximum_are_errors(monkeypatch):
    """256 threads (the documented maximum) are accepted; more, from threads= or from
    CINNLITE_NUM_THREADS, are a CinnliteError; the default is capped on a bigger machine."""
    MAX_THREADS = 256
    b = cl.NetBuilder("many_threads")
    x = b.create_input("float32", (4,), "x")
    prog = b.build([b.add(x, x)])
    assert cl.compile(prog, threads=MAX_THREADS, cache=False).threads == MAX_THREADS
    with pytest.raises(cl.CinnliteError, match=f"threads must be at most {MAX_THREADS}"):
        cl.compile(prog, threads=MAX_THREADS + 1)
    with pytest.raises(cl.CinnliteError, match=f"threads must be at most {MAX_THREADS}"):
        cl.compile(prog, threads=10 ** 9, cache=False)
    monkeypatch.setenv("CINNLITE_NUM_THREADS", str(MAX_THREADS + 1))
    with pytest.raises(cl.CinnliteError, match="CINNLITE_NUM_THREADS must be at most"):
        cl.compile(prog, cache=False)
    monkeypatch.delenv("CINNLITE_NUM_THREADS")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4 * MAX_THREADS)))
    assert cl.compile(prog, cache=False).threads == MAX_THREADS   # a huge machine: capped


def test_many_thread_counts_share_one_bounded_set_of_threads():
    """Calls with 2 to 12 threads leave at most 11 worker threads more than before, not one
    pool per count."""

    def workers():
        return sum(1 for t in threading.enumerate() if t.name.startswith("cinnlite"))

    before = workers()
    x, i = take_inputs(60)
    for threads in range(2, 13):
        exe = parallel_take(f"threads_{threads}", threads=threads)
        np.testing.assert_array_equal(exe(x=x, i=i), x[i])
    assert workers() - before <= 11


# -- fork ------------------------------------------------------------------------------------------

FORK_HELPERS = """
def wait_for_child(pid, timeout):
    # The exit code of forked child pid, or None (and the child killed) after timeout seconds.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None

def describe(exitcode):
    return "hang" if exitcode is None else "right" if exitcode == 0 else f"exit {exitcode}"
"""

FORK_CHILD = """
import multiprocessing

exe = parallel_take("forked", threads=3)
x, i = inputs(3)
assert np.array_equal(exe(x=x, i=i), x[i])      # the parent's pool has its helpers now

def call_in_child():
    right = False
    try:
        right = np.array_equal(exe(x=x, i=i), x[i])
    finally:
        os._exit(0 if right else 3)

pid = os.fork()
if pid == 0:
    call_in_child()
forked = describe(wait_for_child(pid, 20))
process = multiprocessing.get_context("fork").Process(target=call_in_child)
process.start()
process.join(20)
if process.is_alive():
    process.kill()
    process.join()
    in_process = "hang"
else:
    in_process = describe(process.exitcode)
print(json.dumps(dict(os_fork=forked, multiprocessing_fork=in_process)))
"""


def test_forked_children_run_parallel_calls():
    """The parent's helper threads do not exist in a forked child; the child's parallel calls
    must not wait for them."""
    assert run_child(FORK_HELPERS + FORK_CHILD) == {"os_fork": "right", "multiprocessing_fork": "right"}


FORK_DURING_COMPILE_CHILD = """
from cinnlite.runtime import cpu

real_optimise = cpu.optimise
in_llvm = threading.Event()

def slow_optimise(module, tm, opt):
    in_llvm.set()
    time.sleep(0.5)
    return real_optimise(module, tm, opt)

cpu.optimise = slow_optimise
compiler = threading.Thread(target=parallel_take, args=("compiled_meanwhile", 2))
compiler.start()
in_llvm.wait(20)
pid = os.fork()                      # while the other thread is inside LLVM
if pid == 0:
    right = False
    try:
        exe = parallel_take("compiled_in_child", 2)
        x, i = inputs(4)
        right = np.array_equal(exe(x=x, i=i), x[i])
    finally:
        os._exit(0 if right else 3)
compiler.join()
result = describe(wait_for_child(pid, 30))
print(json.dumps(dict(child=result)))
"""


def test_a_child_forked_while_another_thread_compiles_can_compile():
    """A fork while a compile is inside LLVM must not leave the child with the compile lock
    held by a thread it does not have."""
    assert run_child(FORK_HELPERS + FORK_DURING_COMPILE_CHILD) == {"child": "right"}
