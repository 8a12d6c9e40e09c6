"""Finds and loads blockfuse/_C.so, the torch binding (python/csrc), once per process.

The library registers the blockfuse::* operators through TORCH_LIBRARY blocks when it is loaded;
there is no Python extension module. Where it is looked for, in order:
  1. the environment variable BLOCKFUSE_TORCH_LIB (a path to the .so);
  2. importlib's view of `blockfuse._C` (works for `pip install .` and for editable installs,
     whose finder maps the installed file to that name);
  3. `_C.so` beside this file.
If none loads, `error` says why and every op raises it (blockfuse.nn.GatedMLP still runs its
plain-torch path on CPU tensors).
"""
import importlib.util
import os

import torch

loaded_from = None  # path of the library once loaded
error = None        # why it could not be loaded (str), or None


def _candidates():
    env = os.environ.get("BLOCKFUSE_TORCH_LIB")
    if env:
        yield env
        return
    try:
        spec = importlib.util.find_spec("blockfuse._C")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin and os.path.isfile(spec.origin):
        yield spec.origin
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_C.so")
    if os.path.isfile(here):
        yield here


def has_op(name):
    """Whether blockfuse::<name> is registered (a library built before an op existed lacks it)."""
    try:
        torch._C._dispatch_find_schema_or_throw(f"blockfuse::{name}", "")
        return True
    except RuntimeError:
        return False


def _already_registered():
    return has_op("gated_up")


def load():
    """Loads the library if it is not loaded yet; returns True when the ops are registered."""
    global loaded_from, error
    if loaded_from is not None:
        return True
    if _already_registered():  # e.g. loaded by hand through another path
        loaded_from = "(already registered)"
        error = None
        return True
    tried = []
    for path in _candidates():
        try:
            torch.ops.load_library(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        loaded_from, error = path, None
        return True
    error = ("the blockfuse torch library (blockfuse/_C.so) could not be loaded"
             + (": " + "; ".join(tried) if tried else ": it was not found (build it with "
                "`pip install --no-build-isolation .` from the repository root, or set "
                "BLOCKFUSE_TORCH_LIB to its path)"))
    return False


def require():
    """Raises RuntimeError with `error` when the library is not loaded."""
    if loaded_from is None and not load():
        raise RuntimeError(error)
