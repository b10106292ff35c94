"""The compile cache: in memory, and on disk across processes.

A key covers everything that changes the generated code: the program (structure, shapes,
dtypes, attributes and constant contents), the target, the compile options, and what the target's
backend names (for the CPU: the host CPU name and features, the cinnlite, llvmlite and LLVM
versions; for every target, a digest of cinnlite's own source). A disk entry holds the lowered
program, the stage texts (but those an executable makes from the others when they are asked
for, such as the CPU's optimised IR and assembly) and what the target built (the CPU's machine
code; NVRTC's PTX and CUBIN for the CUDA targets, as far as they were built), so a hit in a new
process skips lowering, the passes, rendering and building.

The directory is ``$CINNLITE_CACHE_DIR`` if set (``off`` disables the disk cache), else
``$XDG_CACHE_HOME/cinnlite`` or ``~/.cache/cinnlite``. It holds the entries of every target,
``<key[:2]>/<key>.entry``, and the libraries of the CUDA emulation, ``cuda-emu/emu_<key>.so``.

Reading an entry runs no code. An entry is data only: the header ``CNLENTRY``, the format
version and the length of the metadata (``<8sIQ``), the metadata as JSON (the stage texts and
the lowered program, through the whitelist codec of :mod:`cinnlite.ir.codec`), then the raw
bytes of the machine code and constant arrays. Every cached file, entries and libraries alike,
ends in a seal: ``CINNLITE-SHA256``, a NUL and the SHA-256 of the key and everything before
it. A file whose seal does not match (flipped bits, a truncated write, another key's file,
another format) is a miss: it is compiled again and replaced, never executed. The machine code
itself is code, though: the directory must be writable by its user alone, and one that is
owned by another user or writable by every user is not used.

Files are written to a temporary file and renamed into place, so concurrent writers never
expose a partial file. Loading an entry sets its modification time, which serves as its last
use (access times are unreliable: ``relatime``, ``noatime``). After each write, when the cache
holds more than ``$CINNLITE_CACHE_MAX_BYTES`` (default 512 MiB), the least recently used
files go until it fits again, except files used in the last minute, which another process may
be about to load. Only cinnlite's own files count or go; temporary files that a crashed writer
left go after a day.

When the directory cannot be used (not a directory, not writable, full, read-only, not
private), cinnlite warns once per directory with a :class:`~cinnlite.errors.CacheWarning`
naming it and the reason, and goes on with what is in memory; a directory that can still be
read is still read.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
import struct
import sys
import tempfile
import threading
import time
import warnings
import weakref

from ..errors import CacheWarning
from ..ir import codec
from ..ir.constant import ConstArray

FORMAT = 2
DEFAULT_MAX_BYTES = 512 * 2**20
#: Files used more recently than this stay whatever the bound: a process may be about to load one.
RECENT_USE_SECONDS = 60
#: A temporary file older than this was left by a writer that died.
STALE_TEMPORARY_SECONDS = 24 * 3600


def cache_dir():
    """The disk cache directory, or None when disabled."""
    env = os.environ.get("CINNLITE_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cinnlite")


def max_bytes() -> int:
    """The size bound of the disk cache: ``$CINNLITE_CACHE_MAX_BYTES`` bytes, default 512 MiB."""
    return bytes_from_env("CINNLITE_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES,
                          f"the compile cache is bounded to the default {DEFAULT_MAX_BYTES} bytes")


def bytes_from_env(name: str, default: int, otherwise: str, category: type = CacheWarning) -> int:
    """The number of bytes the variable ``name`` gives; ``default`` where it is unset or empty,
    and where it is not a number of bytes, after a warning that says so and ``otherwise``."""
    env = os.environ.get(name)
    if env is None or not env.strip():
        return default
    try:
        value = int(env)
    except ValueError:
        value = -1
    if value < 0:
        warn(f"{name}={env!r} is not a number of bytes; {otherwise}", category)
        return default
    return value


def warn(message: str, category: type = CacheWarning):
    """A warning (a CacheWarning unless said), attributed to the first caller outside cinnlite
    (the ``compile`` call, or the call of an executable)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    level, frame = 1, sys._getframe(0)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(category(message), stacklevel=level)


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
    if program.assumptions:  # (static programs keep the digest they always had)
        h.update(f"\nassume {program.assumptions!r}".encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def structure_fingerprint(program) -> str:
    """A digest of a program with its sizes left out: the inputs' names, dtypes and ranks, and
    every node's operator, operands and attributes. Programs that differ only in their input
    sizes share it (see ``compile``'s generalisation)."""
    h = hashlib.sha256()
    h.update(f"structure {program.name!r}\n".encode("utf-8", "surrogatepass"))
    for t in program.inputs:
        h.update(f"in {t.name!r} {t.dtype} rank {len(t.shape)}\n".encode("utf-8", "surrogatepass"))
    for n in program.nodes:
        ins = ",".join(repr(t.name) for t in n.inputs)
        h.update(f"node {n.op} {ins} {_canonical(n.attrs)} -> {n.output.name!r} {n.output.dtype}\n"
                 .encode("utf-8", "surrogatepass"))
    h.update(("out " + ",".join(repr(t.name) for t in program.outputs)).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def compile_key(program, target: str, options: dict, environment: dict, structure: bool = False) -> str:
    """The cache key of compiling ``program``; with ``structure``, of its shape-generic version
    (``structure_fingerprint``), which every size of the program shares."""
    h = hashlib.sha256()
    fingerprint = structure_fingerprint(program) if structure else program_fingerprint(program)
    h.update(f"format {FORMAT}\n{fingerprint}\n{target}\n".encode())
    for k in sorted(options):
        h.update(f"option {k}={options[k]!r}\n".encode())
    for k in sorted(environment):
        h.update(f"env {k}={environment[k]!r}\n".encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def compiler_source_digest() -> str:
    """A digest of the compiler's own source (every file's path and contents), so that a changed
    compiler never reuses code cached by another build with the same version number. Read once
    per process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files, folders = [], [root]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    folders.append(e.path)
                elif e.name.endswith((".py", ".j2", ".h")):
                    files.append(e.path[len(root) + 1:])
    h = hashlib.sha256()
    for name in sorted(files):
        contents = hashlib.sha256()
        fd = os.open(os.path.join(root, name), os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            while chunk := os.read(fd, 1 << 20):
                contents.update(chunk)
        finally:
            os.close(fd)
        h.update(name.replace(os.sep, "/").encode() + b"\0" + contents.digest())
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
    Binding the key means a file copied under another key's name is as bad as a damaged one.
    (A shared library still loads with the seal after it: the loader reads only what the ELF
    headers point to.)"""
    return payload + SEAL_MAGIC + _seal_digest(payload, key)


def unseal(data: bytes, key: str) -> memoryview | None:
    """The payload of a file that ``seal`` wrote for ``key``, or None for anything else."""
    if len(data) < SEAL_SIZE or data[-SEAL_SIZE:-32] != SEAL_MAGIC:
        return None
    payload = memoryview(data)[:-SEAL_SIZE]
    return payload if _seal_digest(payload, key) == data[-32:] else None


# -- the directory -----------------------------------------------------------------------------------

_STATE_LOCK = threading.Lock()
_PREPARED: set = set()  # directories checked and created by this process
_BROKEN: dict = {}      # directory -> True when it can still be read, False when not even that
#: The files the size bound counts and may remove: nothing else in the directory is touched.
_OWN_FOLDER = re.compile(r"[0-9a-f]{2}|cuda-emu")
_OWN_FILE = re.compile(r"[0-9a-f]{2}/[0-9a-f]{64}\.(entry|pkl)|cuda-emu/emu_[0-9a-f]{32}\.so")


class CacheDirectory:
    """A cache directory shared by every process that uses it: atomic writes, reads that mark a
    file's last use, the size bound, and going on without it (one warning) when it fails."""

    def __init__(self, root: str):
        self.root = root

    def readable(self) -> bool:
        return self._prepare() and _BROKEN.get(self.root, True)

    def writable(self) -> bool:
        return self._prepare() and self.root not in _BROKEN

    def read(self, name: str) -> bytes | None:
        """The contents of file ``name`` (a path relative to the root), or None."""
        if not self.readable():
            return None
        try:
            with open(os.path.join(self.root, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._give_up(f"cannot read {name}", exc, readable=False)
            return None

    def touch(self, name: str):
        """Mark file ``name`` as just used, for the size bound (a read-only cache keeps its order)."""
        try:
            os.utime(os.path.join(self.root, name))
        except OSError:
            pass

    def write(self, name: str, data: bytes) -> str | None:
        """Write file ``name`` atomically and keep the cache within its bound; the file's path, or
        None when the directory cannot be written (warned about once)."""
        if not self.writable():
            return None
        path = os.path.join(self.root, name)
        folder = os.path.dirname(path)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                _remove(tmp)
                raise
        except OSError as exc:
            self._give_up(f"cannot write {name}", exc, readable=True)
            return None
        self.evict(keep=path)
        return path

    def evict(self, keep: str | None = None):
        """Remove least recently used files until the cache fits in ``max_bytes()``."""
        limit, now = max_bytes(), time.time()
        files, total = [], 0
        for name, path, st in self._own_files():
            if os.path.basename(name).startswith(".tmp-"):
                if now - st.st_mtime > STALE_TEMPORARY_SECONDS:
                    _remove(path)
                continue
            total += st.st_size
            if path != keep and now - st.st_mtime > RECENT_USE_SECONDS:
                files.append((st.st_mtime, st.st_size, path))
        for _, size, path in sorted(files):
            if total <= limit:
                break
            _remove(path)
            total -= size

    def _own_files(self):
        """(name, path, stat) of cinnlite's files and temporary files; nothing else."""
        try:
            folders = [e.name for e in os.scandir(self.root) if _OWN_FOLDER.fullmatch(e.name)]
        except OSError:
            return
        for folder in folders:
            try:
                found = list(os.scandir(os.path.join(self.root, folder)))
            except OSError:  # not a folder after all, or gone
                continue
            for e in found:
                name = f"{folder}/{e.name}"
                if not (_OWN_FILE.fullmatch(name) or e.name.startswith(".tmp-")):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    yield name, e.path, st

    def _prepare(self) -> bool:
        """Create the directory (private to this user) or check the one that is there, once."""
        if self.root in _PREPARED:
            return True
        if _BROKEN.get(self.root) is False:
            return False
        try:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
            st = os.stat(self.root)
        except FileExistsError:
            self._give_up("it is a file, not a directory", None, readable=False)
            return False
        except OSError as exc:
            self._give_up("cannot create it", exc, readable=False)
            return False
        problem = _not_private(st)
        if problem:
            self._give_up(problem, None, readable=False)
            return False
        with _STATE_LOCK:
            _PREPARED.add(self.root)
        return True

    def _give_up(self, what: str, exc: OSError | None, readable: bool):
        """Stop writing to (and, unless ``readable``, reading from) this directory in this
        process, and say so once."""
        with _STATE_LOCK:
            first = self.root not in _BROKEN
            _BROKEN[self.root] = _BROKEN.get(self.root, True) and readable
            if not readable:
                _PREPARED.discard(self.root)
        if first:
            reason = f"{what}: {exc.strerror or exc}" if exc is not None else what
            warn(f"compile cache {self.root}: {reason}; compiled code is kept in memory only "
                 f"(set CINNLITE_CACHE_DIR to another directory, or to off)")


def _not_private(st) -> str | None:
    """Why a cache directory with status ``st`` may hold code that someone else wrote."""
    uid = getattr(os, "geteuid", lambda: st.st_uid)()
    if st.st_uid != uid:
        return f"it belongs to another user (uid {st.st_uid})"
    if st.st_mode & stat.S_IWOTH:
        return "every user can write to it"
    return None


def _remove(path: str):
    try:
        os.unlink(path)
    except OSError:  # gone already (another process evicted it), or not ours to remove
        pass


# -- entries ---------------------------------------------------------------------------------------------

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
    """The entries of one cache directory: a dict of stage texts, the lowered program and what
    the target built, per key (see the module docstring for the file format)."""

    def __init__(self, directory: str):
        self.directory = CacheDirectory(directory)

    @staticmethod
    def _name(key: str) -> str:
        return f"{key[:2]}/{key}.entry"

    def load(self, key: str) -> dict | None:
        """The entry for ``key``, or None when missing, damaged or from another format."""
        data = self.directory.read(self._name(key))
        parts = unpack_entry(data, key) if data is not None else None
        if parts is None:
            return None
        try:
            value = codec.loads(*parts)
        except codec.CodecError:
            return None
        if type(value) is not dict or value.get("key") != key or type(value.get("fields")) is not dict:
            return None
        self.directory.touch(self._name(key))
        return value["fields"]

    def store(self, key: str, entry: dict) -> bool:
        """Write the entry atomically; False when the directory cannot take it."""
        try:
            meta, blob = codec.dumps({"key": key, "fields": entry})
        except codec.CodecError as exc:  # a value the codec does not know: a bug, not a disk problem
            warn(f"compile cache: cannot store an entry: {exc}")
            return False
        return self.directory.write(self._name(key), pack_entry(key, meta, blob)) is not None


def disk_cache() -> DiskCache | None:
    """The disk cache of the current ``cache_dir()``, or None when it is off."""
    directory = cache_dir()
    return DiskCache(directory) if directory else None


MEMORY = MemoryCache()
