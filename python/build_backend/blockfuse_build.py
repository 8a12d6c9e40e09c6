"""pip's entry point into the build (pyproject.toml: build-backend): checks what the build needs
before anything is downloaded or compiled, then hands every hook to scikit-build-core.

The build compiles the torch binding against the torch the user runs, so it needs that torch
importable, which pip's build isolation prevents (an isolated build sees only its own build
requirements; listing torch there would download a second, possibly different, torch). Hence the one
supported command, as for flash-attn:

    python3 -m pip install --no-build-isolation -v .

and, when torch cannot be imported, an error at the first hook pip calls that says what to type.
What an isolated build would have installed (scikit-build-core; cmake or ninja when the machine's
are missing or too old) is installed with `pip --target` into .deps/python-build, beside the CUTLASS
headers scripts/deps puts in .deps/cutlass (also fetched here when absent): the user's environment
is left as it was.
"""
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DEPS = os.path.join(ROOT, ".deps", "python-build")
SKBUILD_REQ = "scikit-build-core>=0.10"
CUTLASS_REQ = "nvidia-cutlass==4.2.0.0"  # the version scripts/deps installs
CUTLASS_HEADER = os.path.join(ROOT, ".deps", "cutlass", "cutlass_library", "source", "include", "cutlass",
                              "version.h")
COMMAND = "python3 -m pip install --no-build-isolation -v ."


class BuildError(SystemExit):
    """Ends the hook with a message and exit status 1 (pip prints the message, not a traceback)."""

    def __init__(self, lines):
        bar = "=" * 78
        super().__init__("\n".join(["", bar] + ["blockfuse: " + line if i == 0 else "  " + line
                                                for i, line in enumerate(lines)] + [bar, ""]))


def _say(msg):
    print("blockfuse: " + msg, file=sys.stderr, flush=True)


def _isolated():
    # pip puts its isolated environment on sys.path (pip-build-env-*); `python -m build` runs the
    # hooks in a venv (build-env-*).
    return any("pip-build-env" in p for p in sys.path) or "build-env-" in sys.prefix


def _torch_outside():
    """Where the interpreter that started the build finds torch, seen from inside an isolated build
    (the same interpreter without pip's overlay, or the base interpreter of `build`'s venv)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    probe = "import importlib.util as u; s = u.find_spec('torch'); print(s.origin if s else '')"
    for exe in dict.fromkeys([sys.executable, getattr(sys, "_base_executable", sys.executable)]):
        try:
            out = subprocess.run([exe, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0 and out.stdout.strip():
            return exe, os.path.dirname(out.stdout.strip())
    return None


def _check_torch():
    if importlib.util.find_spec("torch") is not None:
        return
    if _isolated():
        found = _torch_outside()
        if found:
            raise BuildError([
                "the build cannot see torch: pip's build isolation hides the installed one",
                f"({found[1]}, used by {found[0]}), and blockfuse must compile against that torch.",
                "Build without isolation:",
                f"    {COMMAND}",
            ])
        raise BuildError([
            "torch is not installed, and the build compiles against it.",
            "Install the torch for your CUDA first (https://pytorch.org/get-started/locally/), then build",
            "without isolation (an isolated build cannot see the installed torch):",
            "    python3 -m pip install torch",
            f"    {COMMAND}",
        ])
    raise BuildError([
        f"torch is not importable by {sys.executable}, and the build compiles against it.",
        "Install the torch for your CUDA first (https://pytorch.org/get-started/locally/), then build:",
        "    python3 -m pip install torch",
        f"    {COMMAND}",
        "(use the pip of the Python that has torch: `python3 -m pip`, not a `pip` of another Python)",
    ])


def _pip_target(what, target, reqs):
    _say(f"{what}: pip install --target {os.path.relpath(target, ROOT)} {' '.join(reqs)}")
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
           "--upgrade", "--target", target] + list(reqs)
    if what == "CUTLASS headers":
        cmd.insert(4, "--no-deps")
    if subprocess.run(cmd).returncode != 0:
        raise BuildError([
            f"could not install {' '.join(reqs)} (no package index?). Install it into this Python",
            f"(python3 -m pip install {' '.join(reqs)}) and run again:",
            f"    {COMMAND}",
        ])


def _use_build_deps():
    if os.path.isdir(BUILD_DEPS) and BUILD_DEPS not in sys.path:
        sys.path.insert(0, BUILD_DEPS)
        os.environ["PATH"] = os.path.join(BUILD_DEPS, "bin") + os.pathsep + os.environ.get("PATH", "")
        importlib.invalidate_caches()


def _backend():
    """scikit-build-core's hooks: the installed one, else one installed into .deps/python-build."""
    _use_build_deps()
    if importlib.util.find_spec("scikit_build_core") is None:
        _pip_target("scikit-build-core is not installed", BUILD_DEPS, [SKBUILD_REQ])
        _use_build_deps()
    import scikit_build_core.build as backend
    return backend


def _prepare(config_settings, editable=False):
    """Everything a build needs, in the order that fails fastest; returns scikit-build-core's hooks."""
    _check_torch()
    backend = _backend()
    get_requires = backend.get_requires_for_build_editable if editable else backend.get_requires_for_build_wheel
    missing = [r for r in get_requires(config_settings) if not r.startswith("scikit-build-core")]
    if missing:  # cmake >= 3.25 or ninja absent here: what an isolated build would have installed
        _pip_target("build tools", BUILD_DEPS, missing)
        _use_build_deps()
    cmake_args = os.environ.get("CMAKE_ARGS", "") + " " + " ".join(
        f"{k}={v}" for k, v in (config_settings or {}).items())
    if not os.path.isfile(CUTLASS_HEADER) and "CUTLASS_DIR" not in cmake_args:
        _pip_target("CUTLASS headers", os.path.join(ROOT, ".deps", "cutlass"), [CUTLASS_REQ])
    return backend


def _announce():
    archs = os.environ.get("BLOCKFUSE_CUDA_ARCHS", "80;90")
    _say(f"compiling the CUDA kernels for BLOCKFUSE_CUDA_ARCHS={archs} (machine code per entry: 80 = "
         "Ampere/Ada, 90 = Hopper; torch's own CUDA architecture messages during the build do not apply). "
         "The default 80;90 builds in about 7 min on 2 cores; BLOCKFUSE_CUDA_ARCHS=90 alone in about "
         "1-1.5 min on 16 cores; pip shows the progress with -v.")


# ---- PEP 517 / 660 hooks --------------------------------------------------------------------------
def get_requires_for_build_wheel(config_settings=None):
    _check_torch()  # the first hook of an isolated build: fail before anything is downloaded
    return [SKBUILD_REQ]


def get_requires_for_build_editable(config_settings=None):
    _check_torch()
    return [SKBUILD_REQ]


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _prepare(config_settings).prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _prepare(config_settings, editable=True).prepare_metadata_for_build_editable(
        metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    backend = _prepare(config_settings)
    _announce()
    return backend.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    backend = _prepare(config_settings, editable=True)
    _announce()
    return backend.build_editable(wheel_directory, config_settings, metadata_directory)


def get_requires_for_build_sdist(config_settings=None):
    return [SKBUILD_REQ]


def build_sdist(sdist_directory, config_settings=None):
    return _backend().build_sdist(sdist_directory, config_settings)
