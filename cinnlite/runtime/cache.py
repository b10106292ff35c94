"""The compile cache: in memory, and on disk across processes.

A key covers everything that changes the generated code: the program (structure, shapes,
dtypes, attributes and constant contents), the target, the host CPU name and features, the
compile options, and the cinnlite, llvmlite and LLVM versions. A disk entry holds the lowered
program, every stage's text and the machine code, so a hit in a new process skips lowering,
LLVM optimisation and code generation.

The directory is ``$CINNLITE_CACHE_DIR`` if set (``off`` disables the disk cache), else
``$XDG_CACHE_HOME/cinnlite`` or ``~/.cache/cinnlite``. It holds the CPU entries,
``<key[:2]>/<key>.entry``.

Reading an entry runs no code. An entry is data only: the header ``CNLENTRY``, the format
version and the length of the metadata (``<8sIQ``), the metadata as JSON (the stage texts and
the lowered program, through the whitelist codec of :mod:`cinnlite.ir.codec`), then the raw
bytes of the machine code and constant arrays, and at the end a seal: ``CINNLITE-SHA256``, a
NUL and the SHA-256 of the key and everything before it. A file whose seal does not match
(flipped bits, a truncated write, another key's file, another format) is a miss: it is compiled
again and replaced, never executed.

Entries are written to a temporary file and renamed into place, so concurrent writers never
expose a partial entry.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import threading
import weakref

from ..ir import codec
from ..ir.constant import ConstArray

FORMAT = 2


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
    """A digest of everything about a program that changes what it computes."""
    h = hashlib.sha256()
    h.update(f"program {program.name}\n".encode())
    for t in program.inputs:
        h.update(f"in {t.name} {t.dtype} {t.shape}\n".encode())
    for n in program.nodes:
        ins = ",".join(t.name for t in n.inputs)
        attrs = _canonical(n.attrs)
        h.update(f"node {n.op} {ins} {attrs} -> {n.output.name} {n.output.dtype} {n.output.shape}\n".encode())
    h.update(("out " + ",".join(t.name for t in program.outputs)).encode())
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


# -- sealed files ------------------------------------------------------------------------------------

SEAL_MAGIC = b"CINNLITE-SHA256\0"
SEAL_SIZE = len(SEAL_MAGIC) + 32


def _seal_digest(payload, key: str) -> bytes:
    h = hashlib.sha256(key.encode())
    h.update(b"\0")
    h.update(payload)
    return h.digest()


def seal(payload: bytes, key: str) -> bytes:
    """``payload`` followed by its seal: the magic and the SHA-256 of ``key`` and ``payload``.
    Binding the key means a file copied under another key's name is as bad as a damaged one."""
    return payload + SEAL_MAGIC + _seal_digest(payload, key)


def unseal(data: bytes, key: str) -> memoryview | None:
    """The payload of a file that ``seal`` wrote for ``key``, or None for anything else."""
    if len(data) < SEAL_SIZE or data[-SEAL_SIZE:-32] != SEAL_MAGIC:
        return None
    payload = memoryview(data)[:-SEAL_SIZE]
    return payload if _seal_digest(payload, key) == data[-32:] else None


# -- CPU entries -------------------------------------------------------------------------------------

ENTRY_MAGIC = b"CNLENTRY"
_HEADER = struct.Struct("<8sIQ")  # magic, format version, length of the JSON metadata


def pack_entry(key: str, meta: bytes, blob: bytes) -> bytes:
    """The bytes of an entry file: header, metadata, blob, seal."""
    return seal(_HEADER.pack(ENTRY_MAGIC, FORMAT, len(meta)) + meta + blob, key)


def unpack_entry(data: bytes, key: str) -> tuple | None:
    """(metadata, blob) of an entry file that ``pack_entry`` wrote for ``key``, else None."""
    payload = unseal(data, key)
    if payload is None or len(payload) < _HEADER.size:
        return None
    magic, version, meta_len = _HEADER.unpack_from(payload)
    if magic != ENTRY_MAGIC or version != FORMAT or _HEADER.size + meta_len > len(payload):
        return None
    end = _HEADER.size + meta_len
    return bytes(payload[_HEADER.size:end]), payload[end:]


class DiskCache:
    """The CPU entries of one cache directory: a dict of stage texts, the lowered program and
    the machine code per key (see the module docstring for the file format)."""

    def __init__(self, directory: str):
        self.directory = directory

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".entry")

    def load(self, key: str) -> dict | None:
        """The entry for ``key``, or None when missing, unreadable, damaged or from another format."""
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except OSError:
            return None
        parts = unpack_entry(data, key)
        if parts is None:
            return None
        try:
            value = codec.loads(*parts)
        except codec.CodecError:
            return None
        if type(value) is not dict or value.get("key") != key or type(value.get("fields")) is not dict:
            return None
        return value["fields"]

    def store(self, key: str, entry: dict) -> bool:
        """Write the entry atomically; a cache that cannot take it is skipped, never an error."""
        try:
            meta, blob = codec.dumps({"key": key, "fields": entry})
        except codec.CodecError:  # a value the codec does not know: a bug that test_cache.py catches
            return False
        path = self._path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(pack_entry(key, meta, blob))
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


def disk_cache() -> DiskCache | None:
    """The disk cache of the current ``cache_dir()``, or None when it is off."""
    directory = cache_dir()
    return DiskCache(directory) if directory else None


MEMORY = MemoryCache()
