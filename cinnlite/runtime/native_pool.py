"""A worker pool in machine code for the chunks of parallel CPU stages.

Why not Python threads: a helper blocked on a Python lock wakes through the kernel, then needs
the GIL to claim a chunk, and the caller sleeps again until the helper's chunk is done; on a
virtual machine each of those wake-ups costs tens of microseconds, so a stage of a few hundred
microseconds ran no faster, or slower, on two threads than on one. Here the helpers are native
loops, started once from Python threads that enter them through ctypes and never come back:
they spin for ``SPIN_US`` after every stage (the next stage of a call, or the next call, finds
them awake), then sleep on a futex. The caller posts a stage, takes chunks itself next to the
helpers, and waits by spinning for the last chunk; it never waits for a helper to wake: a stage
is split into one chunk per thread, claimed from a shared counter, and a chunk no helper has
claimed yet is the caller's to run once it is done with its own. Each helper is bound to a
core of its own (``helper_core``), so that the kernel does not wake it onto the caller's.
Nothing in a stage touches Python or the GIL. Posting a stage uses a sequence number (odd while the stage is being
written): a helper that saw an older stage and joins late finds it finished and leaves; the
caller writes a new stage only once no helper is inside the previous one.

Programs reach the pool through ``cinnlite_parallel``, which the runtime registers with LLVM
before loading any program: a program's main calls it for every stage big enough to split
(``codegen/llvm.py``), with the thread count the runtime wrote into the module's
``cinnlite_threads``. The pool needs Linux's futex on x86-64 or AArch64; elsewhere
``cinnlite_parallel`` runs every stage whole, and the runtime splits stages on the Python pool
of ``workers.py`` instead.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
import time

from .workers import start_helpers

#: How long a helper spins for the next stage before it sleeps.
SPIN_US = 200

#: Set to 0 to leave the helpers free to run on any core (see ``helper_core``).
BIND_ENV = "CINNLITE_BIND_THREADS"

#: Slot offsets (in int64 words) of the pool's shared record; hot words on their own cache line.
SEQ, ACTIVE, NEXT, REMAINING, SLEEPERS, CALLER = 0, 8, 16, 24, 32, 40
FN, TABLE, ERR_BASE, ERR_SIZE, STATUSES, EXTENT, CHUNKS, HELPERS, SPINS, STARTED = range(48, 58)
#: Slots of what the pool learns: how long a sleeping helper took to wake (ns, last two
#: averaged), when the caller last woke the helpers (ns, cleared by the first to wake), how
#: many chunks of the current stage helpers ran, and how long the wake-up call held the caller
#: (ns, last two averaged: on a virtual machine, waking an idle virtual CPU can keep the waker
#: in the system call for hundreds of microseconds, however soon the helper runs).
WAKE_NS, WOKEN_AT, HELPED, WAKE_CALL_NS = 58, 59, 60, 61
#: When the last stage the pool served ended (ns): stages that follow each other closely are a
#: stream of calls, and helpers woken for one will find the next.
LAST_END = 62
RECORD_WORDS = 64

_FUTEX = {"x86_64": 202, "aarch64": 98}
_PAUSE = {"x86_64": ("declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"),
          "aarch64": ("declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)")}

_IR = r"""
@cinnlite_pool_record = global [64 x i64] zeroinitializer, align 64
declare i64 @syscall(i64, ...)
declare i32 @clock_gettime(i32, ptr)
{pause_decl}

; Monotonic time in nanoseconds.
define internal i64 @now_ns() {{
  %ts = alloca [2 x i64], align 8
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %sp = getelementptr [2 x i64], ptr %ts, i64 0, i64 0
  %sec = load i64, ptr %sp
  %np = getelementptr [2 x i64], ptr %ts, i64 0, i64 1
  %nsec = load i64, ptr %np
  %s_ns = mul i64 %sec, 1000000000
  %t = add i64 %s_ns, %nsec
  ret i64 %t
}}

; Average a measured time into a slot of the record: the last two, or the first alone.
define internal void @note_average(ptr %slot, i64 %took) {{
  %before = load atomic i64, ptr %slot seq_cst, align 8
  %both = add i64 %before, %took
  %fresh = icmp eq i64 %before, 0
  %half = lshr i64 %both, 1
  %avg = select i1 %fresh, i64 %took, i64 %half
  store atomic i64 %avg, ptr %slot seq_cst, align 8
  ret void
}}

