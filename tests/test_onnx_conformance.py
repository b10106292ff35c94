"""ONNX backend node tests of the indexing operators, through the importer, on every backend.

The cases come from the installed onnx package (``onnx.backend.test.case.node``): every case
named ``test_gather_*``, ``test_gather_elements_*``, ``test_gathernd_*``, ``test_scatter_*``,
``test_scatter_elements_*``, ``test_scatternd_*`` or ``test_tensorscatter*``. A newer onnx brings
its new cases with it. Each case's model is imported, compiled for the backend and run on the
case's inputs; the outputs must match the case's expected outputs in dtype, shape and value
(with the tolerances the case carries, as ONNX's own backend runner uses them).
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import cinnlite as cl  # noqa: E402
from cinnlite.frontend.onnx import import_onnx  # noqa: E402

CASE_NAME = re.compile(r"^test_(gather|gathernd|scatter|scatternd|tensorscatter)(_|$)")
OPERATORS = ("Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND",
             "TensorScatter")


def collect_cases():
    """The installed onnx package's node test cases for the indexing operators, by name."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        # Building the whole registry runs every operator's numpy reference, some of which
        # overflow or divide by zero on purpose.
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    return sorted((c for c in cases if CASE_NAME.match(c.name)), key=lambda c: c.name)


CASES = collect_cases()


def as_array(value) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else onnx.numpy_helper.to_array(value)


def run_case(case, target: str):
    """Import, compile and run one case; returns [(output name, got, expected)] per data set."""
    imported = import_onnx(case.model)
    exe = cl.compile(imported.program, target=target)
    graph_inputs = [vi.name for vi in case.model.graph.input
                    if vi.name not in {init.name for init in case.model.graph.initializer}]
    results = []
    for inputs, expected in case.data_sets:
        feeds = {name: as_array(v) for name, v in zip(graph_inputs, inputs)}
        got = imported.named_outputs(exe.run(imported.feeds(feeds)))
        for vo, want in zip(case.model.graph.output, expected):
            results.append((vo.name, got[vo.name], as_array(want)))
    return results


def test_the_cases_of_every_operator_are_collected():
    ops = {node.op_type for case in CASES for node in case.model.graph.node}
    assert set(OPERATORS) <= ops, f"no node test cases found for {sorted(set(OPERATORS) - ops)}"


def check_case(case, target: str):
    """Raise AssertionError (or the error the import, compile or run raised) unless the case passes."""
    results = run_case(case, target)
    assert results, "the case has no outputs to compare"
    for name, got, want in results:
        assert got.dtype == want.dtype, f"output {name}: dtype {got.dtype}, expected {want.dtype}"
        assert got.shape == want.shape, f"output {name}: shape {got.shape}, expected {want.shape}"
        np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, err_msg=f"output {name}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_node_case(case, backend):
    check_case(case, backend)
