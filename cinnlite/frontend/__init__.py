"""Front ends that build cinnlite programs: the NetBuilder API (and the ONNX importer)."""
from .netbuilder import NetBuilder

__all__ = ["NetBuilder"]
