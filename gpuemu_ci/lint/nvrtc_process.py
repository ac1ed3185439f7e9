"""The NVRTC child process of the lint (lint/nvrtc.py starts it): loads libnvrtc, compiles one source to PTX, or
answers the library's version or supported archs. Run as `python -m gpuemu_ci.lint.nvrtc_process`; nothing
imports it, so the library is never loaded into the gate's own process."""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def _load(library: str) -> ctypes.CDLL:
    # libnvrtc loads libnvrtc-builtins by name: load it first from the same directory (the 12.x wheels set no
    # RUNPATH), so that it is found without LD_LIBRARY_PATH.
    for builtins in sorted(Path(library).parent.glob("libnvrtc-builtins.so*")):
        if ".alt." not in builtins.name:
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(library)


def _compile(library: str, source: Path, out: Path, options: Sequence[str]) -> int:
    lib = _load(library)
    program = ctypes.c_void_p()
    text = source.read_bytes()
    if lib.nvrtcCreateProgram(ctypes.byref(program), text, str(source).encode(), 0, None, None) != 0:
        print("nvrtc: could not create the program", file=sys.stderr)
        return 2
    encoded = [o.encode() for o in options]
    status = lib.nvrtcCompileProgram(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(program, log)
    sys.stderr.write(log.value.decode("utf-8", "replace"))
    if status != 0:
        return 1
    lib.nvrtcGetPTXSize(program, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(program, ptx)
    out.write_bytes(ptx.value)
    return 0


def _version(library: str) -> str:
    lib = _load(library)
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def _archs(library: str) -> list[str]:
    lib = _load(library)
    count = ctypes.c_int()
    lib.nvrtcGetNumSupportedArchs(ctypes.byref(count))
    archs = (ctypes.c_int * count.value)()
    lib.nvrtcGetSupportedArchs(archs)
    return [f"sm_{a}" for a in archs]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m gpuemu_ci.lint.nvrtc_process --library LIB (--version | --archs | SOURCE --out FILE
    [OPTIONS])`: loads NVRTC in this process only and prints its version or archs, or compiles SOURCE to PTX
    in FILE; exit 2 when the library cannot be loaded."""
    parser = argparse.ArgumentParser(prog="python -m gpuemu_ci.lint.nvrtc")
    parser.add_argument("--library", required=True)
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--archs", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("source", nargs="?", type=Path)
    parser.add_argument("options", nargs="*")
    args = parser.parse_args(argv)
    try:
        if args.version:
            print(_version(args.library))
            return 0
        if args.archs:
            print(json.dumps(_archs(args.library)))
            return 0
        if args.source is None or args.out is None:
            parser.error("a source and --out are needed")
        return _compile(args.library, args.source, args.out, args.options)
    except OSError as exc:
        print(f"nvrtc: cannot load {args.library}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
