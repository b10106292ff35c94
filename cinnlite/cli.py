"""The ``cinnlite`` command line.

- ``cinnlite --version``: print the version of cinnlite.
- ``cinnlite demo``: compile, check and time a message-passing step; print its hot loop.
- ``cinnlite run MODEL.onnx --input NAME=FILE.npy ... [--target T] [--output-dir DIR] [--explain]``: import an
  ONNX model, compile it, run it on the given arrays, print (and save) the outputs.
- ``cinnlite emit MODEL.onnx --stage STAGE [--target T]``: print one compilation stage, or the
  graph as Graphviz text with ``--stage dot``.

A mistake on the user's side (a missing file, a bad model, a wrong input) is reported as one
line on stderr with a non-zero exit status, never as a traceback.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

from . import __version__
from .backends.registry import BACKENDS, DEFAULT_TARGET, backends_with_stage, get_backend

TARGETS = BACKENDS

EXIT_ERROR = 1   # the command could not do what was asked
EXIT_USAGE = 2   # the command line itself is wrong (argparse's convention)


class UsageError(Exception):
    """A command line that cannot be carried out; reported as one line."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line error reports."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cinnlite", description="cinnlite: a compiler for gather/scatter operators")
    parser.add_argument("--version", action="version", version=f"cinnlite {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{demo,run,emit}", parser_class=_Parser)
    sub.add_parser("demo", help="compile, check and time a message-passing step; print its hot loop",
                   description="Compile one message-passing step of a graph neural network (a gather, a "
                               "multiply and a scatter-add) for the CPU; print its graph, the loop nest of its "
                               "hot kernel and the optimised LLVM IR of its hot loop; check it against numpy and "
                               "time it beside numpy and PyTorch (where installed); and check a small graph of "
                               "every operator against numpy.")

    run = sub.add_parser(
        "run", help="run an ONNX model on arrays from .npy files",
        description="Import an ONNX model, compile it for a target, run it on the given input arrays and "
                    "print the outputs (and save them as .npy files with --output-dir). Inputs whose "
                    "shape the model leaves symbolic take the shape of their file.")
    run.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    run.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE",
                     help="a graph input and the .npy file (or ONNX TensorProto .pb file) holding its value; "
                          "repeat for each input")
    run.add_argument("--target", "-t", choices=TARGETS, default=DEFAULT_TARGET,
                     help=f"compile target (default: {DEFAULT_TARGET})")
    run.add_argument("--output-dir", "-o", metavar="DIR", help="save each output as DIR/<output name>.npy")
    run.add_argument("--explain", action="store_true",
                     help="print which node runs in cinnlite and which on onnxruntime, and why")

    emit = sub.add_parser(
        "emit", help="print a compilation stage of an ONNX model",
        description="Import an ONNX model, compile it and print one stage of the compilation: "
                    f"{_stages_by_target()}; dot prints the graph as Graphviz text (view it with `dot -Tsvg`).")
    emit.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    emit.add_argument("--stage", "-s", default="graph", metavar="STAGE",
                      help=f"one of {', '.join(emit_stages())} (default: graph)")
    emit.add_argument("--target", "-t", choices=TARGETS, default=None,
                      help=f"compile target (default: the first of {', '.join(TARGETS)} that has the stage)")
    emit.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                      help="a static shape for a graph input the model leaves symbolic (without it, a "
                           "symbolic dimension stays a symbol); repeat as needed")
    return parser


def emit_stages() -> tuple:
    """Every stage ``emit`` prints: ``dot``, then each target's stages."""
    return ("dot",) + tuple(dict.fromkeys(stage for name in TARGETS for stage in get_backend(name).stages))


def _stages_by_target() -> str:
    """``graph, lowered, ... on the cpu target; ... on the cuda and cuda-emu targets``."""
    groups: dict = {}
    for name in TARGETS:
        groups.setdefault(get_backend(name).stages, []).append(name)
    return "; ".join(f"{', '.join(stages)} on the {' and '.join(names)} target{'s' * (len(names) > 1)}"
                     for stages, names in groups.items())


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from .demo import main as demo_main

        return demo_main()
    command = {"run": cmd_run, "emit": cmd_emit}[args.command]
    from .errors import CinnliteError

    try:
        return command(args)
    except (UsageError, CinnliteError) as exc:
        return _fail(args.command, exc)
    except KeyboardInterrupt:
        return 130


def _fail(command: str, exc: BaseException) -> int:
    message = " ".join(str(exc).split())   # one line, whatever the exception's text holds
    print(f"cinnlite {command}: error: {message}", file=sys.stderr)
    return EXIT_ERROR


# -- run ----------------------------------------------------------------------------------------


