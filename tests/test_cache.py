"""The compile cache: memory hits, disk entries shared across processes, damaged entries, the
entry format (no code runs when an entry is read), the size bound, the emulation's libraries, and
going on without the disk when the cache directory cannot be used."""
import builtins
import errno
import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.errors import CacheWarning
from cinnlite.ir.loopnest import Var
from cinnlite.runtime import cache as caches
from cinnlite.runtime import cpu


def program(width=4):
    # A name per width: programs that differ only in sizes would share one shape-generic entry
    # (see test_symbolic.py); these tests need one entry per program.
    b = NetBuilder(f"cached_{width}")
    x = b.create_input("float32", (10, width), "x")
    i = b.create_input("int64", (6,), "i")
    return b.build([b.take(x, i, axis=0, mode="wrap")])


def entries(directory):
    """The CPU entries in a cache directory (every file but the emulation's libraries)."""
    if not directory.exists():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.parent.name != "cuda-emu")


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


# A new process compiles program() and prints HIT when it was rebuilt from the disk cache.
HIT_OR_MISS = textwrap.dedent("""
    import sys, numpy as np, cinnlite as cl
    sys.path.insert(0, %r)
    from test_cache import program, check
    from cinnlite.runtime import cpu
    built = []
    original = cpu.CPUExecutable.__init__
    def spy(self, *a, **k):
        built.append(k["built"].from_cache)
        return original(self, *a, **k)
    cpu.CPUExecutable.__init__ = spy
    check(cl.compile(program()))
    print("HIT" if built == [True] else "MISS")
""" % os.path.dirname(__file__))


def in_new_process(script, cache_dir, *args):
    env = dict(os.environ, CINNLITE_CACHE_DIR=str(cache_dir))
    return subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_new_process_uses_the_disk_cache(cache_dir):
    first = in_new_process(HIT_OR_MISS, cache_dir)
    second = in_new_process(HIT_OR_MISS, cache_dir)
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
    with pytest.warns(CacheWarning, match="Not a directory"):
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


# -- entries are data: reading one runs no code ------------------------------------------------------


