"""What the GPU runtime (``runtime/cuda.py``) and its host emulation (``runtime/cuda_emu.py``)
share: the rendered module and its stages, NVRTC's output for the module, the NVRTC check of
every module, the error buffer of ``mode="raise"``, and the compile cache entry.

Calls: host arrays in give host arrays out (``out=`` as on every target). Device arrays in (a
:class:`~cinnlite.runtime.device_array.DeviceArray`, or what the runtime reads in place: see
``_device_input`` of each runtime) give ``DeviceArray`` results; ``stream=`` and ``device=``
choose where the call runs (see :class:`GPUCall`).

NVRTC runs when something needs its output (the ``ptx`` stage, or the first run on a GPU), for
the architecture asked for. What it produced is added to the executable's cache entry, so a later
process that finds the entry on disk has the PTX and CUBIN without running NVRTC again; output of
another NVRTC version is compiled afresh.
"""
from __future__ import annotations

import os

import numpy as np

from ..codegen.cuda import CudaModule, Launch
from ..codegen.error_record import NO_POSITION, PER_CHECK
from ..errors import InputError
from ..ir.loopnest import LoweredProgram
from . import nvrtc
from .device_array import check_device_input, device_like
from .executable import Executable, host_array

def nvrtc_check_archs() -> tuple:
    """Architectures every compiled CUDA module is also built for with NVRTC (a check that the
    kernels compile for real GPUs), from the environment variable ``CINNLITE_NVRTC_CHECK``
    (e.g. ``sm_90,sm_80``); none by default."""
    value = os.environ.get("CINNLITE_NVRTC_CHECK", "")
    return tuple(a.strip() for a in value.split(",") if a.strip())


# -- the module in a cache entry ------------------------------------------------------------------


def module_fields(module: CudaModule) -> dict:
    """The launch plan of ``module`` as plain data for a cache entry (the source is a stage)."""
    launches = tuple((l.name, l.kernel, l.items, l.buffers, l.slots, l.ctypes, l.errors) for l in module.launches)
    return {"name": module.name, "launches": launches, "block": module.block, "num_checks": module.num_checks,
            "reported_values": tuple(sorted(module.reported_values))}


def module_from_fields(fields: dict, source: str) -> CudaModule:
    """The module that ``module_fields`` described, with its CUDA C ``source``."""
    launches = tuple(Launch(*launch) for launch in fields["launches"])
    return CudaModule(fields["name"], source, launches, fields["block"], fields["num_checks"],
                      frozenset(fields["reported_values"]))


def _image_fields(out: nvrtc.NvrtcOutput) -> dict:
    return {"nvrtc": nvrtc.version(), "ptx": out.ptx, "cubin": out.cubin, "log": out.log}


class GPUCall:
    """Where one call runs and what it gives back: ``stream`` (a CUDA stream handle as an int:
    0 or 1 the legacy default stream, 2 the per-thread one), ``device`` (the GPU's ordinal),
    ``device_results`` (outputs stay in device memory as DeviceArrays), and ``keep``: what the
    call holds until it returns (imported DLPack tensors)."""

    __slots__ = ("stream", "device", "device_results", "keep")

    def __init__(self, stream: int = 0, device: int = 0, device_results: bool = False):
        self.stream, self.device, self.device_results, self.keep = stream, device, device_results, []


