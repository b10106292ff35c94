"""No import cycles inside cinnlite: the module-level imports form an acyclic graph, and every
module imports first, in a fresh interpreter, whatever was imported before it."""
import ast
import random
import subprocess
import sys
from pathlib import Path

import pytest

import cinnlite

PACKAGE = Path(cinnlite.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _module_level(tree):
    """The nodes that run when the module is imported: not the bodies of functions."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str) -> set:
    """The cinnlite modules that importing module ``name`` imports directly."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _module_level(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in MODULES and m != name}


def find_cycle(graph: dict):
    state, path = {}, []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_module_level_imports_form_no_cycle():
    graph = {name: imports_of(name) for name in MODULES}
    assert graph["cinnlite.compiler"] >= {"cinnlite.backends.registry", "cinnlite.ir.lower"}  # the walk sees imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_runtime_cuda_and_its_emulation_do_not_import_each_other():
    assert "cinnlite.runtime.cuda_emu" not in imports_of("cinnlite.runtime.cuda")
    assert "cinnlite.runtime.cuda" not in imports_of("cinnlite.runtime.cuda_emu")


ORDERS = {"sorted": sorted(MODULES), "reversed": sorted(MODULES, reverse=True),
          "shuffled": random.Random(7).sample(sorted(MODULES), len(MODULES))}


@pytest.mark.parametrize("order", list(ORDERS))
def test_every_module_imports_in_a_fresh_interpreter_in_any_order(order):
    modules = [m for m in ORDERS[order] if m != "cinnlite.__main__"]  # that one runs the command line
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    proc = subprocess.run([sys.executable, "-c", script, *modules], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