class _Planted:
    """A pickle that creates a file when it is loaded: what anyone who can write the cache
    directory could plant if entries were pickles."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def spy_builds(monkeypatch):
    """Record, for every CPU executable built, whether it came from a disk entry."""
    built = []
    original = cpu.CPUExecutable.__init__

    def spy(self, *args, **kwargs):
        built.append(kwargs["built"].from_cache)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cpu.CPUExecutable, "__init__", spy)
    return built


def test_a_planted_pickle_is_never_run(cache_dir, tmp_path):
    cl.compile(program())
    marker = tmp_path / "the-planted-code-ran"
    for path in entries(cache_dir):
        path.write_bytes(pickle.dumps(_Planted(marker)))
    caches.MEMORY.clear()
    check(cl.compile(program()))
    assert not marker.exists()


def test_loading_an_entry_never_unpickles_or_evaluates(cache_dir, monkeypatch):
    cl.compile(program())
    caches.MEMORY.clear()
    calls = forbid_code_loading(monkeypatch)
    built = spy_builds(monkeypatch)
    check(cl.compile(program()))
    assert calls == []
    assert built == [True]  # a hit: the entry was read, by other means


def forbid_code_loading(monkeypatch):
    """Make unpickling and eval/exec fail loudly; returns the list of those that were called."""
    calls = []

    def forbidden(name):
        def call(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} called while loading a cache entry")
        return call

    for module, name in [(pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (builtins, "eval"),
                         (builtins, "exec")]:
        monkeypatch.setattr(module, name, forbidden(name))
    return calls


def node(cls, **fields):
    return {"@": cls, **fields}


INT64 = node("DType", name="int64")
CRAFTED = {
    "a class outside the IR": {"nodes": [node("os.system", command="touch x")], "value": {"#": 0}},
    "a builtin": {"nodes": [node("eval", source="1")], "value": {"#": 0}},
    "an extra field": {"nodes": [INT64, node("Var", name="i", dtype={"#": 0}, __class__="x")], "value": {"#": 1}},
    "a missing field": {"nodes": [node("Var", name="i")], "value": {"#": 0}},
    "a dict as a field": {"nodes": [INT64, node("Var", name={"a": 1}, dtype={"#": 0})], "value": {"#": 1}},
    "a reference forward": {"nodes": [node("Var", name="i", dtype={"#": 1}), INT64], "value": {"#": 0}},
    "a blob outside the blob": {"nodes": [node("bytes", at=[0, 10**9])], "value": {"#": 0}},
    "an object array": {"nodes": [node("ConstArray", dtype="object", shape=[1], at=[0, 8])], "value": {"#": 0}},
    "an unknown dtype": {"nodes": [node("DType", name="complex256")], "value": {"#": 0}},
    "no node table": {"value": 1},
}


@pytest.mark.parametrize("what", sorted(CRAFTED))
def test_a_crafted_entry_with_a_valid_seal_builds_nothing_but_ir(cache_dir, monkeypatch, what):
    key = "ab" * 32
    path = cache_dir / key[:2] / f"{key}.entry"
    path.parent.mkdir(parents=True)

    def load(meta):
        if "nodes" in meta:
            meta = {"nodes": meta["nodes"], "value": {"key": key, "fields": {"lowered": meta["value"]}}}
        path.write_bytes(caches.pack_entry(key, json.dumps(meta).encode(), b"\0" * 8))
        return caches.DiskCache(str(cache_dir)).load(key)

    calls = forbid_code_loading(monkeypatch)
    valid = {"nodes": [INT64, node("Var", name="i", dtype={"#": 0})], "value": {"#": 1}}
    assert load(valid) == {"lowered": Var("i")}  # the crafting itself is right
    assert load(CRAFTED[what]) is None
    assert calls == []


def test_deeply_nested_metadata_is_a_miss(cache_dir):
    key = "cd" * 32
    path = cache_dir / key[:2] / f"{key}.entry"
    path.parent.mkdir(parents=True)
    path.write_bytes(caches.pack_entry(key, b"[" * 100_000 + b"]" * 100_000, b""))
    assert caches.DiskCache(str(cache_dir)).load(key) is None


def every_kind_of_program():
    """Programs whose lowered forms hold every IR node, dtype and kind of constant."""
    from cinnlite.demo import build_demo_program

    yield build_demo_program()
    b = NetBuilder("kinds")
    x = b.create_input("float16", (5, 4), "x")
    i = b.create_input("int32", (3, 4), "i")
    f = b.create_input("bool", (5, 4), "f")
    g = b.gather(x, i, axis=0, mode="fill", fill_value=float("nan"))
    s = b.scatter(x, i, b.gather(x, i, axis=0, mode="clip"), axis=0, reduce="mean", mode="raise")
    t = b.take(f, b.constant(np.array([4, -5, 0], np.int64)), axis=0, mode="raise")
    n = b.gather_nd(b.cast(x, "float64"), b.constant(np.array([[0, 1], [4, -1]], np.int64)), mode="wrap")
    m = b.scatter_nd(b.fill_constant((5, 4), -0.0, "float32"), b.reshape(i, (12, 1)),
                     b.fill_constant((12, 4), float("inf"), "float32"), reduce="max", mode="wrap")
    d = b.divide(b.create_input("int8", (5, 4), "p"), b.fill_constant((5, 4), 3, "int8"))
    yield b.build([g, s, t, n, m, d, b.maximum(x, x), b.cast(f, "uint8")])


@pytest.mark.parametrize("fuse", [True, False])
def test_the_codec_gives_back_every_lowered_program_exactly(fuse):
    from cinnlite.ir import codec

    for prog in every_kind_of_program():
        lowered = cl.compile(prog, fuse=fuse, cache=False).lowered
        text, blob = codec.dumps(lowered)
        back = codec.loads(text, blob)
        assert repr(back) == repr(lowered)
        assert codec.dumps(back) == (text, blob)


def test_the_codec_knows_every_ir_class():
    import dataclasses

    from cinnlite.ir import codec, loopnest

    from cinnlite.ir import graph, symbolic

    classes = {c for module in (loopnest, graph, symbolic) for c in vars(module).values()
               if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == module.__name__}
    assert classes == set(codec.NODE_CLASSES.values())


# -- damaged entries are never run -----------------------------------------------------------------------


def text_section(image: bytes) -> tuple:
    """(offset, size) of the largest section of machine instructions in an ELF image."""
    import llvmlite.binding as llvm

    texts = [s.data() for s in llvm.ObjectFileRef.from_data(image).sections() if s.is_text() and s.size()]
    text = max(texts, key=len)
    offset = image.find(text)
    assert offset >= 0
    return offset, len(text)


def damage_machine_code(data: bytes, code: bytes, how: str) -> bytes:
    """``data`` (a cache entry) with its machine code ``code`` damaged in one of several ways."""
    start = data.find(code)
    assert start >= 0, "the machine code is not stored contiguously"
    text, size = text_section(code)
    out = bytearray(data)
    if how == "every_instruction_a_trap":
        out[start + text:start + text + size] = b"\xcc" * size
    elif how == "one_instruction_byte":
        out[start + text + size // 2] ^= 0xFF
    elif how == "object_header":
        out[start + 0x28] ^= 0x10  # where the section headers are
    elif how == "last_byte":
        out[-1] ^= 0x01
    elif how == "truncated_in_the_code":
        del out[start + text + size // 2:]
    return bytes(out)


@pytest.mark.parametrize("how", ["every_instruction_a_trap", "one_instruction_byte", "object_header", "last_byte",
                                 "truncated_in_the_code"])
def test_damaged_machine_code_is_never_run(cache_dir, how):
    """A new process meets the damaged entry; it must recompile (a crash fails the test, not
    pytest), and the entry is whole again afterwards."""
    exe = cl.compile(program())
    (path,) = entries(cache_dir)
    path.write_bytes(damage_machine_code(path.read_bytes(), exe._object_code, how))
    child = in_new_process(HIT_OR_MISS, cache_dir)
    assert child.returncode == 0, f"rc={child.returncode}\n{child.stderr[-3000:]}"
    assert child.stdout.strip() == "MISS"
    assert in_new_process(HIT_OR_MISS, cache_dir).stdout.strip() == "HIT"


def test_an_entry_under_another_key_is_not_used(cache_dir, monkeypatch):
    cl.compile(program(4))
    (four,) = entries(cache_dir)
    cl.compile(program(5))
    (five,) = set(entries(cache_dir)) - {four}
    five.write_bytes(four.read_bytes())  # program(4)'s code where program(5)'s should be
    caches.MEMORY.clear()
    built = spy_builds(monkeypatch)
    check(cl.compile(program(5)), 5)
    assert built == [False]


def test_an_entry_of_another_format_version_is_not_used(cache_dir, monkeypatch):
    exe = cl.compile(program())
    (path,) = entries(cache_dir)
    key = path.stem
    monkeypatch.setattr(caches, "FORMAT", caches.FORMAT + 1)
    assert caches.DiskCache(str(cache_dir)).store(key, exe.cache_entry())
    monkeypatch.undo()
    assert caches.DiskCache(str(cache_dir)).load(key) is None


# -- the size bound --------------------------------------------------------------------------------------


def compile_new_entry(directory, width):
    """Compile program(width); return the entry file it added."""
    before = set(entries(directory))
    check(cl.compile(program(width)), width)
    (added,) = set(entries(directory)) - before
    return added


def set_last_use(path, seconds_ago):
    when = time.time() - seconds_ago
    os.utime(path, (when, when))


def test_the_least_recently_used_entries_go_past_the_size_bound(cache_dir, monkeypatch):
    files = {width: compile_new_entry(cache_dir, width) for width in (4, 5, 6)}
    bound = int(3.5 * max(p.stat().st_size for p in files.values()))
    monkeypatch.setenv("CINNLITE_CACHE_MAX_BYTES", str(bound))
    for width, age in ((4, 3000), (5, 2000), (6, 1000)):
        set_last_use(files[width], age)
    caches.MEMORY.clear()
    check(cl.compile(program(4)), 4)  # read from the disk: now the most recently used
    files[7] = compile_new_entry(cache_dir, 7)  # a fourth entry passes the bound
    assert not files[5].exists()
    assert all(files[w].exists() for w in (4, 6, 7))
    assert sum(p.stat().st_size for p in entries(cache_dir)) <= bound


def test_the_bound_counts_emulation_libraries_and_spares_other_files(cache_dir, monkeypatch):
    entry = compile_new_entry(cache_dir, 4)
    size = entry.stat().st_size
    library = cache_dir / "cuda-emu" / ("emu_" + "0" * 32 + ".so")
    library.parent.mkdir()
    library.write_bytes(b"\0" * 4 * size)
    strangers = [cache_dir / "notes.txt", cache_dir / entry.parent.name / "notes.txt"]
    for path in strangers:
        path.write_bytes(b"\0" * 4 * size)
    for path in [library, entry] + strangers:
        set_last_use(path, 3600)
    monkeypatch.setenv("CINNLITE_CACHE_MAX_BYTES", str(3 * size))
    compile_new_entry(cache_dir, 5)
    assert not library.exists()
    assert entry.exists() and all(path.exists() for path in strangers)


def test_the_size_bound_defaults_to_512_mib(monkeypatch):
    monkeypatch.delenv("CINNLITE_CACHE_MAX_BYTES", raising=False)
    assert caches.max_bytes() == caches.DEFAULT_MAX_BYTES == 512 * 2**20
    monkeypatch.setenv("CINNLITE_CACHE_MAX_BYTES", "1000")
    assert caches.max_bytes() == 1000
    monkeypatch.setenv("CINNLITE_CACHE_MAX_BYTES", "lots")
    with pytest.warns(CacheWarning, match="CINNLITE_CACHE_MAX_BYTES"):
        assert caches.max_bytes() == caches.DEFAULT_MAX_BYTES


# -- the emulation's libraries ---------------------------------------------------------------------------


def emu_program():
    b = NetBuilder("emu_cached")
    x = b.create_input("float32", (4,), "x")
    i = b.create_input("int64", (3,), "i")
    return b.build([b.take(x, i)])


def check_emu(exe):
    np.testing.assert_array_equal(exe(x=np.arange(4, dtype=np.float32), i=np.array([3, -4, 1])), [3, 0, 1])


EMU_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, %r)
    import cinnlite as cl
    from test_cache import emu_program, check_emu
    exe = cl.compile(emu_program(), target="cuda-emu")
    check_emu(exe)
    print(exe._library_path)
""" % os.path.dirname(__file__))


