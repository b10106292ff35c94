"""Text form of the loop-nest IR, as shown by ``exe.source("lowered")``."""
from __future__ import annotations

from .graph import display_name
from .symbolic import is_symbol_load
from .loopnest import (Binary, Cast, Cmp, Const, Every, FlagIndexError, For, If, Kernel, Let, Load, LoweredProgram, Math,
                       Prefetch, Reduce, ReportIndexError, Select, Seq, Store, Var)

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "and": "&&", "or": "||"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def expr_str(e) -> str:
    if isinstance(e, Const):
        if e.dtype.is_bool:
            return "true" if e.value else "false"
        return repr(e.value) if e.dtype.name in ("int64", "float32") else f"{e.dtype}({e.value!r})"
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Binary):
        if e.op in _INFIX:
            return f"({expr_str(e.a)} {_INFIX[e.op]} {expr_str(e.b)})"
        return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, Cmp):
        return f"({expr_str(e.a)} {_CMP[e.op]} {expr_str(e.b)})"
    if isinstance(e, Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, Cast):
        return f"{e.to}({expr_str(e.a)})"
    if isinstance(e, Math):
        return f"{e.fn}({expr_str(e.a)})"
    if isinstance(e, Every):
        return f"every({e.var.name} in 0..{expr_str(e.extent)}: {expr_str(e.cond)})"
    if is_symbol_load(e):
        return e.buffer.name  # a symbolic size: #E
    if isinstance(e, Load):
        return f"{display_name(e.buffer.name)}[{', '.join(expr_str(i) for i in e.indices)}]"
    raise TypeError(f"not an expression: {e!r}")


def stmt_lines(s, indent: int = 1) -> list:
    pad = "  " * indent
    if isinstance(s, For):
        kind = "" if s.kind == "serial" else f"  # {s.kind}"
        lines = [f"{pad}for {s.var.name} in 0..{expr_str(s.extent)} {{{kind}"]
        lines += stmt_lines(s.body, indent + 1)
        return lines + [f"{pad}}}"]
    if isinstance(s, Store):
        return [f"{pad}{display_name(s.buffer.name)}[{', '.join(expr_str(i) for i in s.indices)}] = {expr_str(s.value)}"]
    if isinstance(s, Reduce):
        target = f"{display_name(s.buffer.name)}[{', '.join(expr_str(i) for i in s.indices)}]"
        if s.combine == "none":
            return [f"{pad}{target} = {expr_str(s.value)}  # scatter: last write wins"]
        return [f"{pad}{target} = {s.combine}({target}, {expr_str(s.value)})"]
    if isinstance(s, If):
        lines = [f"{pad}if {expr_str(s.cond)} {{"] + stmt_lines(s.then, indent + 1)
        if s.orelse is not None:
            lines += [f"{pad}}} else {{"] + stmt_lines(s.orelse, indent + 1)
        return lines + [f"{pad}}}"]
    if isinstance(s, Seq):
        return [line for st in s.stmts for line in stmt_lines(st, indent)]
    if isinstance(s, Let):
        # A Let's scope is the rest of the block it stands in: its bindings print as lines.
        lets = [f"{pad}let {v.name} = {expr_str(e)}" for v, e in s.bindings]
        return lets + stmt_lines(s.body, indent)
    if isinstance(s, FlagIndexError):
        return [f"{pad}flag_index_error(check={s.check_id})"]
    if isinstance(s, Prefetch):
        return [f"{pad}prefetch {display_name(s.buffer.name)}[{', '.join(expr_str(i) for i in s.indices)}]"]
    if isinstance(s, ReportIndexError):
        value = f", value={expr_str(s.value)}" if s.value is not None else ""
        return [f"{pad}report_index_error(check={s.check_id}, position={expr_str(s.position)}{value})"]
    raise TypeError(f"not a statement: {s!r}")


def _shape(shape) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else expr_str(d) for d in shape) + "]"


def kernel_str(k: Kernel) -> str:
    params = ", ".join(f"{display_name(b.name)}: {b.dtype}{_shape(b.shape)}" for b in k.params)
    head = f"kernel {display_name(k.name)}({params})  # {k.op}"
    temps = [f"  alloc {display_name(t.name)}: {t.dtype}{_shape(t.shape)}" for t in k.temps]
    return "\n".join([head + " {"] + temps + stmt_lines(k.body) + ["}"])


def program_str(p: LoweredProgram) -> str:
    return "\n\n".join(kernel_str(k) for k in p.kernels) if p.kernels else f"# {display_name(p.name)}: no kernels"
