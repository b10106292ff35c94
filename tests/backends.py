"""The backends the numerical tests run on. Every numerical test is parametrised over these.

"cpu" is the LLVM JIT; "cuda-emu" runs the generated CUDA C on the host (added by the CUDA
backend); "cuda" is added where a GPU and its driver are present.
"""
BACKENDS = ["cpu"]
