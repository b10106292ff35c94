"""The backends the numerical tests run on. Every numerical test is parametrised over these.

"cpu" is the LLVM JIT; "cuda-emu" runs the generated CUDA C on the host (it needs a host C++
compiler); "cuda" is added where a GPU, its driver and NVRTC are present.

Where NVRTC is installed (the extra `cuda13` or `cuda12`), every CUDA module the tests compile, for "cuda-emu"
as for "cuda", is also built by NVRTC for sm_90 and sm_80 (see the README), so every kernel
the suite generates is known to compile for real GPUs. The variable is inherited by the child
processes some tests start; set CINNLITE_NVRTC_CHECK yourself to choose other architectures.
"""
import os

import cinnlite as cl
from cinnlite.runtime import nvrtc
from cinnlite.runtime.cuda import gpu_available

BACKENDS = ["cpu", "cuda-emu"]
if gpu_available():  # never raises: no driver, no GPU or no NVRTC all mean False
    BACKENDS.append("cuda")

if nvrtc.available():
    os.environ.setdefault("CINNLITE_NVRTC_CHECK", "sm_90,sm_80")


def assert_deterministic_cpu_bits(program, feeds, grids):
    """``deterministic=True`` on the emulated GPU gives the CPU's results bit for bit, on every
    grid (``exe.max_blocks``), twice each; returns the executable."""
    want = cl.compile(program, target="cpu").run(feeds)
    exe = cl.compile(program, target="cuda-emu", deterministic=True)
    for blocks in grids:
        exe.max_blocks = blocks
        for _ in range(2):
            got = exe.run(feeds)
            for name in want:
                assert got[name].dtype == want[name].dtype
                assert got[name].tobytes() == want[name].tobytes(), f"{name}, {blocks} blocks"
    return exe
