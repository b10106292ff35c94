"""The exceptions cinnlite raises.

Every error a user can cause is a subclass of :class:`CinnliteError`, and also of the builtin
exception a Python user would expect (``ValueError``, ``TypeError``, ``IndexError``), so code can
catch either. The warnings it gives (the runtime carrying on with less than was asked for) are
subclasses of :class:`CinnliteWarning`.
"""


class CinnliteError(Exception):
    """Base class of every error cinnlite raises on purpose."""


class ValidationError(CinnliteError, ValueError):
    """A graph breaks a rule of an operator (shape, axis, attribute) when it is built."""

    def __init__(self, op, rule, message, input=None):
        self.op = op
        self.rule = rule
        self.input = input
        where = f"{op}" + (f", input '{input}'" if input else "")
        super().__init__(f"{where}: {message} [rule: {rule}]")


class DTypeError(CinnliteError, TypeError):
    """A data or index type that an operator does not accept."""

    def __init__(self, op, rule, message, input=None):
        self.op = op
        self.rule = rule
        self.input = input
        where = f"{op}" + (f", input '{input}'" if input else "")
        super().__init__(f"{where}: {message} [rule: {rule}]")


class IndexOutOfRangeError(CinnliteError, IndexError):
    """An index value out of range in ``mode="raise"``, found at run time."""

    def __init__(self, op, input, position, value, size):
        self.op = op
        self.input = input
        self.position = tuple(position)
        self.value = int(value)
        self.size = int(size)
        pos = "(" + ", ".join(str(p) for p in self.position) + ("," if len(self.position) == 1 else "") + ")"
        valid = f"[{-size}, {size - 1}]" if size > 0 else "none (the axis is empty)"
        super().__init__(
            f"{op}: index {self.value} at position {pos} of input '{input}' is out of range; "
            f"valid values are {valid}"
        )


class InputError(CinnliteError, ValueError):
    """A run-time argument that does not match the program (missing, unknown, wrong shape)."""


class InputTypeError(CinnliteError, TypeError):
    """A run-time argument whose dtype does not match the program (no silent casts)."""


class TargetUnavailableError(CinnliteError, RuntimeError):
    """A target that cannot run on this machine (no GPU, no driver, no compiler)."""


class CompileError(CinnliteError, RuntimeError):
    """A backend compiler (LLVM, NVRTC, the host C++ compiler) rejected generated code."""


class CinnliteWarning(UserWarning):
    """Base class of the warnings cinnlite gives."""


class ThreadStartWarning(CinnliteWarning, RuntimeWarning):
    """The CPU runtime could not start a worker thread: calls go on, on fewer threads."""


class ShapeMismatchWarning(CinnliteWarning):
    """An ONNX model declares an output shape that differs from the one its graph computes; the
    computed shape is used, as ONNX Runtime does."""


class CacheWarning(CinnliteWarning):
    """The disk compile cache cannot be used (a directory that cannot be written or read, a full
    disk, a directory other users can write). Compiling goes on without it; the message names
    the directory and the reason."""
