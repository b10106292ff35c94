"""The Python worker threads that run the chunks of parallel CPU stages where there is no native
pool (``native_pool.py``: not Linux on x86-64 or AArch64), and the start of helper threads both use.

One process-wide pool serves every executable and every ``threads`` value: it grows to the
most helpers any call has asked for (``MAX_THREADS - 1`` at most) and never shrinks, so
however many thread counts a process uses, it holds one bounded set of idle threads.

A parallel stage is a ``Batch`` of chunks; ctypes releases the GIL around every call into
compiled code, so chunks run truly in parallel. The calling thread takes chunks itself, next to
the helpers, so a call finishes even when no helper ever picks it up (a busy pool, or threads
that could not be started). A call never returns while one of its chunks still runs: if an
exception reaches the caller (Ctrl-C, another signal's handler), no further chunk starts and
the caller waits for the running ones before the exception goes on, because those chunks
write into buffers that are freed and reused once the call is over.

Threads do not survive ``fork``: a forked child starts with a fresh, empty pool.
"""
from __future__ import annotations

import os
import queue
import threading
import warnings

from ..errors import CinnliteError, ThreadStartWarning

#: The most threads one call may use; ``threads=`` and ``CINNLITE_NUM_THREADS`` above it are
#: errors, and the default (the usable cores) is capped at it.
MAX_THREADS = 256


def check_threads(threads: int, source: str = "threads") -> int:
    """``threads`` if it is within ``[1, MAX_THREADS]``; a CinnliteError naming ``source``
    otherwise. More threads than that only queue up on the cores and hold memory."""
    if threads > MAX_THREADS:
        raise CinnliteError(f"{source} must be at most {MAX_THREADS} (cinnlite's MAX_THREADS), got {threads}")
    if threads < 1:
        raise CinnliteError(f"{source} must be a positive integer, got {threads}")
    return threads


class Batch:
    """The chunks ``0 .. n-1`` of one parallel stage; ``run_chunk(k)`` runs chunk ``k``.

    Chunks are claimed in order under a lock, by helpers and by the caller alike. Only the
    chunks running on helpers are counted: the caller's own chunk cannot outlive an exception
    in the caller, since the exception can only be raised once the chunk has returned.
    """

    def __init__(self, run_chunk, n: int):
        self._run_chunk = run_chunk
        self._n = n
        self._next = 0
        self._helpers_running = 0
        self._cond = threading.Condition(threading.Lock())
        self.results = [None] * n
        self._error = None

    def _claim(self, helper: bool) -> int:
        """The next chunk to run, or -1 when every chunk has been taken (or the batch stopped)."""
        with self._cond:
            if self._next >= self._n:
                return -1
            k = self._next
            self._next += 1
            if helper:
                self._helpers_running += 1
            return k

    def help(self):
        """Run chunks on a helper thread until none is left. Never raises: a chunk's exception
        is handed to the caller, and the helper goes on serving other batches."""
        while (k := self._claim(helper=True)) >= 0:
            try:
                self.results[k] = self._run_chunk(k)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller by wait()
                if self._error is None:
                    self._error = exc
            with self._cond:
                self._helpers_running -= 1
                if not self._helpers_running:
                    self._cond.notify_all()

    def work(self):
        """Run chunks on the calling thread until none is left."""
        while (k := self._claim(helper=False)) >= 0:
            self.results[k] = self._run_chunk(k)

    def wait(self):
        """After ``work`` (every chunk taken), wait until the helpers' chunks have run; re-raise
        the first exception of one."""
        with self._cond:
            while self._helpers_running:
                self._cond.wait()
        if self._error is not None:
            raise self._error

    def abandon(self):
        """Start no further chunk and wait until no helper runs one. Exceptions raised meanwhile
        (a second Ctrl-C) are dropped: the caller is already unwinding with the first one, and
        must not leave before the running chunks stop writing into its buffers."""
        while True:
            try:
                with self._cond:
                    self._next = self._n
                    while self._helpers_running:
                        self._cond.wait()
                return
            except BaseException:  # noqa: BLE001 - see the docstring
                continue


def start_helpers(target, args_of, name: str, have: int, wanted: int, failed: bool) -> tuple[int, bool]:
    """Start daemon threads running ``target(*args_of(k))`` until there are ``wanted``; returns
    (how many there are, whether a start failed). A thread that cannot be started (a process or
    memory limit) gives a ThreadStartWarning once; calls then use the helpers there are, down to
    none (the caller alone), and no further start is tried."""
    while have < wanted and not failed:
        thread = threading.Thread(target=target, args=args_of(have), name=f"{name}-{have}", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:
            failed = True
            warnings.warn(ThreadStartWarning(
                f"could not start CPU worker thread {have + 1} of {wanted} ({exc}); parallel calls "
                f"now run on at most {have + 1} thread(s)"))
        else:
            have += 1
    return have, failed


class WorkerPool:
    """Helper threads that run ``Batch`` chunks next to the threads that call executables."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tasks = queue.SimpleQueue()
        self._helpers = 0
        self._start_failed = False

    def _grow(self, wanted: int):
        """Start helpers until there are ``wanted`` (see ``start_helpers``)."""
        with self._lock:
            self._helpers, self._start_failed = start_helpers(
                self._serve, lambda k: (), "cinnlite-worker", self._helpers, wanted, self._start_failed)

    def _serve(self):
        while True:
            self._tasks.get().help()

    def run(self, run_chunk, n: int, threads: int) -> list:
        """Run chunks ``0 .. n-1`` on the caller and up to ``threads - 1`` helpers; return the
        chunks' results in order."""
        if self._helpers < threads - 1 and not self._start_failed:
            self._grow(threads - 1)
        batch = Batch(run_chunk, n)
        try:
            for _ in range(min(n - 1, threads - 1, self._helpers)):
                self._tasks.put(batch)
            batch.work()
            batch.wait()
        except BaseException:
            batch.abandon()
            raise
        return batch.results


_POOL = WorkerPool()


def shared_pool() -> WorkerPool:
    """The process's pool (a fresh one in a forked child)."""
    return _POOL


def _forget_pool_after_fork():
    """A forked child has only the thread that forked: the parent's helpers are gone, and a
    batch handed to them would wait forever. The child starts with a pool of its own."""
    global _POOL
    _POOL = WorkerPool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)