@pytest.mark.parametrize("how", ["truncated", "every_instruction_a_trap"])
def test_a_damaged_emulation_library_is_rebuilt_not_loaded(cache_dir, how):
    """In a new process, which has not loaded the library yet (a crash fails the test)."""
    path = cl.compile(emu_program(), target="cuda-emu")._library_path
    data = bytearray(path.read_bytes())
    if how == "truncated":
        del data[len(data) // 2:]
    else:
        text, size = text_section(bytes(data))
        data[text:text + size] = b"\xcc" * size
    # A new file in its place: this process has the library mapped, and cutting the mapped
    # file itself short would bring this process down with SIGBUS the next time it touches it.
    damaged = path.with_name(path.name + ".damaged")
    damaged.write_bytes(bytes(data))
    os.replace(damaged, path)
    child = in_new_process(EMU_CHILD, cache_dir)
    assert child.returncode == 0, f"rc={child.returncode}\n{child.stderr[-3000:]}"
    assert child.stdout.strip() == str(path)
    assert path.read_bytes() != bytes(data)  # rebuilt in place


# -- a cache directory that cannot be used: one warning, and compiling goes on ---------------------------


def cache_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, CacheWarning)]


@pytest.mark.parametrize("layout", ["parent_is_a_file", "is_a_file"])
def test_a_file_where_the_directory_should_be_warns_once(tmp_path, monkeypatch, layout):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    directory = blocker / "cache" if layout == "parent_is_a_file" else blocker
    monkeypatch.setenv("CINNLITE_CACHE_DIR", str(directory))
    caches.MEMORY.clear()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        check(cl.compile(program(4)), 4)
        check(cl.compile(program(5)), 5)
    (message,) = cache_warnings(record)
    assert str(directory) in message
    assert ("Not a directory" if layout == "parent_is_a_file" else "a file, not a directory") in message


