"""Nothing read from a patch set reaches a terminal raw: a diff path or a patch file name with a control
character is refused (no real package has one), and what `check` and `show` print (a file of a patch
set's directory, a report's paths and problems) has its control characters escaped, as `apply` and
errors do."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from patchkeeper.change import stacks
from patchkeeper.commands import check
from patchkeeper.errors import BadInput
from patchkeeper.patchset import patching, patchset
from patchkeeper.patchset.gitquote import quote

# Every character printable.py escapes: C0, DEL, C1, the line and paragraph separators.
CONTROLS = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]] + ["\u2028", "\u2029"]
_RAW = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]")  # but \t and \n


def _pk(env, *args: str) -> subprocess.CompletedProcess:
    """The real CLI; its exit code and output as bytes, as a terminal would get them."""
    cmd = [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), *args]
    return subprocess.run(cmd, capture_output=True)


def _set(root, name: str, patch: str, patch_name: str = "0001.patch") -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "patchset.toml").write_text(f'name = "{name}"\nversion = "1.0.0"\npackage = "sglang"\n')
    (d / patch_name).write_text(patch, encoding="utf-8", errors="surrogateescape")


def _add(path: str) -> str:
    a, b = quote("a/" + path), quote("b/" + path)
    return f"diff --git {a} {b}\nnew file mode 100644\n--- /dev/null\n+++ {b}\n@@ -0,0 +1 @@\n+x\n"


@pytest.mark.parametrize("where", ["sglang/x{c}.py", "sglang/{c}dir/x.py", "sglang/x.py{c}"])
def test_a_diff_path_with_any_control_character_is_refused(tmp_path, where):
    for i, c in enumerate(CONTROLS):
        name = f"s{i}"
        _set(tmp_path, name, _add(where.format(c=c)))
        with pytest.raises(BadInput) as info:
            patchset.load(tmp_path, name)
        message = info.value.message
        assert ("escapes site-packages" if c == "\0" else "holds a control character") in message, (
            c,
            message,
        )
        assert not _RAW.search(message.encode()), (repr(c), message)  # the name is shown escaped
    _set(tmp_path, "plain", _add("sglang/x ü.py"))  # a space, non-ASCII: a name, no control
    assert patchset.load(tmp_path, "plain").paths == ("sglang/x ü.py",)


def test_a_patch_file_name_with_a_control_character_is_refused(tmp_path):
    for i, c in enumerate(c for c in CONTROLS if c not in "\0/"):
        _set(tmp_path, f"f{i}", _add("sglang/x.py"), patch_name=f"0001{c}red.patch")
        with pytest.raises(BadInput, match="holds a control character"):
            patchset.load(tmp_path, f"f{i}")


def test_check_show_and_apply_print_nothing_raw(env):
    """The reviewer's names: refused by check, show and apply alike (exit 2), the error escaped; a hunk
    header and a file of the set's directory that hold escapes are printed escaped by check and show."""
    patches = env.root / "patchsets"
    _set(patches, "atk", _add("sglang/x\x1b]0;PWN\x07\x1b[2J.py"))
    _set(patches, "named", _add("sglang/x.py"), patch_name="0001\x1b[31mred.patch")
    before = env.snapshot()
    for name in ("atk", "named"):
        for args in (("check", name), ("show", name), ("apply", name, "--no-verify")):
            proc = _pk(env, *args)
            assert proc.returncode == 2, proc.stderr
            assert b"holds a control character" in proc.stderr and b"\\x1b" in proc.stderr
            assert not _RAW.search(proc.stdout + proc.stderr), (args, proc.stdout, proc.stderr)
    assert env.snapshot() == before
    names = [c for c in CONTROLS if c not in "\0/"]
    _set(patches, "notes", _add("sglang/x.py"))
    for c in names:
        (patches / "notes" / f"notes{c}.txt").write_text("not a patch: no patch names it")
    show = _pk(env, "show", "notes")
    assert show.returncode == 0 and not _RAW.search(show.stdout), show.stdout
    for c in names:
        assert f"notes{repr(c)[1:-1]}.txt".encode() in show.stdout, (repr(c), show.stdout)


def test_check_report_escapes_what_it_prints(capsys):
    """check's report (commands/check.py) escapes every line: a path, a hunk header and problem, the
    expected and found lines, a problem from the target, each with every control character."""
    for c in CONTROLS:
        hunk = patching.HunkCheck(f"@@ -1 +1 @@{c}", None, f"no match{c}", (f"a{c}\n",), ("b\n",), 1)
        report = stacks.FileCheck(f"h@1.0.0{c}", f"0001{c}.patch", f"sglang/x{c}.py", (hunk,))
        assert check._report("h@1.0.0", f"local{c}", [report], [f"drift in y{c}.py"], False) == 1
        out = capsys.readouterr().out
        assert not _RAW.search(out.encode()), (repr(c), out)
        assert out.count(repr(c)[1:-1]) >= 6, (repr(c), out)
