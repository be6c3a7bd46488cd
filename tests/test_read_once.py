"""A command reads its inputs once: the apply path (stacks.resolve, stack_change,
refuse_shared_role_files, the plan) loads each patch set of the workspace from disk once per command."""

from __future__ import annotations

from collections import Counter

import pytest

from patchkeeper.cli import main
from patchkeeper.patchset import patchset


def _loads(env, monkeypatch, *args: str) -> Counter[str]:
    """The patch sets read from disk while `patchkeeper args` runs in this process, and how often."""
    counted: Counter[str] = Counter()
    real = patchset.load

    def load(root, name):
        counted[name] += 1
        return real(root, name)

    monkeypatch.setattr(patchset, "load", load)
    with pytest.raises(SystemExit) as done:
        main(["-w", str(env.root), *args])
    assert done.value.code == 0
    return counted


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_switch_reads_each_patch_set_once(baselined, tmp_path, monkeypatch, dry_run):
    env = baselined
    (tmp_path / "extra.patch").write_text(
        "diff --git a/sglang/extra.py b/sglang/extra.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/sglang/extra.py\n@@ -0,0 +1 @@\n+EXTRA = 1\n"
    )
    env.pk("import", "extra", str(tmp_path / "extra.patch"))  # in no group: it stays applied
    env.pk("apply", "extra", "--no-verify")
    env.pk("apply", "ddtree", "--no-verify")  # then nextn, of the same group: a switch
    counted = _loads(env, monkeypatch, "apply", "nextn", "--no-verify", *(["--dry-run"] if dry_run else []))
    assert counted["nextn"] == 1 and counted["ddtree"] == 1 and counted["extra"] == 1, counted
    assert max(counted.values()) == 1, counted