def cmd_run(args) -> int:
    import numpy as np

    import cinnlite as cl
    from .frontend.onnx import graph_inputs, load_model

    model = load_model(args.model)
    declared = graph_inputs(model)
    arrays = {}
    for spec in args.input:
        name, path = _split_assignment(spec, [d.name for d in declared], "--input", "NAME=FILE")
        if name in arrays:
            raise UsageError(f"--input {name} is given twice")
        arrays[name] = _load_array(name, path)
    known = {d.name for d in declared}
    unknown = [n for n in arrays if n not in known]
    if unknown:
        raise UsageError(f"the model has no input {unknown[0]!r}; its inputs: {_describe(declared)}")
    missing = [d.name for d in declared if d.name not in arrays]
    if missing:
        raise UsageError(f"no --input for {', '.join(repr(n) for n in missing)}; the model's inputs: "
                         f"{_describe(declared)}")
    # The session imports the nodes cinnlite supports for these arrays' shapes and runs the rest
    # on onnxruntime.
    session = cl.onnx.InferenceSession(model, target=args.target)
    results = dict(zip([o.name for o in session.get_outputs()], session.run(None, arrays)))
    if args.explain:
        print(session.explain())

    if args.output_dir:
        try:
            os.makedirs(args.output_dir, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create output directory {args.output_dir!r}: {exc.strerror}") from None
    files = _output_files(list(results))
    with np.printoptions(threshold=200, edgeitems=4):
        for name, value in results.items():
            print(f"{name}: {value.dtype.name}{list(value.shape)}")
            print(np.array2string(value, separator=", "))
            if args.output_dir:
                path = os.path.join(args.output_dir, files[name])
                try:
                    np.save(path, value, allow_pickle=False)
                except OSError as exc:
                    raise UsageError(f"cannot write {path!r}: {exc.strerror}") from None
                print(f"-> {path}")
    return 0


def _split_assignment(spec: str, names, option: str, form: str):
    # Prefer a split that names a known input, so that names holding '=' still work.
    for name in sorted(names, key=len, reverse=True):
        if spec.startswith(name + "=") and len(spec) > len(name) + 1:
            return name, spec[len(name) + 1:]
    name, eq, value = spec.partition("=")
    if not eq or not name or not value:
        raise UsageError(f"{option} {spec!r} is not of the form {form}")
    return name, value


def _load_array(name: str, path: str):
    import numpy as np

    if not os.path.isfile(path):
        reason = "it is a directory" if os.path.isdir(path) else "no such file"
        raise UsageError(f"input {name!r}: cannot read {path!r}: {reason}")
    if path.endswith(".pb"):
        from .frontend.onnx import load_tensor

        return load_tensor(path, what=f"input {name!r}")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as exc:
        raise UsageError(f"input {name!r}: cannot read {path!r}: {exc.strerror}") from None
    if magic.startswith(b"PK"):
        raise UsageError(f"input {name!r}: {path!r} is an .npz archive; give one .npy file per input")
    if magic != b"\x93NUMPY":
        raise UsageError(f"input {name!r}: {path!r} is not a .npy file (save arrays with numpy.save)")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        reason = "it holds Python objects" if "pickle" in str(exc) else " ".join(str(exc).split())
        raise UsageError(f"input {name!r}: cannot load {path!r} ({reason})") from None


def _describe(declared) -> str:
    return ", ".join(f"{d.name}: {d.dtype}{_fmt_dims(d.shape)}" for d in declared) or "none"


def _fmt_dims(shape) -> str:
    if shape is None:
        return "[?]"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _output_files(names) -> dict:
    """A distinct, safe file name for every output name."""
    files, taken = {}, set()
    for name in names:
        base = re.sub(r"[^A-Za-z0-9_.\-]", "_", name).strip(".") or "output"
        stem, k = base, 1
        while stem.lower() in taken:
            stem, k = f"{base}_{k}", k + 1
        taken.add(stem.lower())
        files[name] = stem + ".npy"
    return files


# -- emit ---------------------------------------------------------------------------------------


def cmd_emit(args) -> int:
    import cinnlite as cl
    from .frontend.onnx import graph_inputs, import_onnx, load_model

    stage, stages = args.stage, emit_stages()
    if stage not in stages and not stage.startswith("lowered:"):
        raise UsageError(f"unknown stage {stage!r}; stages: {', '.join(stages)}")
    target = args.target or (backends_with_stage(stage) or [DEFAULT_TARGET])[0]
    offered = get_backend(target).stages
    if stage in stages and stage != "dot" and stage not in offered:
        raise UsageError(f"target {target!r} has no stage {stage!r}; its stages: {', '.join(offered)}, dot")
    model = load_model(args.model)
    declared = {d.name for d in graph_inputs(model)}
    shapes = {}
    for spec in args.shape:
        name, dims = _split_assignment(spec, declared, "--shape", "NAME=D0,D1,...")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(",") if d.strip() != "") if dims.strip() != "()" else ()
        except ValueError:
            raise UsageError(f"--shape {spec!r}: {dims!r} is not a list of integers such as 2,3") from None
    imported = import_onnx(model, shapes=shapes)
    if stage == "dot":
        print(imported.program.to_dot())
        return 0
    exe = cl.compile(imported.program, target=target, dump_passes=stage.startswith("lowered:"))
    if stage not in exe.stages:
        raise UsageError(f"target {target!r} produced no stage {stage!r}; its stages: {', '.join(exe.stages)}")
    print(exe.source(stage))
    return 0


if __name__ == "__main__":
    sys.exit(main())
