"""Write the ONNX model and the input arrays that the README's ONNX examples use.

``gather.onnx`` is one ONNX Gather node, ``y = Gather(data, indices, axis=0)``, with
``data: float32[4, 3]`` and ``indices: int64[2]``; ``data.npy`` holds ``arange(12)`` as a 4x3
array and ``indices.npy`` holds ``[1, 3]``, so ``y`` is rows 1 and 3 of ``data``. The files are
shipped so that the examples run as written; this script is how they were made, and running it
again (it needs the ``onnx`` package) writes the same model and arrays next to itself.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


def gather_model():
    """The model as an ``onnx.ModelProto`` (opset 13)."""
    from onnx import TensorProto, helper

    node = helper.make_node("Gather", ["data", "indices"], ["y"], axis=0, name="gather")
    graph = helper.make_graph(
        [node], "gather",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, (4, 3)),
         helper.make_tensor_value_info("indices", TensorProto.INT64, (2,))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="cinnlite examples")


def example_inputs() -> dict[str, np.ndarray]:
    return {"data": np.arange(12, dtype=np.float32).reshape(4, 3), "indices": np.array([1, 3], np.int64)}


def main(directory: Path = Path(__file__).resolve().parent) -> None:
    import onnx

    onnx.save(gather_model(), str(directory / "gather.onnx"))
    for name, array in example_inputs().items():
        np.save(directory / f"{name}.npy", array, allow_pickle=False)


if __name__ == "__main__":
    main()
