"""cinnlite inside PyTorch: :func:`compile` makes a program a PyTorch operator with gradients.

The operator is a torch custom operator (``torch.library.custom_op``), one per program and
target, so ``torch.compile`` graphs call it without a graph break; its fake implementation
infers the output shapes from the program's (symbolic) shapes. Its autograd formula
(``register_autograd``, which PyTorch runs as a ``torch.autograd.Function``) runs the program
of :func:`cinnlite.vjp`, a second custom operator, compiled once per set of inputs that need
gradients. Tensors cross over without copies: CPU tensors are read and results wrapped as numpy
arrays (DLPack); ``target="cuda"`` reads CUDA tensors in place and its results come back through
DLPack on PyTorch's current stream (``cuda-emu`` and ``cpu`` take device tensors through the host).

PyTorch is an optional dependency (``pip install cinnlite[torch]``).
"""
from __future__ import annotations

import threading

import numpy as np

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError("cinnlite.torch needs PyTorch: pip install 'cinnlite[torch]'") from exc

from .autodiff import differentiable, differentiable_outputs, vjp
from .compiler import compile as compile_program
from .errors import InputError
from .ir.graph import Program
from .ir.symbolic import evaluate_shape, symbols_of
from .runtime.cache import program_fingerprint
from .runtime.executable import input_name_mismatch

_OPS: dict = {}
_LOCK = threading.Lock()


def compile(program: Program, target: str = "cpu", **options) -> "Function":
    """``program`` as a PyTorch function: ``f(x=..., i=...)`` takes tensors by input name and
    returns a tensor, or a tuple in output order. Gradients flow to every floating-point input
    that requires them. ``options`` are :func:`cinnlite.compile`'s; a ``cuda`` target's
    backward is compiled ``deterministic=True``, so gradients are the same from run to run."""
    if not isinstance(program, Program):
        raise TypeError(f"cinnlite.torch.compile() takes a Program, got {type(program).__name__}")
    return Function(program, target, options)


class Function:
    """A compiled program as a PyTorch operator (see :func:`compile`)."""

    def __init__(self, program: Program, target: str, options: dict):
        self.program, self.target = program, target
        self.input_names = tuple(t.name for t in program.inputs)
        self._forward = compile_program(program, target=target, **options)
        self._options = dict(options, deterministic=True) if target.startswith("cuda") else dict(options)
        self._backward: dict = {}
        self.op = _operator(self, program_fingerprint(program), target)

    def __call__(self, **tensors):
        mismatch = input_name_mismatch(self.input_names, tensors)
        if mismatch:
            raise InputError(f"program '{self.program.name}': {mismatch}")
        outs = self.op([tensors[n] for n in self.input_names])
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_forward(self, tensors) -> list:
        return _run(self._forward, self.input_names, tensors, self.program.outputs)

    def run_backward(self, tensors, cotangents, wrt: tuple) -> list:
        """The gradients of the inputs named in ``wrt``, from the forward inputs and the
        cotangents of the floating-point outputs."""
        exe = self._backward.get(wrt)
        if exe is None:
            exe = self._backward[wrt] = compile_program(vjp(self.program, wrt), target=self.target, **self._options)
        names = self.input_names + tuple(f"grad_{t.name}" for t in self.program.outputs if differentiable(t))
        arrays = list(tensors) + list(cotangents)
        return _run(exe, names, arrays, exe.program.outputs)


def _run(exe, names, tensors, outputs) -> list:
    """Run ``exe`` on tensors without copying them in or out: CPU tensors on any target, CUDA
    tensors on a target that reads GPU memory (results through DLPack, on the call's stream,
    PyTorch's current one); results on the inputs' device."""
    device = next((t.device for t in tensors if isinstance(t, torch.Tensor)), None)
    in_place = exe.takes_gpu_memory and any(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors)
    arrays = {n: t.detach().contiguous() if in_place else to_numpy(t) for n, t in zip(names, tensors)}
    results = exe.run(arrays)
    if in_place:
        return [_from_device(results[t.name], device) for t in outputs]
    return [from_numpy(results[t.name], device) for t in outputs]


def _from_device(result, device) -> "torch.Tensor":
    """A result of a device call as a tensor (a DeviceArray through DLPack, without a copy)."""
    if isinstance(result, np.ndarray):  # a program with no device input: outputs come to the host
        return from_numpy(result, device)
    return torch.from_dlpack(result)


