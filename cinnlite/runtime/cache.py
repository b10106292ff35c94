"""The compile cache: in memory, and on disk across processes.

A key covers everything that changes the generated code: the program (structure, shapes,
dtypes, attributes and constant contents), the target, the host CPU name and features, the
compile options, and the cinnlite, llvmlite and LLVM versions. A disk entry holds the lowered
program, every stage's text and the machine code, so a hit in a new process skips lowering,
LLVM optimisation and code generation.

The directory is ``$CINNLITE_CACHE_DIR`` if set (``off`` disables the disk cache), else
``$XDG_CACHE_HOME/cinnlite`` or ``~/.cache/cinnlite``. Entries are written to a temporary file
and renamed into place, so concurrent writers never expose a partial entry; an entry that fails
to load (damaged, truncated, from another version) is ignored, rebuilt and replaced.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import threading
import weakref

from ..ir.constant import ConstArray

FORMAT = 1


def cache_dir():
    """The disk cache directory, or None when disabled."""
    env = os.environ.get("CINNLITE_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cinnlite")


def _canonical(value) -> str:
    if isinstance(value, ConstArray):
        return f"const:{value.digest}"
    if isinstance(value, tuple):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    return f"{type(value).__name__}:{value!r}"


def program_fingerprint(program) -> str:
    """A digest of everything about a program that changes what it computes. Names are written
    as Python literals (``repr``): whatever characters they hold, no two programs give one text."""
    h = hashlib.sha256()
    h.update(f"program {program.name!r}\n".encode("utf-8", "surrogatepass"))
    for t in program.inputs:
        h.update(f"in {t.name!r} {t.dtype} {t.shape}\n".encode("utf-8", "surrogatepass"))
    for n in program.nodes:
        ins = ",".join(repr(t.name) for t in n.inputs)
        attrs = _canonical(n.attrs)
        h.update(f"node {n.op} {ins} {attrs} -> {n.output.name!r} {n.output.dtype} {n.output.shape}\n"
                 .encode("utf-8", "surrogatepass"))
    h.update(("out " + ",".join(repr(t.name) for t in program.outputs)).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def compile_key(program, target: str, options: dict, environment: dict) -> str:
    h = hashlib.sha256()
    h.update(f"format {FORMAT}\n{program_fingerprint(program)}\n{target}\n".encode())
    for k in sorted(options):
        h.update(f"option {k}={options[k]!r}\n".encode())
    for k in sorted(environment):
        h.update(f"env {k}={environment[k]!r}\n".encode())
    return h.hexdigest()


class MemoryCache:
    """The executables of this process that are still alive, by key. It holds them weakly: once
    the caller drops an executable, its code and buffers are freed (a later compile of the same
    program comes from the disk cache)."""

    def __init__(self):
        self._items = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            return self._items.get(key)

    def put(self, key, exe):
        with self._lock:
            self._items[key] = exe

    def clear(self):
        with self._lock:
            self._items.clear()


class DiskCache:
    def __init__(self, directory: str):
        self.directory = directory

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".pkl")

    def load(self, key: str):
        """The entry for ``key``, or None when missing or unreadable."""
        try:
            with open(self._path(key), "rb") as f:
                entry = pickle.load(f)
        except FileNotFoundError:
            return None
        except Exception:  # a damaged entry is a miss; it gets rebuilt and replaced
            return None
        if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key:
            return None
        return entry

    def store(self, key: str, entry: dict) -> bool:
        """Write atomically; a cache that cannot be written is skipped, never an error."""
        path = self._path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
            try:
                with os.fdopen(fd, "wb") as f:
                    pickle.dump(dict(entry, format=FORMAT, key=key), f, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError:
            return False
        return True


MEMORY = MemoryCache()
