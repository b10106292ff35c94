"""How ``cinnlite demo`` cuts its stage texts down to the hot loop, on texts of the shapes other
CPUs and other programs give (a vector loop of its own, an unrolled body, no vector code), so that
the demo stays one screen and shows the right code on any machine."""
from __future__ import annotations

import cinnlite as cl
from cinnlite.demo import (abbreviate_resolved_indices, build_message_passing, fold_other_stages, function_blocks,
                           hot_loop_blocks, hottest_stage, ir_lines, kernel_text)

# The shape of a vectorised gather: an outer loop around LLVM's vector loop, its preheader and
# its middle block (both outside the vector loop, one with vector code).
VECTOR_LOOP_MODULE = '''
define i32 @k_other_s0(ptr %bufs) {
entry:
  ret i32 0
}

define i32 @"k_gather_0_s1"(ptr %bufs, i64 %begin, i64 %end) #0 {
entry:
  br label %outer
outer:                                            ; preds = %outer.latch, %entry
  %i = phi i64 [ %begin, %entry ], [ %i.next, %outer.latch ]
  br label %vector.ph
vector.ph:                                        ; preds = %outer
  %splat = insertelement <8 x i64> poison, i64 %i, i64 0
  br label %vector.body
vector.body:                                      ; preds = %vector.body, %vector.ph
  %iv = phi i64 [ 0, %vector.ph ], [ %iv.next, %vector.body ]
  %v = load <8 x float>, ptr %bufs, align 4, !alias.scope !3, !noalias !5
  %iv.next = add i64 %iv, 8
  %done = icmp eq i64 %iv.next, 64
  br i1 %done, label %outer.latch, label %vector.body, !llvm.loop !7
outer.latch:                                      ; preds = %vector.body
  %i.next = add i64 %i, 1
  %stop = icmp eq i64 %i.next, %end
  br i1 %stop, label %exit, label %outer
exit:                                             ; preds = %outer.latch
  ret i32 0
}
'''

# The shape of the message-passing update: the inner loop became straight-line vector code and
# the unroller copied the outer loop's body once ("body.1").
UNROLLED_MODULE = '''
define i32 @k_s2(ptr %bufs) {
entry:
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %i.next, %body.1 ]
  br label %body
body:
  %a = load <16 x float>, ptr %bufs, align 4
  br label %body.1
body.1:
  %b = load <16 x float>, ptr %bufs, align 4
  %i.next = add i64 %i, 2
  %stop = icmp eq i64 %i.next, 100
  br i1 %stop, label %exit, label %head
exit:
  ret i32 0
}
'''

SCALAR_MODULE = '''
define i32 @k_s0(ptr %bufs) {
  br label %loop
loop:
  %i = phi i64 [ 0, %0 ], [ %i.next, %loop ]
  %i.next = add i64 %i, 1
  %stop = icmp eq i64 %i.next, 100
  br i1 %stop, label %exit, label %loop
exit:
  ret i32 0
}
'''


def labels(blocks):
    return [b.label for b in blocks]


def test_a_vector_loop_of_its_own_is_shown_alone():
    blocks = function_blocks(VECTOR_LOOP_MODULE, "k_gather_0_s1")
    assert labels(blocks) == ["entry", "outer", "vector.ph", "vector.body", "outer.latch", "exit"]
    hot, copies = hot_loop_blocks(blocks)
    assert labels(hot) == ["vector.body"] and copies == 1
    text = "\n".join(ir_lines(hot))
    assert text.startswith("vector.body:\n") and "load <8 x float>" in text
    assert "!alias.scope" not in text and "!llvm.loop" not in text


def test_one_copy_of_an_unrolled_body_is_shown():
    hot, copies = hot_loop_blocks(function_blocks(UNROLLED_MODULE, "k_s2"))
    assert labels(hot) == ["body"] and copies == 2


def test_a_loop_without_vector_code_is_shown_whole():
    blocks = function_blocks(SCALAR_MODULE, "k_s0")
    assert labels(blocks) == ["", "loop", "exit"]   # an entry block without a label
    hot, copies = hot_loop_blocks(blocks)
    assert labels(hot) == ["loop"] and copies == 1


def test_long_blocks_are_cut_and_the_rest_counted():
    blocks = function_blocks(UNROLLED_MODULE, "k_s2")
    lines = ir_lines(blocks, limit=5)
    assert len(lines) == 5 and lines[-1] == f"  ... {sum(len(b.lines) + 1 for b in blocks) - 4} more lines"


KERNEL = """kernel k(x: float32[5, 2], i: int64[7], k: float32[7, 2])  # take {
  alloc t: float32[7]
  for c0 in 0..7 {  # parallel_check
    if ((uint64(i[c0]) + uint64(5)) >= uint64(10)) {
      report_index_error(check=0, position=c0, value=i[c0])
    }
  }
  for i0 in 0..7 {  # parallel
    k[i0, 0] = x[select(((uint64(i[i0]) + uint64(5)) >= uint64(10)), 0, select((i[i0] < 0), (i[i0] + 5), i[i0])), 0]
  }
}"""


def test_the_hot_stage_is_kept_whole_and_the_others_folded():
    folded = fold_other_stages(KERNEL, 1).split("\n")
    assert folded[:3] == [KERNEL.split("\n")[0], "  alloc t: float32[7]",
                          "  for c0 in 0..7 { ... }  # parallel_check (5 lines)"]
    assert folded[3:] == KERNEL.split("\n")[7:]
    assert fold_other_stages(KERNEL, 0).split("\n")[-2] == "  for i0 in 0..7 { ... }  # parallel (3 lines)"


def test_resolved_indices_are_abbreviated_and_defined():
    text, legend = abbreviate_resolved_indices(KERNEL)
    assert "k[i0, 0] = x[n(i[i0]), 0]" in text
    assert legend == ["where n(v) = select(((uint64(v) + uint64(5)) >= uint64(10)), 0, select((v < 0), (v + 5), v))"]
    two_sizes = "a[select(((uint64(j[0]) + uint64(3)) >= uint64(6)), 0, select((j[0] < 0), (j[0] + 3), j[0]))] " + KERNEL
    text, legend = abbreviate_resolved_indices(two_sizes)
    assert text.startswith("a[n3(j[0])]") and "x[n5(i[i0]), 0]" in text and len(legend) == 2


def test_the_hot_stage_of_message_passing_is_the_update_loop():
    exe = cl.compile(build_message_passing(), target="cpu")
    stage, place = hottest_stage(exe)
    assert stage.kind == "parallel_rows" and stage.kernel == "scatter_nd_0"
    nest = fold_other_stages(kernel_text(exe.source("lowered"), stage.kernel), place)
    assert "for i2_cblock in 0..1563 {  # parallel_rows" in nest and nest.count("{ ... }") == 3
    assert function_blocks(exe.source("llvm_opt"), stage.symbol)
