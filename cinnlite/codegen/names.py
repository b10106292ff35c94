"""The user's names in generated source.

Program and tensor names belong to the user: a program name is free text, and a Program can
be put together without NetBuilder, so any string may reach a renderer. None reaches LLVM IR or
CUDA C as it is. Where a name becomes an identifier, ``safe_name`` keeps only ASCII letters,
digits and ``_`` (and a hash, so that names differing in the characters it replaced stay
distinct); where a name is shown in a comment or a quoted string, ``comment_text`` escapes every
character that could end the comment or the string, splice lines or mean anything but itself.
Error messages and the ``run()`` dictionary keep the names exactly as the user wrote them.
"""
from __future__ import annotations

import hashlib
import re
from urllib.parse import quote

_PLAIN = re.compile(r"[A-Za-z0-9_]+")
_OTHER = re.compile(r"[^A-Za-z0-9_]")
#: At most this many characters of a name that had to be changed are kept (the hash follows).
_KEPT = 48
#: Characters shown as they are in comments: none of them can close a ``/* */`` or ``//``
#: comment or an LLVM string, splice lines (``\``), start a trigraph (``?``) or an escape (``%``).
_COMMENT_SAFE = " _.,:;=+-()[]<>'#@!/{}|^~&$"


def safe_name(name: str) -> str:
    """``name`` if it is made of ASCII letters, digits and ``_`` only; otherwise its first
    characters with every other character replaced by ``_``, then ``_`` and eight hex digits of
    the name's SHA-256. The result is never empty and may start with a digit: callers prefix it."""
    if _PLAIN.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{_OTHER.sub('_', name[:_KEPT])}_{digest}"


def comment_text(text: str) -> str:
    """``text`` for a comment or an LLVM quoted string: printable ASCII that cannot end either
    stays, everything else (newlines, ``*``, ``\\``, quotes, non-ASCII) is percent-encoded."""
    return quote(str(text), safe=_COMMENT_SAFE, errors="surrogatepass")