def to_numpy(t) -> np.ndarray:
    """A tensor's memory as a numpy array: the same memory for a CPU tensor (bfloat16 through
    its bits, which numpy knows only through ``ml_dtypes``), a host copy for a device tensor."""
    t = t.detach()
    if not t.is_cpu:
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def from_numpy(a: np.ndarray, device) -> "torch.Tensor":
    """A numpy result as a tensor on ``device``, sharing its memory on the CPU."""
    if a.dtype.name == "bfloat16":
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a)
    return t if device is None else t.to(device)  # .to() gives the tensor itself on its device


def _torch_dtype(dtype):
    return torch.bfloat16 if dtype.name == "bfloat16" else torch.from_numpy(np.zeros(0, dtype.np)).dtype


def _output_shapes(program: Program, tensors) -> list:
    """The output shapes for these input tensors: the symbols bound by the inputs' sizes."""
    bindings = {}
    for t, x in zip(program.inputs, tensors):
        for d, size in zip(t.shape, x.shape):
            if symbols_of((d,)):
                bindings[d.name] = size
    return [evaluate_shape(t.shape, bindings) for t in program.outputs]


def _operator(fn: Function, fingerprint: str, target: str):
    """The custom operator of ``fn``'s program on ``target``, made once per process: later
    Functions of the same program and target use the one registered first for their kernels,
    which compute the same thing."""
    name = f"cinnlite::p{fingerprint[:24]}_{target.replace('-', '_')}"
    with _LOCK:
        if name in _OPS:
            _OPS[name][1].append(fn)
            return _OPS[name][0]
        owners = [fn]

        def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            return owners[0].run_forward(inputs)

        op = torch.library.custom_op(name, run, mutates_args=())

        def fake(inputs):
            program = owners[0].program
            return [inputs[0].new_empty(shape, dtype=_torch_dtype(t.dtype)) if inputs else
                    torch.empty(shape, dtype=_torch_dtype(t.dtype))
                    for shape, t in zip(_output_shapes(program, inputs), program.outputs)]

        op.register_fake(fake)
        backward = _backward_operator(name, owners)
        op.register_autograd(backward.apply, setup_context=backward.setup)
        _OPS[name] = (op, owners)
        return op


class _Backward:
    """The autograd formula of one program's operator."""

    def __init__(self, op, owners: list):
        self.op, self.owners = op, owners
        self.constant_outputs = [k for k, d in enumerate(differentiable_outputs(owners[0].program)) if not d]

    def setup(self, ctx, inputs, output):
        """Save the inputs; outputs no floating-point input reaches carry no gradient."""
        (tensors,) = inputs
        ctx.save_for_backward(*tensors)
        if self.constant_outputs:
            ctx.mark_non_differentiable(*[output[k] for k in self.constant_outputs])

    def apply(self, ctx, grads):
        fn = self.owners[0]
        tensors = ctx.saved_tensors
        needs = ctx.needs_input_grad[0]
        flags = needs if isinstance(needs, (tuple, list)) else [needs] * len(tensors)
        wrt = tuple(t.name for t, need in zip(fn.program.inputs, flags) if need and differentiable(t))
        if not wrt:
            return (None,)
        cotangents = [g if g is not None else torch.zeros(shape, dtype=_torch_dtype(t.dtype), device=tensors[0].device)
                      for g, t, shape in zip(grads, fn.program.outputs, _output_shapes(fn.program, tensors))
                      if differentiable(t)]
        computed = dict(zip(wrt, self.op(list(tensors), list(cotangents), ",".join(wrt))))
        return ([computed.get(t.name) for t in fn.program.inputs],)


def _backward_operator(name: str, owners: list) -> _Backward:
    """The custom operator running the vjp program, for the inputs named in its ``wrt`` string."""
    def run(inputs: list[torch.Tensor], cotangents: list[torch.Tensor], wrt: str) -> list[torch.Tensor]:
        return owners[0].run_backward(inputs, cotangents, tuple(wrt.split(",")))

    op = torch.library.custom_op(f"{name}_vjp", run, mutates_args=())

    def fake(inputs, cotangents, wrt):
        program = owners[0].program
        by_name = {t.name: (t, x) for t, x in zip(program.inputs, inputs)}
        return [torch.empty_like(by_name[n][1]) for n in wrt.split(",")]

    op.register_fake(fake)
    return _Backward(op, owners)
