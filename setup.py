"""Builds the nibble-ort wheel: cargo builds libnibble_ort.so, which goes into the package with nibble_ort.h.

Plain setuptools rather than setuptools-rust: the library is no Python extension (it is loaded by ONNX Runtime and
by ctypes, never imported), so one ``py3-none-<platform>`` wheel serves every Python and the file keeps its own
name, where setuptools-rust's no-binding mode names it like a CPython extension and tags the wheel per CPython.

Environment:
  CARGO_BUILD_TARGET   cross-build, e.g. aarch64-unknown-linux-gnu (cargo reads it too); the wheel gets that
                       platform (linux_aarch64; scripts/build-wheel.sh then gives it its manylinux tag)
  NIBBLE_GLIBC         e.g. 2.28: link against that glibc version's symbols (cargo-zigbuild with zig, both from
                       PyPI), so the library loads on any glibc >= it; unset: this machine's glibc
  CARGO_TARGET_DIR     cargo's target directory (default <repo>/target)
  NIBBLE_CARGO_ALIAS   build-release: build the library within the selection the repository's scripts build
                       (.cargo/config.toml's alias: with the Llama driver and the chat server), so that a `pip
                       install .` after `cargo build-release` compiles nothing and leaves that build's library in
                       place; unset: `cargo build -p nibble-ort --lib` (the library alone, what a user needs).
                       Cargo unifies features per selection: a build of the other selection recompiles the library.
  CARGO                the cargo to run (default: cargo on PATH)
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
ARCHES = {"x86_64-unknown-linux-gnu": "x86_64", "aarch64-unknown-linux-gnu": "aarch64"}


def workspace_version() -> str:
    with open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8") as f:
        m = re.search(r'^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"', f.read(), re.M | re.S)
    if not m:
        raise RuntimeError("nibble-ort: no [workspace.package] version in Cargo.toml")
    return m.group(1)


def cargo_target() -> str | None:
    target = os.environ.get("CARGO_BUILD_TARGET") or None
    if target is not None and target not in ARCHES:
        raise RuntimeError(f"nibble-ort: CARGO_BUILD_TARGET={target} is not one of {', '.join(ARCHES)}")
    return target


class BuildWithCargo(build_py):
    """build_py, plus the library built by cargo and the C header, copied into the package."""

    def run(self) -> None:
        super().run()
        cargo = os.environ.get("CARGO", "cargo")
        if shutil.which(cargo) is None:
            raise RuntimeError(
                "nibble-ort: building the library needs Rust's cargo on PATH (install rustup from https://rustup.rs)"
            )
        target = cargo_target()
        glibc = os.environ.get("NIBBLE_GLIBC") or None
        alias = os.environ.get("NIBBLE_CARGO_ALIAS") or None
        cmd = [cargo, "build", "--release", "--locked", "-p", "nibble-ort", "--lib"]
        if alias is not None:
            if alias != "build-release" or target is not None or glibc is not None:
                raise RuntimeError(
                    f"nibble-ort: NIBBLE_CARGO_ALIAS={alias} is not supported: the one value is build-release, "
                    "for a native build (no CARGO_BUILD_TARGET, no NIBBLE_GLIBC)"
                )
            cmd = [cargo, alias, "--locked"]
        if glibc is not None:
            if not re.fullmatch(r"2\.\d+", glibc):
                raise RuntimeError(f"nibble-ort: NIBBLE_GLIBC={glibc} is not a glibc version like 2.28")
            target = target or f"{platform.machine()}-unknown-linux-gnu"
            cmd[1] = "zigbuild"
            cmd += ["--target", f"{target}.{glibc}"]
        print("nibble-ort: " + " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, cwd=ROOT, check=True)
        target_dir = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
        built = os.path.join(target_dir, *([target] if target else []), "release", "libnibble_ort.so")
        package = os.path.join(self.build_lib, "nibble_ort")
        os.makedirs(os.path.join(package, "include"), exist_ok=True)
        shutil.copyfile(built, os.path.join(package, "libnibble_ort.so"))
        shutil.copyfile(os.path.join(ROOT, "include", "nibble_ort.h"), os.path.join(package, "include", "nibble_ort.h"))


class PlatformWheel(bdist_wheel):
    """A py3-none-<platform> wheel: platform-specific (it holds a native library) but for any Python 3."""

    def finalize_options(self) -> None:
        target = cargo_target()
        if target is not None and self.plat_name is None:
            self.plat_name = f"linux_{ARCHES[target]}"
        super().finalize_options()

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class NativeDistribution(Distribution):
    """Holds a native library, so setuptools installs it as platform-specific (platlib, Root-Is-Purelib: false)."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    version=workspace_version(),
    distclass=NativeDistribution,
    cmdclass={"build_py": BuildWithCargo, "bdist_wheel": PlatformWheel},
)
