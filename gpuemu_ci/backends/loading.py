"""Turning a CallTarget into something the worker can call (runs inside the worker only).

- CALLABLE: "pkg.mod:func" (dotted attributes allowed: "pkg.mod:Class.method"), or "path/to/file.py:func";
  imported with the target's root first on sys.path (but never in place of the tool's own packages:
  import_order.py); called as `func(**inputs, **kwargs)`, or as `func(inputs, **kwargs)` when its one
  positional parameter is named `inputs` (upstream's convention).
- MODULE: upstream's `module = "pkg.mod"`: the function named like the op in that module (same calls).
- SCRIPT_PROCESS: a script run as a subprocess over upstream's JSON protocol (script_process.py).
- REFERENCE_SCRIPT: a .py file (relative to root) defining `reference(inputs: dict, **kwargs)`, upstream's
  reference-script contract, called in-process instead of one `python3 script` per case.
- OP_SCRIPT: a .py file defining `run(inputs: dict, **kwargs)` (or `op`), for `execution_mode =
  "script_based"`. Upstream's `client_side` / `daemon_orchestrated` modes are the CALLABLE kind: the gate
  imports and calls the op itself rather than waiting for a client to submit outputs.
- CUDA_KERNEL: see cuda.py.
Each target is loaded once per worker process and cached.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuemu_ci.backends.frameworks import get_bridge
from gpuemu_ci.backends.import_order import add_user_dir
from gpuemu_ci.backends.interface import CallTarget, TargetKind
from gpuemu_ci.backends.loaded import Loaded, LoadError

_OWN_DIR = str(Path(__file__).resolve().parent)


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    """The function's signature, or None where Python cannot tell (some builtins and extension functions)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def user_traceback(exc: BaseException, limit: int = 8) -> str:
    """The last `limit` frames that belong to user code (not gpuemu's worker or importlib), formatted."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(_OWN_DIR) and not f.filename.startswith("<frozen importlib")
    ]
    if not frames:
        return ""
    return "".join(traceback.format_list(frames[-limit:])).rstrip()


def describe_exception(exc: BaseException) -> str:
    """'Type: message' followed by the user frames of the traceback."""
    head = f"{type(exc).__name__}: {exc}".rstrip(": ").strip()
    tail = user_traceback(exc)
    return f"{head}\n{tail}" if tail else head


def _ensure_on_path(directory: Path) -> None:
    add_user_dir(str(directory))  # first, but never in place of the tool's own packages (import_order.py)


def _import_module(name: str, root: Path) -> Any:
    _ensure_on_path(root)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (name == missing or name.startswith(missing + ".")):
            raise LoadError(
                f"cannot import module {name!r}: no module named {missing!r} (searched {root} and sys.path)"
            ) from None
        raise LoadError(f"importing {name!r} failed: {describe_exception(exc)}") from None
    except BaseException as exc:  # SyntaxError, an exception or sys.exit() at module level
        raise LoadError(f"importing {name!r} failed: {describe_exception(exc)}") from None


def _load_file(path: Path) -> Any:
    if not path.is_file():
        raise LoadError(f"script not found: {path}")
    _ensure_on_path(path.parent)  # scripts often import helpers that sit next to them
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"_gpuemu_script_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot load {path} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling inside the script look themselves up here
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        raise LoadError(f"running {path} failed: {describe_exception(exc)}") from None
    return module


def _attribute(owner: Any, dotted: str, where: str) -> Any:
    obj = owner
    for part in dotted.split("."):
        if not hasattr(obj, part):
            raise LoadError(f"{where} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise LoadError(f"{where}:{dotted} is a {type(obj).__name__}, not a function")
    return obj


def load_callable(spec: str, root: Path) -> Any:
    """The function a `package.module:function` (or `script.py:function`) spec names, imported with `root` on
    sys.path: the one way every target and hook is loaded. Raises LoadError saying what is wrong."""
    module_part, sep, attr = spec.partition(":")
    if not sep or not module_part or not attr:
        raise LoadError(f"target {spec!r} must look like 'package.module:function'")
    if module_part.endswith(".py"):
        module = _load_file((root / module_part).resolve())
    else:
        module = _import_module(module_part, root)
    return _attribute(module, attr, module_part)


def takes_inputs_dict(fn: Callable[..., Any]) -> bool:
    """Upstream's calling convention, `f(inputs: dict, **kwargs)`: one positional parameter named `inputs`."""
    signature = signature_of(fn)
    if signature is None:
        return False
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    return len(positional) == 1 and positional[0].name == "inputs"