; Let an estimate read as ``value`` fade by a sixteenth in its slot.
define internal void @fade(ptr %slot, i64 %value) {{
  %part = lshr i64 %value, 4
  %faded = sub i64 %value, %part
  store atomic i64 %faded, ptr %slot seq_cst, align 8
  ret void
}}

; Wake every sleeping helper, noting when (a helper measures how long it took to wake) and how
; long the system call held the caller.
define internal void @wake_helpers(ptr %p) {{
  %seqp = getelementptr i64, ptr %p, i64 {SEQ}
  %atp = getelementptr i64, ptr %p, i64 {WOKEN_AT}
  %t = call i64 @now_ns()
  store atomic i64 %t, ptr %atp seq_cst, align 8
  %r = call i64 (i64, ...) @syscall(i64 {futex}, ptr %seqp, i64 129, i64 2147483647)
  %t1 = call i64 @now_ns()
  %held = sub i64 %t1, %t
  %callp = getelementptr i64, ptr %p, i64 {WAKE_CALL_NS}
  call void @note_average(ptr %callp, i64 %held)
  ret void
}}

define internal void @relax() {{
  {pause}
  ret void
}}

; Claim and run chunks of the posted stage until none is left (counting a helper's in HELPED).
define internal void @run_chunks(ptr %p, i1 %helper) {{
entry:
  %fn_slot = getelementptr i64, ptr %p, i64 {FN}
  %fn_i = load i64, ptr %fn_slot
  %fn = inttoptr i64 %fn_i to ptr
  %f1 = getelementptr i64, ptr %p, i64 {TABLE}
  %table = load i64, ptr %f1
  %f2 = getelementptr i64, ptr %p, i64 {ERR_BASE}
  %err = load i64, ptr %f2
  %f3 = getelementptr i64, ptr %p, i64 {ERR_SIZE}
  %size = load i64, ptr %f3
  %f4 = getelementptr i64, ptr %p, i64 {STATUSES}
  %st_i = load i64, ptr %f4
  %st = inttoptr i64 %st_i to ptr
  %f5 = getelementptr i64, ptr %p, i64 {EXTENT}
  %extent = load i64, ptr %f5
  %f6 = getelementptr i64, ptr %p, i64 {CHUNKS}
  %chunks = load i64, ptr %f6
  %next = getelementptr i64, ptr %p, i64 {NEXT}
  %remaining = getelementptr i64, ptr %p, i64 {REMAINING}
  br label %claim
claim:
  %k = atomicrmw add ptr %next, i64 1 seq_cst
  %more = icmp slt i64 %k, %chunks
  br i1 %more, label %count, label %done
count:
  br i1 %helper, label %helped, label %run
helped:
  %helpedp = getelementptr i64, ptr %p, i64 {HELPED}
  %h = atomicrmw add ptr %helpedp, i64 1 seq_cst
  br label %run
run:
  %b0 = mul i64 %extent, %k
  %begin = sdiv i64 %b0, %chunks
  %k1 = add i64 %k, 1
  %e0 = mul i64 %extent, %k1
  %end = sdiv i64 %e0, %chunks
  %eoff = mul i64 %size, %k
  %eaddr_i = add i64 %err, %eoff
  %taddr = inttoptr i64 %table to ptr
  %eaddr = inttoptr i64 %eaddr_i to ptr
  %status = call i32 %fn(ptr %taddr, i64 %begin, i64 %end, ptr %eaddr)
  %sp = getelementptr i32, ptr %st, i64 %k
  store i32 %status, ptr %sp
  %r = atomicrmw sub ptr %remaining, i64 1 seq_cst
  br label %claim
done:
  ret void
}}

; A helper: wait for a stage (spin, then sleep on the futex), join it, run chunks; forever.
define void @cinnlite_pool_helper(ptr %p, i64 %id) {{
entry:
  %seqp = getelementptr i64, ptr %p, i64 {SEQ}
  %activep = getelementptr i64, ptr %p, i64 {ACTIVE}
  %sleepp = getelementptr i64, ptr %p, i64 {SLEEPERS}
  %spinp = getelementptr i64, ptr %p, i64 {SPINS}
  %seq0 = load atomic i32, ptr %seqp seq_cst, align 8
  br label %wait
wait:
  %seen = phi i32 [ %seq0, %entry ], [ %seen, %spin ], [ %seen, %slept ], [ %g, %skip ], [ %g, %left ]
  %n = phi i64 [ 0, %entry ], [ %n1, %spin ], [ 0, %slept ], [ 0, %skip ], [ 0, %left ]
  %g = load atomic i32, ptr %seqp seq_cst, align 8
  %changed = icmp ne i32 %g, %seen
  %odd = and i32 %g, 1
  %even = icmp eq i32 %odd, 0
  %posted = and i1 %changed, %even
  br i1 %posted, label %got, label %idle
idle:
  %budget = load i64, ptr %spinp
  %spinning = icmp slt i64 %n, %budget
  br i1 %spinning, label %spin, label %sleep
spin:
  call void @relax()
  %n1 = add i64 %n, 1
  br label %wait
sleep:
  %s0 = atomicrmw add ptr %sleepp, i64 1 seq_cst
  %g2 = load atomic i32, ptr %seqp seq_cst, align 8
  %same = icmp eq i32 %g2, %g
  br i1 %same, label %futex, label %woke
futex:
  %gz = zext i32 %g to i64
  %fr = call i64 (i64, ...) @syscall(i64 {futex}, ptr %seqp, i64 128, i64 %gz, ptr null)
  br label %woke
woke:
  %s1 = atomicrmw sub ptr %sleepp, i64 1 seq_cst
  %atp = getelementptr i64, ptr %p, i64 {WOKEN_AT}
  %at = atomicrmw xchg ptr %atp, i64 0 seq_cst
  %first = icmp ne i64 %at, 0
  br i1 %first, label %measure, label %slept
measure:
  %t = call i64 @now_ns()
  %took = sub i64 %t, %at
  %wakep = getelementptr i64, ptr %p, i64 {WAKE_NS}
  call void @note_average(ptr %wakep, i64 %took)
  br label %slept
slept:
  br label %wait
got:
  %f7 = getelementptr i64, ptr %p, i64 {HELPERS}
  %allowed = load i64, ptr %f7
  %mine = icmp slt i64 %id, %allowed
  br i1 %mine, label %join, label %skip
skip:
  br label %wait
join:
  %a0 = atomicrmw add ptr %activep, i64 1 seq_cst
  %g3 = load atomic i32, ptr %seqp seq_cst, align 8
  %current = icmp eq i32 %g3, %g
  br i1 %current, label %work, label %left
work:
  call void @run_chunks(ptr %p, i1 true)
  br label %left
left:
  %a1 = atomicrmw sub ptr %activep, i64 1 seq_cst
  br label %wait
}}

; The caller: post a stage, run chunks next to the helpers, wait for the last one.
define void @cinnlite_pool_run(ptr %p, i64 %fn, i64 %table, i64 %err, i64 %size, i64 %statuses,
                               i64 %extent, i64 %chunks, i64 %helpers) {{
entry:
  %seqp = getelementptr i64, ptr %p, i64 {SEQ}
  %activep = getelementptr i64, ptr %p, i64 {ACTIVE}
  %g = load atomic i32, ptr %seqp seq_cst, align 8
  %odd = add i32 %g, 1
  store atomic i32 %odd, ptr %seqp seq_cst, align 8
  br label %drain
drain:
  %a = load atomic i64, ptr %activep seq_cst, align 8
  %busy = icmp ne i64 %a, 0
  br i1 %busy, label %drain_wait, label %write
drain_wait:
  call void @relax()
  br label %drain
write:
  %f8 = getelementptr i64, ptr %p, i64 {FN}
  store i64 %fn, ptr %f8
  %f9 = getelementptr i64, ptr %p, i64 {TABLE}
  store i64 %table, ptr %f9
  %f10 = getelementptr i64, ptr %p, i64 {ERR_BASE}
  store i64 %err, ptr %f10
  %f11 = getelementptr i64, ptr %p, i64 {ERR_SIZE}
  store i64 %size, ptr %f11
  %f12 = getelementptr i64, ptr %p, i64 {STATUSES}
  store i64 %statuses, ptr %f12
  %f13 = getelementptr i64, ptr %p, i64 {EXTENT}
  store i64 %extent, ptr %f13
  %f14 = getelementptr i64, ptr %p, i64 {CHUNKS}
  store i64 %chunks, ptr %f14
  %f15 = getelementptr i64, ptr %p, i64 {HELPERS}
  store i64 %helpers, ptr %f15
  %remaining = getelementptr i64, ptr %p, i64 {REMAINING}
  store atomic i64 %chunks, ptr %remaining seq_cst, align 8
  %helpedp = getelementptr i64, ptr %p, i64 {HELPED}
  store atomic i64 0, ptr %helpedp seq_cst, align 8
  %f16 = getelementptr i64, ptr %p, i64 {NEXT}
  store atomic i64 0, ptr %f16 seq_cst, align 8
  %even = add i32 %g, 2
  store atomic i32 %even, ptr %seqp seq_cst, align 8
  %f17 = getelementptr i64, ptr %p, i64 {SLEEPERS}
  %sleepers = load atomic i64, ptr %f17 seq_cst, align 8
  %any = icmp ne i64 %sleepers, 0
  br i1 %any, label %wake, label %work
wake:
  call void @wake_helpers(ptr %p)
  br label %work
work:
  call void @run_chunks(ptr %p, i1 false)
  br label %finish
finish:
  %left = load atomic i64, ptr %remaining seq_cst, align 8
  %running = icmp ne i64 %left, 0
  br i1 %running, label %finish_wait, label %done
finish_wait:
  call void @relax()
  br label %finish
done:
  ret void
}}

; Note a stage's time per unit of work, measured over a run of it by the caller alone, in the
; stage's own slot: picoseconds per innermost iteration, at least 1 (0 means not measured yet).
define internal void @note_rate(ptr %rate, i64 %t0, i64 %t1, i64 %work) {{
entry:
  %some = icmp sgt i64 %work, 0
  br i1 %some, label %note, label %done
note:
  %ns = sub i64 %t1, %t0
  %total = mul i64 %ns, 1000
  %ps = sdiv i64 %total, %work
  %low = icmp slt i64 %ps, 1
  %kept = select i1 %low, i64 1, i64 %ps
  store atomic i64 %kept, ptr %rate monotonic, align 8
  br label %done
done:
  ret void
}}

; What a program's main calls for a stage it may split: the stage over [0, extent) in chunks on
; the caller and up to threads - 1 helpers (walks_all: every chunk walks the whole update list);
; the stage whole on the caller when there is no helper, or another caller holds the pool.
; A helper that sleeps is worth waking only if the split ends well before the caller alone would:
; the helper's half starts when it runs, the caller's once the wake-up call returns. When every
; helper sleeps and the stage's last measured time alone (``rate``, its own slot, times ``work``,
; its innermost iterations) is under twice the later of the two (as the last wake-ups took: on
; a virtual machine an idle virtual CPU can take a millisecond to run again, and waking it can
; hold the caller in the system call for hundreds of microseconds), the caller runs the stage
; whole and lets them sleep. Returns the status of the first failed chunk (its record
; copied to err), else FLAGGED if any chunk flagged, else OK.
define i32 @cinnlite_parallel(ptr %fn, ptr %bufs, i64 %extent, i64 %work, i64 %threads, i64 %walks_all, ptr %err,
                              ptr %rate) {{
entry:
  %p = getelementptr i64, ptr @cinnlite_pool_record, i64 0
  %one = icmp sle i64 %threads, 1
  %small = icmp slt i64 %extent, 2
  %few = or i1 %one, %small
  br i1 %few, label %serial, label %lock
lock:
  %callerp = getelementptr i64, ptr %p, i64 {CALLER}
  %cas = cmpxchg ptr %callerp, i64 0, i64 1 seq_cst seq_cst
  %mine = extractvalue {{ i64, i1 }} %cas, 1
  br i1 %mine, label %sized, label %serial
sized:
  %startedp = getelementptr i64, ptr %p, i64 {STARTED}
  %have = load atomic i64, ptr %startedp seq_cst, align 8
  %want = sub i64 %threads, 1
  %less = icmp slt i64 %have, %want
  %helpers = select i1 %less, i64 %have, i64 %want
  %none = icmp sle i64 %helpers, 0
  br i1 %none, label %unlock_serial, label %awake
awake:
  %sleepersp = getelementptr i64, ptr %p, i64 {SLEEPERS}
  %asleep = load atomic i64, ptr %sleepersp seq_cst, align 8
  %all_asleep = icmp sge i64 %asleep, %have
  br i1 %all_asleep, label %cold, label %split
cold:
  %ps = load atomic i64, ptr %rate monotonic, align 8
  %wakep = getelementptr i64, ptr %p, i64 {WAKE_NS}
  %arrive = load atomic i64, ptr %wakep seq_cst, align 8
  %callp = getelementptr i64, ptr %p, i64 {WAKE_CALL_NS}
  %held = load atomic i64, ptr %callp seq_cst, align 8
  ; The caller's half starts once the wake-up call lets it go, the helper's once it runs.
  %later = icmp ugt i64 %held, %arrive
  %wake = select i1 %later, i64 %held, i64 %arrive
  %known = icmp ne i64 %ps, 0
  %cost = mul i64 %ps, %work
  %worth = mul i64 %wake, 2000
  %quick = icmp slt i64 %cost, %worth
  %by_cost = and i1 %known, %quick
  ; Every chunk of an update nest walks all updates: with every helper asleep, the caller would
  ; walk them once per chunk. It walks them once, whole, and wakes the helpers for what follows
  ; (unless the stage is quick).
  %rows = icmp ne i64 %walks_all, 0
  %alone = or i1 %by_cost, %rows
  br i1 %alone, label %by_itself, label %split
by_itself:
  br i1 %by_cost, label %quick_alone, label %rouse
quick_alone:
  ; Quick, but the last stage ended moments ago: calls are coming one after another, so run this
  ; one whole and wake the helpers for the next (they spin once awake).
  %lastp = getelementptr i64, ptr %p, i64 {LAST_END}
  %last = load atomic i64, ptr %lastp monotonic, align 8
  %now = call i64 @now_ns()
  %gap = sub i64 %now, %last
  %streaming = icmp slt i64 %gap, {stream_ns}
  br i1 %streaming, label %rouse, label %forget
forget:
  ; The wake-up is measured only when helpers are woken: let both estimates fade by a sixteenth
  ; with every stage kept whole, so that one slow wake-up (or a machine that got quicker)
  ; cannot keep the helpers asleep for good; a later stage then wakes them and measures again.
  call void @fade(ptr %wakep, i64 %arrive)
  call void @fade(ptr %callp, i64 %held)
  br label %timed
rouse:
  call void @wake_helpers(ptr %p)
  br label %timed
timed:
  store atomic i64 0, ptr %callerp seq_cst, align 8
  %t0 = call i64 @now_ns()
  %alone_status = call i32 %fn(ptr %bufs, i64 0, i64 %extent, ptr %err)
  %t1 = call i64 @now_ns()
  call void @note_rate(ptr %rate, i64 %t0, i64 %t1, i64 %work)
  %endp = getelementptr i64, ptr %p, i64 {LAST_END}
  store atomic i64 %t1, ptr %endp monotonic, align 8
  ret i32 %alone_status
unlock_serial:
  store atomic i64 0, ptr %callerp seq_cst, align 8
  br label %serial
serial:
  %whole = call i32 %fn(ptr %bufs, i64 0, i64 %extent, ptr %err)
  ret i32 %whole
split:
  %per = add i64 %helpers, 1
  %fewer = icmp slt i64 %extent, %per
  %chunks = select i1 %fewer, i64 %extent, i64 %per
  %nerr = mul i64 %chunks, {record}
  %errs = alloca i64, i64 %nerr, align 8
  %sts = alloca i32, i64 %chunks, align 4
  %fn_i = ptrtoint ptr %fn to i64
  %bufs_i = ptrtoint ptr %bufs to i64
  %errs_i = ptrtoint ptr %errs to i64
  %sts_i = ptrtoint ptr %sts to i64
  %s0 = call i64 @now_ns()
  call void @cinnlite_pool_run(ptr %p, i64 %fn_i, i64 %bufs_i, i64 %errs_i, i64 {record_bytes}, i64 %sts_i,
                               i64 %extent, i64 %chunks, i64 %helpers)
  %s1 = call i64 @now_ns()
  %split_endp = getelementptr i64, ptr %p, i64 {LAST_END}
  store atomic i64 %s1, ptr %split_endp monotonic, align 8
  %helpedp = getelementptr i64, ptr %p, i64 {HELPED}
  %helped = load atomic i64, ptr %helpedp seq_cst, align 8
  store atomic i64 0, ptr %callerp seq_cst, align 8
  %unhelped = icmp eq i64 %helped, 0
  br i1 %unhelped, label %note, label %scan_from
note:
  call void @note_rate(ptr %rate, i64 %s0, i64 %s1, i64 %work)
  br label %scan_from
scan_from:
  br label %scan
scan:
  %k = phi i64 [ 0, %scan_from ], [ %k1, %next_chunk ]
  %flagged = phi i1 [ false, %scan_from ], [ %flagged1, %next_chunk ]
  %more = icmp slt i64 %k, %chunks
  br i1 %more, label %look, label %finished
look:
  %sp = getelementptr i32, ptr %sts, i64 %k
  %st = load i32, ptr %sp
  %failed = icmp eq i32 %st, {error}
  br i1 %failed, label %copy, label %next_chunk
next_chunk:
  %is_flag = icmp eq i32 %st, {flagged}
  %flagged1 = or i1 %flagged, %is_flag
  %k1 = add i64 %k, 1
  br label %scan
copy:
  %at = mul i64 %k, {record}
  %src = getelementptr i64, ptr %errs, i64 %at
  call void @llvm.memcpy.p0.p0.i64(ptr %err, ptr %src, i64 {record_bytes}, i1 false)
  ret i32 {error}
finished:
  %r = select i1 %flagged, i32 {flagged}, i32 {ok}
  ret i32 %r
}}

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

