"""Which pip downloads a release wheel: the target's own (a local target), patchkeeper's, a pip or uv on
PATH; run with the user's own pip configuration (pip.conf, PIP_*), never one of patchkeeper's."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import Refused

# pip's environment variables and the uv ones that say the same, for uv fetching pip itself
# (uv reads no PIP_* variable and no pip.conf: https://docs.astral.sh/uv/reference/environment/).
_UV_FROM_PIP = {
    "PIP_INDEX_URL": "UV_INDEX_URL",
    "PIP_EXTRA_INDEX_URL": "UV_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS": "UV_FIND_LINKS",
    "PIP_NO_INDEX": "UV_NO_INDEX",
}
_HAS_PIP = "import importlib.util, sys; sys.exit(importlib.util.find_spec('pip') is None)"


@dataclass(frozen=True)
class Downloader:
    """A pip to run `download` with: the words before `download`, and what it is, for messages."""

    argv: tuple[str, ...]
    what: str
    env: tuple[tuple[str, str], ...] = ()  # added to the user's environment

    def command(self, args: list[str]) -> list[str]:
        return [*self.argv, "download", *args]


def has_pip(python: str) -> bool:
    """Whether `python` can import pip (a venv made by pipx, `uv tool` or `venv --without-pip` cannot)."""
    if python == sys.executable:
        return importlib.util.find_spec("pip") is not None
    try:
        return (
            subprocess.run(
                [python, "-c", _HAS_PIP], capture_output=True, stdin=subprocess.DEVNULL, timeout=60
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _uv_env() -> tuple[tuple[str, str], ...]:
    """The user's PIP_* index settings as uv's, where uv's own are not set: uv then fetches pip
    from where the user's pip would."""
    out = []
    for pip_name, uv_name in _UV_FROM_PIP.items():
        value = os.environ.get(pip_name)
        if value and uv_name not in os.environ:
            out.append((uv_name, " ".join(value.split()) if uv_name != "UV_NO_INDEX" else "1"))
    return tuple(out)


def tried(local_python: str | None) -> list[str]:
    """What `choose` looks for, in order, in words (for the error when none is there)."""
    where = [f"{local_python} (the target's interpreter)"] if local_python else []
    return [*where, f"{sys.executable} (patchkeeper's own)", "pip3 or pip on PATH", "uv on PATH"]


def choose(local_python: str | None) -> Downloader | None:
    """The first pip there is: the local target's interpreter's (the environment being repaired,
    installed with its own index configuration), patchkeeper's own, `pip3`/`pip` on PATH, else pip
    run by `uv` on PATH (`uv tool run --from pip`); None when there is none."""
    if local_python and has_pip(local_python):
        return Downloader((local_python, "-m", "pip"), f"the target's pip ({local_python} -m pip)")
    if has_pip(sys.executable):
        return Downloader((sys.executable, "-m", "pip"), f"patchkeeper's own pip ({sys.executable} -m pip)")
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return Downloader((found,), f"{found} (on PATH)")
    uv = shutil.which("uv")
    if uv:
        return Downloader(
            (uv, "tool", "run", "--python", sys.executable, "--from", "pip", "pip"),
            f"pip run by {uv} (on PATH)",
            _uv_env(),
        )
    return None


def shown_command(argv: list[str]) -> str:
    """A command for a message: the second and later `--platform X` (dozens of manylinux tags) left out."""
    out: list[str] = []
    more, i = 0, 0
    while i < len(argv):
        if argv[i] == "--platform" and i + 1 < len(argv):
            if "--platform" in out:
                more += 1
            else:
                out += argv[i : i + 2]
            i += 2
            continue
        out.append(argv[i])
        i += 1
    text = shlex.join(out)
    if more:
        first = shlex.join(out[out.index("--platform") : out.index("--platform") + 2])
        text = text.replace(first, f"{first} [and {more} more --platform]", 1)
    return text


@contextlib.contextmanager
def download(
    local_python: str | None, pip_args: list[str], spec: str, what: str, fallback: str
) -> Iterator[list[Path]]:
    """`pip download --no-deps --only-binary=:all:` of `spec` (`what` names the wheel sought) into a
    temporary directory removed after; refused naming the command tried, or what to install, and
    then `fallback` (where the user may put the wheel instead)."""
    downloader = choose(local_python)
    args = ["--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "--quiet", *pip_args]
    if downloader is None:
        by_hand = shlex.join(["pip", "download", *args, "-d", "DIR", spec])  # whole: to be copied and run
        raise Refused(
            f"no pip to download {what} with: none in " + ", ".join(tried(local_python)),
            f"install pip or uv where patchkeeper runs (`python3 -m pip --version` says whether there is "
            f"one), or download the wheel elsewhere (`{by_hand}`) and {fallback}",
        )
    with tempfile.TemporaryDirectory(prefix="patchkeeper-wheel-") as tmp:
        argv = downloader.command([*args, "-d", tmp, spec])
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **dict(downloader.env)},
            )
            said, code = proc.stderr, proc.returncode
        except OSError as exc:
            said, code = str(exc), -1
        got = sorted(Path(tmp).glob("*.whl"))
        if code != 0 or not got:
            last = [line for line in said.strip().splitlines() if not line.startswith("WARNING")][-1:]
            shown = shown_command(argv).replace(tmp, "DIR")
            raise Refused(
                f"no wheel of {what}: `{shown}` failed (exit {code}){': ' + last[0] if last else ''}",
                f"pip used your pip configuration (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS...): check it "
                f"reaches an index holding the wheel, or {fallback}",
            )
        yield got