def _as_loaded(fn: Callable[..., Any], label: str) -> Loaded:
    """Called with the inputs as keyword arguments, or as one dict where the function takes `inputs`."""
    if takes_inputs_dict(fn):

        def invoke_dict(inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
            return fn(inputs, **kwargs)

        return Loaded(invoke_dict, label)

    def invoke(inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        return fn(**inputs, **kwargs)

    return Loaded(invoke, label, signature_of(fn))


def _load_callable(target: CallTarget) -> Loaded:
    return _as_loaded(load_callable(target.spec, target.root), target.spec)


def load_module_function(module_path: str, function: str, root: Path) -> Any:
    """Upstream's `module = "my_project.ops.matmul"`: the function named like the op (`function`) in that module;
    or, when the path is not a module, its last part as a function of the module above it."""
    try:
        module = _import_module(module_path, root)
    except LoadError:
        parent, _, last = module_path.rpartition(".")
        if not parent or not _is_module_missing(module_path, root):
            raise
        return _attribute(_import_module(parent, root), last, parent)
    found = getattr(module, function, None)
    if callable(found):
        return found
    public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))[:8]
    raise LoadError(
        f"module {module_path!r} has no function {function!r}: gpuemu-ci calls the function named like the op "
        f'in `module`; name another with module = "{module_path}:FUNCTION"'
        + (f" (it has {', '.join(public)})" if public else "")
    )


def _is_module_missing(name: str, root: Path) -> bool:
    _ensure_on_path(root)
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def load_script_function(root: Path, spec: str, names: tuple[str, ...]) -> Any:
    """The function a script defines: "script.py" (the first of `names` it has) or "script.py:function"."""
    path_part, _, explicit = spec.partition(":")
    module = _load_file((root / path_part).resolve())
    candidates = (explicit,) if explicit else names
    for name in candidates:
        fn = getattr(module, name, None)
        if callable(fn):
            return fn
    wanted = " or ".join(f"`{n}(inputs: dict, **kwargs)`" for n in candidates)
    raise LoadError(f"{path_part} defines no function {wanted}")


def _load_script(target: CallTarget, names: tuple[str, ...]) -> Loaded:
    fn = load_script_function(target.root, target.spec, names)

    def invoke(inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        return fn(inputs, **kwargs)

    return Loaded(invoke, target.spec)


_CACHE: dict[CallTarget, Loaded] = {}


def load_target(target: CallTarget) -> Loaded:
    """Import/load a target once per process; raises LoadError with a message meant for the user."""
    cached = _CACHE.get(target)
    if cached is not None:
        return cached
    try:
        get_bridge(target.framework)
    except Exception as exc:  # not installed, or no device/driver behind it (CuPy)
        raise LoadError(
            f"framework {target.framework.value!r} is not usable in the worker: {exc} "
            f"(install it, e.g. pip install 'gpuemu-ci[{target.framework.value}]')"
        ) from None
    if target.kind is TargetKind.CALLABLE:
        loaded = _load_callable(target)
    elif target.kind is TargetKind.MODULE:
        fn = load_module_function(target.spec, target.function, target.root)
        loaded = _as_loaded(fn, f"{target.spec} ({getattr(fn, '__qualname__', target.function)})")
    elif target.kind is TargetKind.SCRIPT_PROCESS:
        from gpuemu_ci.backends.script_process import load_script_process

        loaded = load_script_process(target)
    elif target.kind is TargetKind.REFERENCE_SCRIPT:
        loaded = _load_script(target, ("reference",))
    elif target.kind is TargetKind.OP_SCRIPT:
        loaded = _load_script(target, ("run", "op"))
    else:
        from gpuemu_ci.backends.cuda import load_kernel  # CuPy is imported only for kernels

        loaded = load_kernel(target)
    _CACHE[target] = loaded
    return loaded