def fail_writes_into(directory, monkeypatch, code):
    """Make every rename into ``directory`` fail as a full, read-only or forbidden disk would."""
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        if str(dst).startswith(str(directory)):
            raise OSError(code, os.strerror(code), str(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_failing_write_warns_once_and_compiles_from_memory(cache_dir, monkeypatch, code):
    fail_writes_into(cache_dir, monkeypatch, code)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        exe = cl.compile(program(4))
        check(exe, 4)
        assert cl.compile(program(4)) is exe  # from memory
        check(cl.compile(program(5)), 5)
    (message,) = cache_warnings(record)
    assert str(cache_dir) in message and os.strerror(code) in message
    assert entries(cache_dir) == []  # no entry, and no temporary file left behind


def test_the_emulation_goes_on_without_a_writable_cache(cache_dir, monkeypatch):
    fail_writes_into(cache_dir, monkeypatch, errno.EROFS)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        exe = cl.compile(emu_program(), target="cuda-emu")
        check_emu(exe)
    (message,) = cache_warnings(record)
    assert str(cache_dir) in message and os.strerror(errno.EROFS) in message
    assert cache_dir not in exe._library_path.parents


def test_a_directory_every_user_can_write_is_not_used(cache_dir):
    cache_dir.mkdir()
    cache_dir.chmod(0o777)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        check(cl.compile(program(4)), 4)
        check(cl.compile(program(5)), 5)
    (message,) = cache_warnings(record)
    assert str(cache_dir) in message and "every user" in message
    assert list(cache_dir.iterdir()) == []
