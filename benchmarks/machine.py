"""The header of a benchmark report: the machine (CPU model, cores, memory), the versions of
numpy, PyTorch, TVM, llvmlite and cinnlite (with its git revision) and the load average, so
that a reader can tell where numbers came from and whether other processes were busy.
"""
from __future__ import annotations

import os
import platform
import subprocess

import numpy as np

import libraries

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def core_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def total_memory_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _version(modname: str):
    try:
        mod = __import__(modname)
        return getattr(mod, "__version__", "?")
    except Exception:
        return None


def git_revision():
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev + ("+dirty" if dirty else "")) if rev else None
    except Exception:
        return None


def host_cpu_name() -> str:
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    return llvm.get_host_cpu_name()


def load_average():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def machine_info(threads: int) -> dict:
    import cinnlite
    torch, tvm = libraries.torch, libraries.tvm
    return {
        "cpu": cpu_model(),
        "llvm_cpu": host_cpu_name(),
        "cores": core_count(),
        "threads": threads,
        "memory_gib": total_memory_gib(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__ if torch is not None else None,
        "tvm": tvm.__version__ if tvm is not None else None,
        "llvmlite": _version("llvmlite"),
        "cinnlite": getattr(cinnlite, "__version__", "?"),
        "cinnlite_git": git_revision(),
        "loadavg_start": load_average(),
    }


def print_machine(info: dict):
    print(f"machine : {info['cpu']} (LLVM cpu {info['llvm_cpu']}), {info['cores']} cores, "
          f"{info['memory_gib']} GiB RAM; benchmarks use {info['threads']} threads")
    print(f"python {info['python']}  numpy {info['numpy']}  "
          f"torch {info['torch'] or 'not installed'}  tvm {info['tvm'] or 'not installed'}  "
          f"llvmlite {info['llvmlite']}  cinnlite {info['cinnlite']} ({info['cinnlite_git'] or 'no git'})")
    load = info.get("loadavg_start")
    if load:
        busy = load[0] > 0.5 * info["cores"]
        print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
              + ("  (other processes are using the cores: expect noisy timings)" if busy else ""))
    if libraries.torch is None:
        print(f"  PyTorch peer skipped: {libraries.torch_error}")
    if libraries.tvm is None:
        print(f"  TVM peer skipped: {libraries.tvm_error}")
    print()