def _call_option(name: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InputError(f"{name}= takes a non-negative int (a CUDA {'stream handle' if name == 'stream' else 'device ordinal'}), "
                         f"got {value!r}")
    return int(value)


class CUDABaseExecutable(Executable):
    """What the GPU and the emulated GPU share: the module, its stages, NVRTC's output for it
    and the error buffer."""

    def __init__(self, program, lowered: LoweredProgram, lowered_text: str, module: CudaModule,
                 deterministic: bool, pass_dumps=(), nvrtc_images: dict | None = None):
        """``nvrtc_images`` holds NVRTC's output per architecture from a cache entry."""
        self.module = module
        self.deterministic = deterministic
        self._nvrtc_images = dict(nvrtc_images or {})
        sources = {"graph": str(program), "lowered": lowered_text, "cuda": module.source}
        for name, dump in pass_dumps:
            sources.setdefault(f"lowered:{name}", dump)
        super().__init__(program, lowered, sources, {"ptx": lambda exe: exe.ptx()})
        for arch in nvrtc_check_archs():
            nvrtc.compile_cuda(module.source, arch, fast=True)

    def _ptx_arch(self) -> str:
        return nvrtc.DEFAULT_ARCH

    # -- calls with device arrays, streams and devices ---------------------------------------

    def run(self, inputs: dict, out=None, stream: int | None = None, device: int | None = None) -> dict:
        """As on every target, plus: inputs may be device arrays (then the outputs are
        DeviceArrays); ``stream=`` runs the call on that CUDA stream, ``device=`` on that GPU."""
        if not isinstance(inputs, dict):
            raise InputError("run() takes a dict of input name -> array")
        if stream is None and device is None and not any(device_like(v) for v in inputs.values()):
            return super().run(inputs, out)
        if out is not None:
            raise InputError("out= takes host arrays; a call given device arrays, stream= or device= returns "
                             "new DeviceArrays (or host arrays for host inputs)")
        return self._device_call(inputs, _call_option("stream", stream), _call_option("device", device))

    def __call__(self, out=None, stream=None, device=None, **inputs):
        """As on every target; ``stream=`` and ``device=`` as in ``run`` (a program with inputs
        of those names takes them as inputs, like ``out``)."""
        for key, value in (("stream", stream), ("device", device)):
            if value is not None and key in self._input_names:
                inputs[key] = value
        stream = None if "stream" in self._input_names else stream
        device = None if "device" in self._input_names else device
        if stream is None and device is None and not any(device_like(v) for v in inputs.values()):
            return super().__call__(out, **inputs)
        outs = self.run(inputs, out, stream, device)
        values = tuple(outs[b.name] for b in self.lowered.outputs)
        return values[0] if len(values) == 1 else values

    def _device_call(self, inputs: dict, stream: int | None, device: int | None) -> dict:
        self._check_input_names(inputs)
        call = self._new_call(inputs, stream, device)
        arrays = {}
        for name, shape, dtype in self._inputs:
            value = inputs[name]
            if device_like(value):
                arr = self._device_input(name, value, call)
                check_device_input(name, arr.shape, arr.dtype, shape, dtype, getattr(arr, "dl_strides", None))
                call.device_results = True
            else:
                arr = self._checked_input(name, shape, dtype, value)
            arrays[name] = arr
        try:
            plan, exe = self._shapes.plan_for(arrays, self), self
            if plan.specialised is not None:  # sizes a static build serves (an empty dimension)
                exe = plan.specialised
                plan = exe._shapes.plan_for(arrays, exe)
            return exe._run(arrays, plan, None, call)
        finally:
            for held in call.keep:
                held.release()

    def _new_call(self, inputs: dict, stream: int | None, device: int | None) -> GPUCall:
        """The call's stream and device (a runtime picks them from the inputs when not given)."""
        raise NotImplementedError

    def _device_input(self, name: str, value, call: GPUCall):
        """``value``, a device array, as the runtime reads it in place (with ``shape``,
        ``dtype`` and, where not C order for sure, ``dl_strides``); an InputError where this
        runtime cannot read it."""
        raise NotImplementedError

    def to_device(self, array, stream: int | None = None, device: int | None = None):
        """``array`` (host data) copied once into the target's memory, as a DeviceArray that
        calls take without copying it again (``stream=`` and ``device=`` as in ``run``)."""
        host = np.array(host_array(array, "to_device()'s array"), order="C", copy=True)
        return self._upload(host, _call_option("stream", stream) or 0, _call_option("device", device) or 0)

    def _upload(self, host: np.ndarray, stream: int, device: int):
        """A DeviceArray holding a copy of ``host`` (a C-ordered array of its own)."""
        raise NotImplementedError

    def ptx(self, arch: str | None = None) -> str:
        """PTX of the module from NVRTC, for ``arch`` (default: the GPU's, else sm_90)."""
        return self.nvrtc_output(arch or self._ptx_arch()).ptx

    def nvrtc_output(self, arch: str) -> nvrtc.NvrtcOutput:
        """NVRTC's output for ``arch``: from the cache entry where this NVRTC made it, else
        compiled now and added to the entry."""
        known = self._nvrtc_images.get(arch)
        if known is not None and tuple(known["nvrtc"]) == nvrtc.version():
            return nvrtc.NvrtcOutput(arch, known["ptx"], known["cubin"], known["log"])
        out = nvrtc.compile_cuda(self.module.source, arch)
        self._nvrtc_images[arch] = _image_fields(out)
        self._update_cache_entry()
        return out

    def cache_entry(self) -> dict | None:
        return {"lowered": self.lowered, "lowered_text": self._sources["lowered"], "cuda": self.module.source,
                "module": module_fields(self.module), "nvrtc_images": dict(self._nvrtc_images)}

    @property
    def _error_shape(self) -> tuple:
        """The error buffer's int64 slots: a ``PER_CHECK`` record per check (one at least)."""
        return max(1, self.module.num_checks), PER_CHECK.size

    @property
    def _error_bytes(self) -> int:
        """The error buffer's size in bytes, as the device allocates and copies it."""
        return self._error_shape[0] * PER_CHECK.nbytes

    def _new_error_buffer(self) -> np.ndarray:
        """A ``PER_CHECK`` record per check: no bad position yet, no value, the lock free."""
        errors = np.zeros(self._error_shape, np.int64)
        errors[:, PER_CHECK.index("position")] = NO_POSITION
        return errors

    def _first_failed_check(self, errors: np.ndarray):
        """(check id, position, value or None) of the lowest-numbered check that failed, or None.
        Checks run in program order, so that is the one the CPU, which stops at the first,
        reports."""
        position, value = PER_CHECK.index("position"), PER_CHECK.index("value")
        for check_id in range(self.module.num_checks):
            record = errors[check_id]
            if record[position] != NO_POSITION:
                found = int(record[value]) if check_id in self.module.reported_values else None
                return check_id, int(record[position]), found
        return None
