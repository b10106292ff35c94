"""End-to-end smoke test: the demo compiles, checks and times its programs, also without PyTorch."""
import io
import re
import sys

from cinnlite.demo import main


def test_demo_matches_numpy_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)   # `import torch` now raises ImportError
    out = io.StringIO()
    assert main(out) == 0
    text = out.getvalue()
    assert re.search(r"one fused kernel; (bit-identical to numpy|equal to numpy within 1e-5)", text)
    assert "torch    not installed" in text
    assert text.rstrip().endswith("on a small graph: matches numpy")
