"""The backends: one per target in the registry, each used through the same compile stages and
the same memory and disk caches; target names are looked up in the registry only."""
import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder, compiler
from cinnlite.backends.base import Compilation, CompileOptions
from cinnlite.backends.registry import BACKENDS, get_backend
from cinnlite.codegen.renderer import RenderedModule, Renderer
from cinnlite.runtime import cache as caches
from cinnlite.runtime import nvrtc

PACKAGE = Path(cl.__file__).parent
HERE = os.path.dirname(os.path.abspath(__file__))


def program():
    b = NetBuilder("backends")
    x = b.create_input("float32", (6, 3), "x")
    i = b.create_input("int64", (4,), "i")
    b.scatter_nd(b.fill_constant((6, 3), 0.0, "float32"), b.reshape(i, (4, 1)), b.take(x, i), reduce="add")
    return b.build()


def feeds():
    return {"x": np.arange(18, dtype=np.float32).reshape(6, 3), "i": np.array([0, -1, 2, 0])}


def expected():
    x, i = feeds()["x"], feeds()["i"]
    out = np.zeros((6, 3), np.float32)
    np.add.at(out, i, x[i])
    return out


def test_every_target_has_a_backend_that_names_it():
    assert BACKENDS == cl.compiler.TARGETS == ("cpu", "cuda", "cuda-emu")
    for name in BACKENDS:
        backend = get_backend(name)
        assert backend.name == name == backend.executable.target
        assert backend is get_backend(name)
    with pytest.raises(cl.CinnliteError, match="unknown target 'tpu'; expected one of cpu, cuda, cuda-emu"):
        get_backend("tpu")


@pytest.mark.parametrize("target", ["cpu", "cuda-emu", "cuda"])
def test_executables_offer_the_stages_their_backend_names(target, cache_dir):
    exe = cl.compile(program(), target=target)
    assert exe.stages == get_backend(target).stages
    if target != "cuda":
        np.testing.assert_array_equal(exe(**feeds()), expected())


@pytest.mark.parametrize("target", ["cpu", "cuda-emu", "cuda"])
def test_every_target_shares_the_memory_cache(target, cache_dir):
    exe = cl.compile(program(), target=target)
    assert cl.compile(program(), target=target) is exe
    assert cl.compile(program(), target=target, cache=False) is not exe
    assert cl.compile(program(), target=target, fuse=False) is not exe


@pytest.mark.parametrize("target", BACKENDS)
def test_every_backend_renders_through_the_renderer_interface(target):
    job = Compilation(program(), target, CompileOptions(cache=False))
    for name, stage in compiler.STAGES:
        if name == "render":
            break
        stage(job)
    renderer = job.backend.renderer(job)
    module = renderer.render(job.lowered)
    assert isinstance(renderer, Renderer) and isinstance(module, RenderedModule)
    assert module.stage == renderer.stage and module.stage in job.backend.stages
    assert cl.compile(program(), target=target, cache=False).source(module.stage) == module.source


def test_target_names_are_compared_in_no_module():
    """Code that asks which target it is working for belongs in that target's backend."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare):
                names = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in BACKENDS]
                if names:
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} compares with {names[0]!r}")
    assert offenders == []


# -- the disk cache, across processes -------------------------------------------------------------

# A new process compiles program() for a target and says whether each compile stage ran (the
# stages after "validate" run only on a miss), how often NVRTC and the host C++ compiler ran,
# and, on request, the PTX.
CHILD = textwrap.dedent("""
    import json, subprocess, sys
    sys.path.insert(0, %r)
    import cinnlite as cl
    from cinnlite import compiler
    from cinnlite.runtime import nvrtc
    from test_backends import program, feeds, expected
    target, want_ptx = sys.argv[1], sys.argv[2] == "ptx"
    ran = {"lower": 0, "nvrtc": 0, "host_compiler": 0}
    real_lower, real_nvrtc, real_popen = compiler.lower_program, nvrtc.compile_cuda, subprocess.Popen
    def lower(*a, **k):
        ran["lower"] += 1
        return real_lower(*a, **k)
    def compile_cuda(*a, **k):
        ran["nvrtc"] += 1
        return real_nvrtc(*a, **k)
    def popen(args, *a, **k):
        ran["host_compiler"] += "-shared" in args  # not the compiler's --version
        return real_popen(args, *a, **k)
    compiler.lower_program, nvrtc.compile_cuda, subprocess.Popen = lower, compile_cuda, popen
    exe = cl.compile(program(), target=target)
    if target != "cuda":
        assert (exe(**feeds()) == expected()).all()
    ptx = exe.source("ptx") if want_ptx else None
    print(json.dumps({"ran": ran, "ptx": ptx}))
""" % HERE)


def in_new_process(cache_dir, target, ptx=False):
    env = dict(os.environ, CINNLITE_CACHE_DIR=str(cache_dir))
    env.pop("CINNLITE_NVRTC_CHECK", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, target, "ptx" if ptx else "-"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    return json.loads(proc.stdout)


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
def test_a_second_process_loads_the_executable_from_the_disk_cache(target, cache_dir):
    first = in_new_process(cache_dir, target)
    second = in_new_process(cache_dir, target)
    assert first["ran"]["lower"] == 1
    assert second["ran"] == {"lower": 0, "nvrtc": 0, "host_compiler": 0}
    if target == "cuda-emu":
        assert first["ran"]["host_compiler"] == 1
        assert len(list((cache_dir / "cuda-emu").iterdir())) == 1  # the library, found again


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC (the optional extra `cuda13` or `cuda12`) is not installed")
@pytest.mark.parametrize("target", ["cuda", "cuda-emu"])
def test_nvrtc_output_is_kept_in_the_disk_cache(target, cache_dir):
    first = in_new_process(cache_dir, target, ptx=True)
    second = in_new_process(cache_dir, target, ptx=True)
    assert first["ran"]["nvrtc"] == 1 and ".entry " in first["ptx"]
    assert second["ran"]["lower"] == 0 and second["ran"]["nvrtc"] == 0
    assert second["ptx"] == first["ptx"]


def test_a_damaged_cuda_entry_is_compiled_again(cache_dir):
    cl.compile(program(), target="cuda")
    (entry,) = [p for p in cache_dir.rglob("*.entry")]
    entry.write_bytes(entry.read_bytes()[:-40])
    caches.MEMORY.clear()
    exe = cl.compile(program(), target="cuda")
    assert "__global__" in exe.source("cuda")
    assert caches.DiskCache(str(cache_dir)).load(entry.stem) is not None  # written whole again
