"""What this installation runs on: TVM version against the pin, patch series state, kernels.

``python -m kokoro_ext.build.environment`` prints the report; build manifests record it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
APPLY_SH = REPO_ROOT / "upstream" / "apply.sh"
TVM_PIN = REPO_ROOT / "upstream" / "tvm.pin"


@dataclass
class PatchState:
    """State of one patch of the series, as upstream/apply.sh --check reports it."""

    patch: str
    state: str


@dataclass
class Environment:
    tvm_version: str
    pinned_tvm_version: str | None
    patches: list[PatchState] = field(default_factory=list)
    patch_check_error: str | None = None
    native_library: str | None = None
    native_error: str | None = None

    @property
    def patches_complete(self) -> bool:
        """True when no patch of the series is still waiting to be applied to the wheel."""
        return self.patch_check_error is None and all(
            p.state != "not applied" for p in self.patches
        )


def read_pin(key: str = "TVM_WHEEL_VERSION") -> str | None:
    """A value from upstream/tvm.pin, or None outside a source checkout."""
    if not TVM_PIN.is_file():
        return None
    for line in TVM_PIN.read_text().splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1].strip()
    return None


def patch_states(python: str | Path = sys.executable) -> list[PatchState]:
    """Run ``apply.sh --check`` for an interpreter's wheel and parse its per-patch lines."""
    if not APPLY_SH.is_file():
        raise FileNotFoundError(f"{APPLY_SH} not found: not running from a source checkout")
    result = subprocess.run(
        [str(APPLY_SH), "--check", "--python", str(python)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode not in (0, 1):
        raise RuntimeError(result.stderr.strip() or result.stdout.strip())
    states = []
    for line in result.stdout.splitlines()[1:]:
        if line.startswith("  "):
            state, patch = line.strip().rsplit(None, 1)
            states.append(PatchState(patch=patch, state=state.strip()))
    return states


def check_patches(built: dict[str, str], here: dict[str, str], directory: Path) -> None:
    """ValueError naming the first TVM patch whose state differs between build and here."""
    for patch in sorted(set(built) | set(here)):
        was = built.get(patch, "not in the series then")
        now = here.get(patch, "not in this series")
        if was != now:
            hint = "run ./upstream/apply.sh, or " if now == "not applied" else ""
            raise ValueError(
                f"{directory} was built with TVM patch {patch} {was!r}, but here it is "
                f"{now!r}: the compiled stages come from another compiler than this one; "
                f"{hint}rebuild with `python -m kokoro_ext.build --out {directory}`"
            )


@functools.cache
def installed_patches() -> dict[str, str] | None:
    """Patch -> state of this interpreter's wheel; None outside a source checkout.

    apply.sh --check takes a second or two and the installed wheel does not change under
    a running process, so it runs once.
    """
    try:
        return {p.patch: p.state for p in patch_states()}
    except (OSError, RuntimeError):
        return None


def check_build_compiler(directory: str | Path) -> None:
    """ValueError if the build in ``directory`` came from another patch series than this
    checkout's wheel has: its stages are then not what this compiler makes (what validation
    and rebuilding compare against).  Loading a build does not need this: the patches
    change only the compiler."""
    directory = Path(directory)
    here = installed_patches()
    if here is not None:
        manifest = json.loads((directory / "manifest.json").read_text())
        check_patches(manifest.get("patches", {}), here, directory)


def describe() -> Environment:
    """Collect the environment report without raising."""
    env = Environment(
        tvm_version=importlib.metadata.version("apache-tvm"),
        pinned_tvm_version=read_pin(),
    )
    try:
        env.patches = patch_states()
    except (OSError, RuntimeError) as err:
        env.patch_check_error = str(err)
    try:
        from kokoro_ext.run import native

        env.native_library = str(native.load())
    except OSError as err:
        env.native_error = str(err)
    return env


def main() -> int:
    env = describe()
    pin = env.pinned_tvm_version
    print(f"TVM {env.tvm_version} (pinned: {pin or 'unknown'})")
    if pin and pin != env.tvm_version:
        print(f"  warning: this TVM is not the pinned {pin}; run ./bootstrap.sh")
    if env.patch_check_error:
        print(f"patch series: cannot check ({env.patch_check_error})")
    else:
        print("patch series:")
        for p in env.patches:
            print(f"  {p.state:<34} {p.patch}")
        if not env.patches_complete:
            print("  warning: patches missing; run ./upstream/apply.sh")
    print(f"native kernels: {env.native_library or env.native_error}")
    return 0 if env.patches_complete and env.native_library and pin == env.tvm_version else 1


if __name__ == "__main__":
    sys.exit(main())