; Spin ``n`` times (to measure how long a spin takes here).
define void @cinnlite_pool_spin(i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  call void @relax()
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}
"""

_HELPER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
_SPIN = ctypes.CFUNCTYPE(None, ctypes.c_int64)

#: Where there is no futex: ``cinnlite_parallel`` runs every stage whole on the caller, and the
#: runtime splits stages on the Python pool instead (``CPUExecutable._run_stages``).
_SERIAL_IR = """
define i32 @cinnlite_parallel(ptr %fn, ptr %bufs, i64 %extent, i64 %work, i64 %threads, i64 %walks_all, ptr %err,
                              ptr %rate) {
  %r = call i32 %fn(ptr %bufs, i64 0, i64 %extent, ptr %err)
  ret i32 %r
}
"""


def _ir_text(machine: str) -> str:
    pause_decl, pause = _PAUSE[machine]
    from ..codegen.error_record import FIRST_FAILURE
    from ..codegen.llvm import ERROR, FLAGGED, OK
    slots = dict(SEQ=SEQ, ACTIVE=ACTIVE, NEXT=NEXT, REMAINING=REMAINING, SLEEPERS=SLEEPERS, CALLER=CALLER, FN=FN,
                 TABLE=TABLE, ERR_BASE=ERR_BASE, ERR_SIZE=ERR_SIZE, STATUSES=STATUSES, EXTENT=EXTENT, CHUNKS=CHUNKS,
                 HELPERS=HELPERS, SPINS=SPINS, STARTED=STARTED, WAKE_NS=WAKE_NS, WOKEN_AT=WOKEN_AT, HELPED=HELPED,
                 WAKE_CALL_NS=WAKE_CALL_NS, LAST_END=LAST_END)
    return _IR.format(pause_decl=pause_decl, pause=pause, futex=_FUTEX[machine], stream_ns=2 * SPIN_US * 1000,
                      record=FIRST_FAILURE.size, record_bytes=FIRST_FAILURE.nbytes, error=ERROR, flagged=FLAGGED,
                      ok=OK, **slots)


class NativePool:
    """The machine code of ``cinnlite_parallel`` (which programs call, through the symbol the
    runtime registers before loading any), its shared record, and the helper threads.
    ``native`` is False where the code only runs stages whole (no futex here)."""

    def __init__(self, engine, native: bool):
        self._engine = engine  # owns the machine code, which must outlive every helper
        self.native = native
        self.parallel_address = engine.get_function_address("cinnlite_parallel")
        self._record = None
        if native:
            address = engine.get_global_value_address("cinnlite_pool_record")
            self._record = (ctypes.c_int64 * RECORD_WORDS).from_address(address)
            self._helper = _HELPER(engine.get_function_address("cinnlite_pool_helper"))
            self._spin = _SPIN(engine.get_function_address("cinnlite_pool_spin"))
        self._grow_lock = threading.Lock()
        self._helpers = 0
        self._start_failed = False

    @classmethod
    def build(cls, jit_module):
        """The pool for this process: native where Linux's futex is there on x86-64 or AArch64,
        else the serial ``cinnlite_parallel``. ``jit_module(text, symbols)`` makes an engine."""
        machine = platform.machine().lower()
        if sys.platform.startswith("linux") and machine in _FUTEX:
            libc = ctypes.CDLL(None)
            symbols = {name: ctypes.cast(getattr(libc, name), ctypes.c_void_p).value
                       for name in ("syscall", "clock_gettime")}
            try:
                return cls(jit_module(_ir_text(machine), symbols), True)
            except Exception:  # noqa: BLE001 - the serial code and the Python pool serve instead
                pass
        return cls(jit_module(_SERIAL_IR, {}), False)

    def grow(self, wanted: int) -> int:
        """Start helpers until there are ``wanted`` (see ``workers.start_helpers``); returns how
        many there are."""
        if not self.native or self._helpers >= wanted:
            return self._helpers
        with self._grow_lock:
            if not self._record[SPINS]:  # measured once, when a process first needs helpers
                self._record[SPINS] = _spins_per(SPIN_US, self._spin)
            cores = _allowed_cores()
            self._helpers, self._start_failed = start_helpers(
                self._enter_helper, lambda k: (k, helper_core(k, cores)), "cinnlite-native-worker",
                self._helpers, wanted, self._start_failed)
            self._record[STARTED] = self._helpers
            return self._helpers

    def _enter_helper(self, k: int, core: int | None):
        """A helper thread's life: bound to its core (if any), then the native loop for good."""
        if core is not None:
            try:
                os.sched_setaffinity(0, {core})  # this thread only
            except OSError:  # the process's cores changed meanwhile: run anywhere
                pass
        self._helper(ctypes.addressof(self._record), k)

    def restart_helpers(self):
        """In a forked child: the helpers are gone, and a stage the parent was running when it
        forked left the record in use. Start from an empty record and as many helpers again."""
        wanted, self._helpers = self._helpers, 0
        self._grow_lock = threading.Lock()
        if self._record is not None:
            for slot in (STARTED, CALLER, ACTIVE, SLEEPERS, WOKEN_AT):
                self._record[slot] = 0
        self.grow(wanted)


