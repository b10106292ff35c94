"""The documentation's examples run as written, and its links lead somewhere.

Every ```python block of README.md and docs/*.md runs, in order, in one namespace per document
(the way a reader pastes them into one session), from the repository's root. A block may be
skipped only for a reason its reader would meet too: an optional package that is not installed
(onnx, torch, NVRTC from the ``cuda`` extra), or, for a block whose first line is
``# needs a GPU``, a machine without a GPU. The command-line examples that read the shipped
example model run too, and the transcript of ``cinnlite run`` must match what it prints.

Every relative link must name a file the repository ships, and every ``#anchor`` a heading of
the document it points into.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from cinnlite.errors import TargetUnavailableError

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GPU_MARK = "# needs a GPU"

_FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class CodeBlock:
    document: Path
    line: int          # the line of the opening fence, 1-based
    language: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def code_blocks(document: Path, language: str | None = None) -> list[CodeBlock]:
    text = document.read_text(encoding="utf-8")
    blocks = [CodeBlock(document, text.count("\n", 0, m.start()) + 1, m["lang"], m["code"])
              for m in _FENCE.finditer(text)]
    return [b for b in blocks if language is None or b.language == language]


def prose(document: Path) -> str:
    """The document without its code blocks, where links and headings are."""
    return _FENCE.sub("", document.read_text(encoding="utf-8"))


# -- python blocks ------------------------------------------------------------------------------


@dataclass
class Session:
    """What pasting a document's blocks so far has left behind."""

    namespace: dict = field(default_factory=lambda: {"__name__": "__readme__"})
    skipped: list = field(default_factory=list)   # why earlier blocks were skipped
    failed: str | None = None                      # the first block that failed


SESSIONS: dict[Path, Session] = {}
PYTHON_BLOCKS = [b for doc in DOCUMENTS for b in code_blocks(doc, "python")]


def gpu_available() -> bool:
    from cinnlite.runtime.cuda import gpu_available as available

    return available()


def installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ValueError:          # sys.modules holds None for it: importing it is blocked
        return False


def missing_dependency(exc: BaseException) -> str | None:
    """Why ``exc`` is the reader's missing optional dependency, or None if it is a real failure."""
    if isinstance(exc, ImportError):
        name = exc.name or ("onnx" if "onnx" in str(exc) else None)
        if name and not installed(name.split(".")[0]):
            return f"needs {name}, which is not installed"
    if isinstance(exc, TargetUnavailableError) and "NVRTC is not installed" in str(exc):
        return "needs NVRTC, from the cuda extra, which is not installed"
    return None


def test_the_documents_have_python_examples():
    assert PYTHON_BLOCKS, "no ```python block found: the extraction is broken"


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.name)
def test_python_example_runs(block, monkeypatch):
    session = SESSIONS.setdefault(block.document, Session())
    if session.failed:
        pytest.fail(f"an earlier block of the document failed: {session.failed}")
    if block.code.startswith(GPU_MARK) and not gpu_available():
        session.skipped.append(f"{block.name} needs a GPU")
        pytest.skip("marked '# needs a GPU', and there is no GPU here")
    monkeypatch.chdir(ROOT)
    try:
        exec(compile(block.code, block.name, "exec"), session.namespace)
    except NameError as exc:
        if session.skipped:   # a name an earlier, skipped block would have defined
            pytest.skip(f"uses what a skipped block defines ({'; '.join(session.skipped)}): {exc}")
        session.failed = block.name
        raise
    except Exception as exc:  # noqa: BLE001 - the reader's missing extra is a skip, anything else fails
        reason = missing_dependency(exc)
        if reason is None:
            session.failed = block.name
            raise
        session.skipped.append(f"{block.name} {reason}")
        pytest.skip(reason)


# -- command-line examples ----------------------------------------------------------------------


def cinnlite_commands() -> list[tuple[str, str, list[str]]]:
    """``(where, command, expected output lines)`` for each ``cinnlite run``/``emit`` line of the
    README's bash blocks. A line starting ``$ `` is a transcript: the lines up to the next
    command are what it prints."""
    found = []
    for block in code_blocks(ROOT / "README.md", "bash"):
        lines = block.code.splitlines()
        for k, line in enumerate(lines):
            command = line[2:] if line.startswith("$ ") else line
            if not re.match(r"cinnlite (run|emit) ", command):
                continue
            output = []
            if line.startswith("$ "):
                output = [x for x in lines[k + 1:] if not x.startswith("$ ")]
            found.append((f"{block.name}+{k + 1}", command.split("|")[0].strip(), output))
    return found


def test_the_readme_has_command_line_examples():
    assert any(output for _, _, output in cinnlite_commands())


@pytest.mark.parametrize("where, command, output", cinnlite_commands(), ids=[w for w, _, _ in cinnlite_commands()])
def test_command_line_example_runs(where, command, output, tmp_path):
    pytest.importorskip("onnx", reason="the run and emit commands read ONNX models")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")    # outputs go to the copy, not the checkout
    argv = shlex.split(command)
    proc = subprocess.run([sys.executable, "-m", "cinnlite", *argv[1:]], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    if output:
        assert proc.stdout.splitlines() == output


def test_the_shipped_example_model_is_what_its_script_makes(tmp_path):
    onnx = pytest.importorskip("onnx", reason="the example model is an ONNX model")
    spec = importlib.util.spec_from_file_location("make_gather_model", ROOT / "examples" / "make_gather_model.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(tmp_path)
    assert onnx.load(str(tmp_path / "gather.onnx")).graph == onnx.load(str(ROOT / "examples" / "gather.onnx")).graph
    for name in ("data", "indices"):
        made, shipped = np.load(tmp_path / f"{name}.npy"), np.load(ROOT / "examples" / f"{name}.npy")
        assert made.dtype == shipped.dtype and np.array_equal(made, shipped)


# -- links ----------------------------------------------------------------------------------------

_LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(?P<target>\S+)", re.M)
_HEADING = re.compile(r"^#{1,6}[ \t]+(?P<title>.+?)[ \t]*#*[ \t]*$", re.M)


def github_anchors(document: Path) -> set[str]:
    """The anchors GitHub gives the document's headings: lower case, punctuation dropped,
    spaces as hyphens, a repeated heading numbered."""
    anchors: set[str] = set()
    for m in _HEADING.finditer(prose(document)):
        title = re.sub(r"`|\*\*|__", "", m["title"]).strip().lower()
        slug = re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", title))
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def links() -> list[tuple[str, Path, str]]:
    found = []
    for document in DOCUMENTS:
        text = prose(document)
        for pattern in (_LINK, _REFERENCE):
            for m in pattern.finditer(text):
                found.append((f"{document.relative_to(ROOT)}->{m['target']}", document, m["target"]))
    return found


def test_the_documents_have_links():
    assert any(target.startswith("#") for _, _, target in links())
    assert any(not target.startswith(("#", "http")) for _, _, target in links())


@pytest.mark.parametrize("where, document, target", links(), ids=[w for w, _, _ in links()])
def test_link_resolves(where, document, target):
    if re.match(r"[a-z][a-z0-9+.-]*:", target):   # http:, https:, mailto: lead outside the repository
        return
    path, _, anchor = target.partition("#")
    destination = (document.parent / path).resolve() if path else document
    assert destination.exists(), f"{where}: {destination} does not exist"
    assert ROOT in destination.parents or destination == ROOT, f"{where}: leads outside the repository"
    if anchor:
        assert destination.suffix == ".md", f"{where}: an anchor into a file that is not markdown"
        assert anchor in github_anchors(destination), f"{where}: no heading has the anchor #{anchor}"
