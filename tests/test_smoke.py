"""End-to-end smoke test: the demo graph compiles, runs and matches numpy."""
import io

from cinnlite.demo import main


def test_demo_matches_numpy():
    out = io.StringIO()
    assert main(out) == 0
    text = out.getvalue()
    assert "all outputs match numpy" in text
    assert 'define internal i32 @"k_scatter_0_s0_impl"' in text