def _allowed_cores() -> list | None:
    """The cores this process may run on, in order; None where helpers stay unbound
    (``CINNLITE_BIND_THREADS=0``, or no ``sched_setaffinity`` here)."""
    if os.environ.get(BIND_ENV, "1").strip() == "0" or not hasattr(os, "sched_setaffinity"):
        return None
    return sorted(os.sched_getaffinity(0))


def helper_core(k: int, cores: list | None) -> int | None:
    """The core helper ``k`` is bound to: the (k+1)-th of the process's cores, round.

    Why bind: a helper woken from its futex is placed by the kernel next to the thread that woke
    it, so an unbound helper often starts on the caller's core, preempts the caller and runs
    its chunk there while another core idles. On a 2-core VM that held the caller in the wake-up
    call for 150-570 us and kept most 1 M-element stages on the caller alone; bound, the call
    returned in about 25 us and the helper ran within about 90 us. The caller stays unbound (it
    is the user's thread), and the first core is left to it."""
    if not cores or len(cores) < 2:
        return None
    return cores[(k + 1) % len(cores)]


def _spins_per(microseconds: float, spin) -> int:
    """How many spins take ``microseconds`` here (the fastest of a few measurements)."""
    n = 20_000
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        spin(n)
        best = min(best, time.perf_counter() - t0)
    return max(1, int(n * microseconds * 1e-6 / max(best, 1e-9)))


_POOL: NativePool | None = None


def register_pool(llvm, jit_module) -> NativePool:
    """Build the process's pool and register ``cinnlite_parallel`` with LLVM, before any program
    is loaded (programs call it)."""
    global _POOL
    if _POOL is None:
        _POOL = NativePool.build(jit_module)
        llvm.add_symbol("cinnlite_parallel", _POOL.parallel_address)
    return _POOL


def shared_native_pool() -> NativePool | None:
    """The process's pool, once ``register_pool`` has built it."""
    return _POOL


def _restart_helpers_after_fork():
    if _POOL is not None:
        _POOL.restart_helpers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_restart_helpers_after_fork)
