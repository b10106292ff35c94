"""The compile cache: memory hits, disk entries shared across processes, damaged entries."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.runtime import cache as caches


def program(width=4):
    b = NetBuilder("cached")
    x = b.create_input("float32", (10, width), "x")
    i = b.create_input("int64", (6,), "i")
    return b.build([b.take(x, i, axis=0, mode="wrap")])


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CINNLITE_CACHE_DIR", str(tmp_path / "cache"))
    caches.MEMORY.clear()
    yield tmp_path / "cache"
    caches.MEMORY.clear()


def entries(directory):
    return sorted(p for p in directory.rglob("*.pkl")) if directory.exists() else []


def check(exe, width=4):
    x = np.arange(10 * width, dtype=np.float32).reshape(10, width)
    i = np.array([0, 3, -1, 12, -13, 9])
    np.testing.assert_array_equal(exe(x=x, i=i), np.take(x, i, axis=0, mode="wrap"))


def test_same_program_twice_is_one_executable(cache_dir):
    a = cl.compile(program())
    b = cl.compile(program())  # rebuilt from scratch: equal content, equal key
    assert a is b
    check(b)


def test_different_programs_do_not_share_entries(cache_dir):
    a, b = cl.compile(program(4)), cl.compile(program(5))
    assert a is not b
    check(a, 4)
    check(b, 5)
    assert len(entries(cache_dir)) == 2


def test_options_are_part_of_the_key(cache_dir):
    assert cl.compile(program(), opt_level=1) is not cl.compile(program(), opt_level=3)
    assert cl.compile(program(), fuse=False) is not cl.compile(program())


def test_disk_entry_rebuilds_without_compiling(cache_dir):
    cl.compile(program())
    (path,) = entries(cache_dir)
    caches.MEMORY.clear()
    exe = cl.compile(program())
    assert exe.source("llvm_opt")  # stage texts come back from the entry
    assert "k_take_0" in exe.source("asm")
    check(exe)


def test_new_process_uses_the_disk_cache(cache_dir):
    script = textwrap.dedent("""
        import sys, numpy as np, cinnlite as cl
        sys.path.insert(0, %r)
        from test_cache import program, check
        from cinnlite.runtime import cpu
        built = []
        original = cpu.CPUExecutable.__init__
        def spy(self, *a, **k):
            built.append(k.get("cached") is not None)
            return original(self, *a, **k)
        cpu.CPUExecutable.__init__ = spy
        check(cl.compile(program()))
        print("HIT" if built == [True] else "MISS")
    """ % os.path.dirname(__file__))
    env = dict(os.environ, CINNLITE_CACHE_DIR=str(cache_dir))
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert first.stdout.strip() == "MISS"
    assert second.stdout.strip() == "HIT"


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_damaged_entry_is_ignored_and_replaced(cache_dir, damage):
    cl.compile(program())
    (path,) = entries(cache_dir)
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": os.urandom(200), "empty": b""}[damage])
    caches.MEMORY.clear()
    check(cl.compile(program()))
    assert caches.DiskCache(str(cache_dir)).load(path.stem) is not None  # rewritten whole
    caches.MEMORY.clear()
    check(cl.compile(program()))


def test_cache_can_be_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv("CINNLITE_CACHE_DIR", "off")
    caches.MEMORY.clear()
    check(cl.compile(program()))
    assert caches.cache_dir() is None


def test_unwritable_cache_directory_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CINNLITE_CACHE_DIR", str(blocker / "cache"))
    caches.MEMORY.clear()
    check(cl.compile(program()))


def test_constant_contents_are_part_of_the_key(cache_dir):
    def prog(values):
        b = NetBuilder("c")
        x = b.create_input("float32", (5,), "x")
        return b.build([b.take(x, b.constant(np.array(values, np.int64)))])

    x = np.arange(5, dtype=np.float32)
    a, b = cl.compile(prog([0] * 20)), cl.compile(prog([0] * 19 + [1]))
    assert a is not b
    assert a(x=x)[-1] == 0 and b(x=x)[-1] == 1
