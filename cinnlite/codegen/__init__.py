"""Backends' renderers: loop-nest IR -> LLVM IR (llvm.py) or CUDA C (cuda.py)."""
