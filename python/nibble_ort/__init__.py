"""nibble: fast INT4 (and 2/8-bit) MatMulNBits for ONNX Runtime, as a Python package.

The package holds one compiled library, ``libnibble_ort.so``, which is both an ONNX Runtime custom-op library and a
plugin execution provider (ORT >= 1.24). Typical use::

    import onnxruntime as ort
    import nibble_ort

    so = ort.SessionOptions()
    nibble_ort.register_custom_ops(so)                      # any ORT >= 1.17
    # or: nibble_ort.add_execution_provider(so)             # ORT >= 1.24: ORT frees the original weights
    sess = ort.InferenceSession("model.onnx", so)

Every ``MatMulNBits`` node (``com.microsoft`` unless ``override_com_microsoft=False``, and domain ``nibble``) then
runs on nibble's kernels, except the ``com.microsoft`` nodes ORT's own kernel runs faster on this CPU (today: on
SME2 CPUs whose streaming vector is not 256 or 512 bits, those of its KleidiAI SME2 kernels; ``override_com_microsoft=True`` takes them too). ``nibble_ort.info()`` (or ``python -m nibble_ort``) says which kernels this CPU gets.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import json
import os
from typing import Any

__all__ = [
    "EP_NAME",
    "SETTINGS",
    "__version__",
    "add_execution_provider",
    "get_include_path",
    "get_library_path",
    "info",
    "info_text",
    "register_custom_ops",
]

try:
    __version__ = importlib.metadata.version("nibble-ort")
except importlib.metadata.PackageNotFoundError:  # imported from a source tree
    __version__ = "unknown"

#: The execution provider's name (``OrtEpDevice.ep_name``).
EP_NAME = "NibbleExecutionProvider"
#: The name the EP library is registered under by :func:`add_execution_provider`.
EP_REGISTRATION_NAME = "nibble"

#: The settings, as keyword arguments of the helpers: name -> (session config key, what it means).
SETTINGS: dict[str, tuple[str, str]] = {
    "override_com_microsoft": (
        "nibble.override_com_microsoft",
        "unset (default): also serve com.microsoft::MatMulNBits, replacing ORT's own kernel wherever nibble is faster "
        "on this CPU (on SME2 CPUs with a streaming vector other than 256 or 512 bits ORT keeps the nodes its KleidiAI SME2 "
        "kernels run); True: every com.microsoft "
        "node; False: only domain nibble",
    ),
    "accuracy_level_default": (
        "nibble.accuracy_level_default",
        "what accuracy_level 0 (unset) means: 4 (default, int8 activations) or 1, 2, 3 (fp32 path)",
    ),
    "activation_quant": (
        "nibble.activation_quant",
        "the int8 path's activation numerics: 'block' (default: per block, more accurate) or 'row' (per row, "
        "ORT-arm64's numerics, fewer instructions)",
    ),
}

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBRARY = "libnibble_ort.so"


def get_library_path() -> str:
    """Absolute path of ``libnibble_ort.so`` in this package (for ``register_custom_ops_library`` and the like)."""
    path = os.path.join(_HERE, _LIBRARY)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"nibble_ort: {path} is missing: the package was not built with its library "
            "(install it with `pip install .` from the repository, or a nibble-ort wheel)"
        )
    return path


def get_include_path() -> str:
    """Directory holding ``nibble_ort.h`` (the C declaration of what the library exports)."""
    return os.path.join(_HERE, "include")


def _config_values(settings: dict[str, Any]) -> dict[str, str]:
    """The settings as ``{setting name: string value}``; an unknown name or a value of the wrong kind is a
    ``TypeError`` / ``ValueError`` naming it (the library itself checks the values again)."""
    out: dict[str, str] = {}
    for name, value in settings.items():
        if name not in SETTINGS:
            raise TypeError(
                f"nibble_ort: unknown setting {name!r}; the settings are "
                + ", ".join(f"{n} ({doc})" for n, (_, doc) in SETTINGS.items())
            )
        if value is None:
            continue
        if name == "override_com_microsoft":
            if not isinstance(value, bool):
                raise TypeError(f"nibble_ort: override_com_microsoft must be True or False, not {value!r}")
            out[name] = "1" if value else "0"
        elif name == "activation_quant":
            if value not in ("block", "row"):
                raise ValueError(f"nibble_ort: activation_quant must be 'block' or 'row', not {value!r}")
            out[name] = value
        else:  # accuracy_level_default
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4:
                raise ValueError(
                    f"nibble_ort: accuracy_level_default must be 1, 2, 3 (fp32 path) or 4 (int8 path), not {value!r}"
                )
            out[name] = str(value)
    return out


def register_custom_ops(session_options: Any, **settings: Any) -> Any:
    """Registers nibble as a custom-op library on ``session_options`` (an ``onnxruntime.SessionOptions``) with the
    given settings (see :data:`SETTINGS`; unset ones keep their defaults), and returns the options.

    The settings become session config entries, set before the library is registered as the library requires.
    Registering twice on one ``SessionOptions`` is an error (from the library, naming nibble)."""
    for name, value in _config_values(settings).items():
        session_options.add_session_config_entry(SETTINGS[name][0], value)
    session_options.register_custom_ops_library(get_library_path())
    return session_options


def _ep_devices(ort: Any) -> list:
    """Registers the library as an execution-provider library with ``ort`` (once per process) and returns its
    devices."""
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        ort.register_execution_provider_library(EP_REGISTRATION_NAME, get_library_path())
        devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise RuntimeError(f"nibble_ort: {get_library_path()} registered no {EP_NAME} device")
    return devices


def add_execution_provider(session_options: Any, **settings: Any) -> Any:
    """Adds nibble's execution provider (ORT >= 1.24) to ``session_options`` with the given settings as provider
    options (see :data:`SETTINGS`), registering the library with onnxruntime first if this process has not, and
    returns the options. ORT then hands each MatMulNBits weight to nibble and frees its own copy.

    Create the session without ``providers=`` (they come from the options) and with ``enable_fallback=0``, or
    a failed session is silently retried on ORT's CPU EP alone."""
    options = _config_values(settings)
    import onnxruntime as ort

    ep_min = info()["ort"]["ep_min"]  # the EP API version the library requests
    if _major_minor(ort.__version__) < _major_minor(ep_min):
        raise RuntimeError(
            f"nibble_ort: the execution provider needs onnxruntime >= {ep_min}, this is {ort.__version__}; "
            "use nibble_ort.register_custom_ops(session_options) instead"
        )
    session_options.add_provider_for_devices(_ep_devices(ort), options)
    return session_options


