"""A real git checkout laid out like sglang's source (python/sglang/...), built from the real package."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# what the checkout holds, relative to site-packages: enough of sglang to edit, small enough to be quick
TREE = ("sglang/srt/speculative", "sglang/version.py", "sglang/srt/arg_groups/speculative_hook.py")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test Author")
    git(path, "config", "user.email", "author@example.test")
    git(path, "config", "commit.gpgsign", "false")
    return path


@dataclass
class Checkout:
    root: Path

    @property
    def pkg(self) -> Path:
        return self.root / "python"

    def git(self, *args: str) -> str:
        return git(self.root, *args)


def make_checkout(site: Path, dest: Path) -> Checkout:
    """v0.5.23 = the real files; branch `feature` edits three, adds one, deletes one, chmods one."""
    co = Checkout(init_repo(dest))
    for rel in TREE:
        src, dst = site / rel, co.pkg / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    (co.root / "README.md").write_text("sglang source\n")
    co.git("add", "-A")
    co.git("commit", "-qm", "v0.5.23")
    co.git("tag", "v0.5.23")
    co.git("checkout", "-qb", "feature")
    spec = co.pkg / "sglang/srt/speculative/spec_info.py"
    spec.write_text(
        spec.read_text().replace("    DFLASH = auto()\n", "    DFLASH = auto()\n    FEATURE = auto()\n")
    )
    hook = co.pkg / "sglang/srt/arg_groups/speculative_hook.py"
    hook.write_text(hook.read_text() + "\n# feature: no trailing newline")
    ver = co.pkg / "sglang/version.py"
    ver.write_text(ver.read_text() + "__feature__ = True\n")
    (co.pkg / "sglang/srt/speculative/feature_utils.py").write_text("def feature() -> int:\n    return 42\n")
    (co.pkg / "sglang/srt/speculative/spec_utils.py").unlink()
    (co.pkg / "sglang/srt/speculative/spec_registry.py").chmod(0o755)
    (co.root / "README.md").write_text("sglang source, with a feature\n")  # outside python/: not recorded
    co.git("add", "-A")
    co.git("commit", "-qm", "feature")
    return co
