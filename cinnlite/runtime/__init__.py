"""Runtimes: the CPU JIT (cpu.py), CUDA through NVRTC and the driver (cuda.py), and the host
emulation of generated CUDA (cuda_emu.py). ``executable.py`` holds what they share."""