def _major_minor(version: str) -> tuple[int, ...]:
    """Major and minor of a version: "1.24.4" -> (1, 24); a part that is not a number ends it."""
    out = []
    for part in version.split(".")[:2]:
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _nibble_info_fn() -> Any:
    """The library's NibbleInfo, loaded once (ctypes; the library needs no onnxruntime for it)."""
    fn = ctypes.CDLL(get_library_path()).NibbleInfo
    fn.restype = ctypes.c_char_p
    fn.argtypes = [ctypes.c_int]
    return fn


def _native_info(fmt: int) -> str:
    out = _nibble_info_fn()(fmt)
    if out is None:
        raise RuntimeError(f"nibble_ort: {get_library_path()} could not report what it detects (NibbleInfo)")
    return out.decode()


def info() -> dict:
    """What nibble detects and chooses on this CPU: ``version``, ``arch``, ``ort`` (``custom_op_min``, ``ep_min``,
    ``tested``), ``cpu_features``, ``rungs`` (ISA rungs, best last), ``ladder`` (the kernel families this CPU can run,
    in the order tried), ``selection`` (the family each ``path`` / ``bits`` / ``block_size`` gets). ``NIBBLE_ISA``
    and ``NIBBLE_FAMILIES`` in the environment apply, as in a session. Needs no onnxruntime."""
    return json.loads(_native_info(1))


def info_text() -> str:
    """:func:`info` for a person (what ``python -m nibble_ort`` and the ``nibble-info`` tool print)."""
    return _native_info(0)
