"""The bytecode check compiles a source once per pair of bytes (host/pycompare.py): on the real sglang
venv, a second `audit --rehash` compiles nothing, and a foreign pyc of every kind is still found by
`--rehash` and by a cold audit, the pairs of the genuine pycs already kept. With the release's code
digests (checks/release_code.py: its wheel's sources compiled on the controller) a pyc of the release's
code is judged without a compile, and still no foreign pyc passes."""

from __future__ import annotations

import ensurepip
import hashlib
import importlib.util
import json
import marshal
import os
import py_compile
import shutil
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
from conftest import SITE_REL, copy_venv, drop_bytecode, make_workspace

from patchkeeper.checks import release_code
from patchkeeper.host import bytecode, progress, pycompare

TAG = "cpython-311"
KEEP = "sglang/srt/speculative"  # the directory whose pycs stay (the others are dropped: fewer to compile)


@pytest.fixture
def benv(tmp_path, pristine_venv):
    env = make_workspace(tmp_path / "ws", copy_venv(pristine_venv, tmp_path / "venv"))
    assert drop_bytecode(env.venv / SITE_REL, keep=KEEP) > 1000
    return env


def pyc_of(source: Path, opt: int = 0) -> Path:
    return Path(importlib.util.cache_from_source(str(source), optimization=opt or ""))


def header(source: Path, flags: int = 0) -> bytes:
    """A pyc header that claims `source`: its mtime and size, or (flags 1 or 3) its hash."""
    if flags:
        return (
            importlib.util.MAGIC_NUMBER
            + flags.to_bytes(4, "little")
            + importlib.util.source_hash(source.read_bytes())
        )
    st = source.stat()
    return (
        importlib.util.MAGIC_NUMBER
        + (0).to_bytes(4, "little")
        + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    )


def put(pyc: Path, data: bytes) -> None:
    """Write a pyc on an inode of its own (the venv is hardlinked to the pristine one)."""
    pyc.unlink(missing_ok=True)
    pyc.write_bytes(data)


def code_of(text: bytes, name: str, opt: int = 0) -> bytes:
    return marshal.dumps(compile(text, f"/elsewhere/{name}", "exec", dont_inherit=True, optimize=opt))


def forge_all(site: Path, keep: str = KEEP) -> dict[str, str]:
    """One foreign pyc of each kind Python would run, in `keep`: {pyc path: the detail's words}."""
    files = sorted(p for p in (site / keep).glob("*.py") if p.stat().st_size > 200)
    made: dict[str, str] = {}

    def rel(p: Path) -> str:
        return str(p.relative_to(site))

    # 1. a timestamp header that matches the source, the code of an edited copy (the incident)
    src = files[0]
    put(pyc_of(src), header(src) + code_of(src.read_bytes() + b"\nEDITED = 1\n", src.name))
    made[rel(pyc_of(src))] = f"its header matches {src.name} but its code does not"
    # 2. a checked-hash header with the source's true hash, other code
    src = files[1]
    put(pyc_of(src), header(src, 3) + code_of(b"x = 'other'\n", src.name))
    made[rel(pyc_of(src))] = f"its source hash matches {src.name} but its code does not"
    # 3. an unchecked-hash pyc of other code (py_compile's own, moved in)
    src = files[2]
    other = site / "other_code.py"
    other.write_bytes(b"y = 'unchecked'\n")
    made_pyc = site / "other_code.pyc"
    py_compile.compile(
        str(other),
        str(made_pyc),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        doraise=True,
    )
    other.unlink()
    pyc_of(src).unlink(missing_ok=True)
    made_pyc.rename(pyc_of(src))
    made[rel(pyc_of(src))] = "unchecked-hash pyc was compiled from other code"
    # 4. the source edited in place, its size and mtime kept: the old genuine pyc's header still matches
    src = next(p for p in files[3:] if b"True" in p.read_bytes())
    st = src.stat()
    edited = src.read_bytes().replace(b"True", b"None", 1)
    src.unlink()
    src.write_bytes(edited)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    made[rel(pyc_of(src))] = f"its header matches {src.name} but its code does not"
    # 5. an -O pyc (what `python -O` imports) with a matching header, of other code
    src = next(p for p in files[3:] if rel(pyc_of(p)) not in made)
    put(pyc_of(src, 1), header(src) + code_of(b"z = 'optimized'\n", src.name, 1))
    made[rel(pyc_of(src, 1))] = f"its header matches {src.name} but its code does not"
    return made


def bytecode_findings(env, *args: str) -> dict[str, str]:
    doc = json.loads(env.pk("audit", "--json", *args, check=None).stdout)
    return {f["path"]: f["detail"] for f in doc["findings"] if f["class"] == "bytecode"}


def wheel_of(path: Path, root: Path, sources: list[Path]) -> Path:
    """A wheel (a zip, as pip writes one) holding `sources`, named relative to `root`."""
    with zipfile.ZipFile(path, "w") as zf:
        for src in sources:
            zf.write(src, str(src.relative_to(root)))
    return path


def test_every_kind_of_foreign_pyc_is_found_by_rehash_and_a_cold_audit_with_the_pairs_kept(benv):
    """With the releases' code digests in place too: the workspace's wheels directory holds a wheel of
    sglang 0.5.23 (the sources of the directory whose pycs are kept) and the venv's own pip and setuptools
    wheels (those this interpreter bundles, where their versions are the venv's), and one of a release
    the venv does not have."""
    site = benv.venv / SITE_REL
    wheels = benv.root / "wheels"
    wheels.mkdir()
    sources = sorted((site / KEEP).glob("*.py"))
    wheel_of(wheels / "sglang-0.5.23-py3-none-any.whl", site, sources)
    wheel_of(wheels / "sglang-0.5.22-py3-none-any.whl", site, sorted((site / "sglang").glob("*.py")))
    distinct = {hashlib.sha256(p.read_bytes()).digest() for p in sources}  # one entry per source's bytes
    for bundled in (Path(ensurepip.__file__).parent / "_bundled").glob("*.whl"):
        name, version = bundled.name.split("-")[:2]
        if (site / f"{name}-{version}.dist-info").is_dir():
            shutil.copy(bundled, wheels / bundled.name)
            with zipfile.ZipFile(bundled) as zf:
                distinct.update(
                    hashlib.sha256(zf.read(n)).digest() for n in zf.namelist() if n.endswith(".py")
                )
    toml = benv.root / "patchkeeper.toml"
    toml.write_text('wheels = "wheels"\n' + toml.read_text())
    benv.pk("snapshot", "--name", "start")
    first = benv.pk("audit", "--rehash", "--json", check=None)  # every genuine pair compared, then kept
    assert json.loads(first.stdout)["findings"] == []
    assert "compiling the sources of sglang-0.5.23-py3-none-any.whl once on this machine" in first.stderr
    kept = benv.venv / ".patchkeeper" / "audit" / "bytecode.compared"
    assert kept.exists()
    stamp, table = marshal.loads(Path(f"{kept}.release").read_bytes())
    assert stamp == pycompare.Compared.RELEASE and set(table) == distinct
    made = forge_all(site)
    for args in (("--rehash",), ()):
        if (
            not args
        ):  # a cold audit: every cache gone but the pairs (and the forged pycs newer than the baseline)
            benv.pk("clear-caches")
            assert not kept.exists()
        found = bytecode_findings(benv, *args)
        assert set(found) == set(made), args
        for path, words in made.items():
            assert words in found[path], (args, path, found[path])


def small_site(tmp_path: Path, pristine_venv: Path) -> Path:
    """A site dir of one package directory of the real sglang, with its pycs (copied, not linked)."""
    site = tmp_path / "site"
    shutil.copytree(pristine_venv / SITE_REL / KEEP, site / KEEP)
    return site


def test_a_pair_is_compiled_once_and_a_changed_byte_is_compiled_again(tmp_path, pristine_venv, monkeypatch):
    site = small_site(tmp_path, pristine_venv)
    compiled: list[str] = []
    real = compile

    def counting(source, filename, *args, **kwargs):
        compiled.append(filename)
        return real(source, filename, *args, **kwargs)

    monkeypatch.setitem(pycompare._ns, "compile", counting)  # the comparison's own namespace (_PAIR)
    monkeypatch.setattr(pycompare, "POOL_FROM", 10**9)  # compared in this process, where it is counted
    memo = str(tmp_path / "state" / "bytecode.compared")
    pycs = sorted(str(p.relative_to(site)) for p in site.rglob("*.pyc"))
    assert len(pycs) > 10

    first = bytecode.check_bytecode(str(site), TAG, [], None, 0, memo)
    assert first["findings"] == [] and len(compiled) == len(pycs)
    compiled.clear()
    again = bytecode.check_bytecode(str(site), TAG, [], None, 0, memo)
    assert again == first and compiled == []
    without = bytecode.check_bytecode(str(site), TAG, [], None, 0, None)  # no pairs kept: all compiled
    assert without == first and len(compiled) == len(pycs)

    compiled.clear()
    forged = site / pycs[0]
    source = site / bytecode._pyc_source(pycs[0], TAG)[0]  # type: ignore[index]
    data = forged.read_bytes()  # the same header, the code of the source with one more line
    put(forged, data[:16] + code_of(source.read_bytes() + b"\nX = 1\n", source.name))
    found = bytecode.check_bytecode(str(site), TAG, [], None, 0, memo)
    assert compiled == [str(source)]
    assert [f[0] for f in found["findings"]] == [pycs[0]]
    compiled.clear()
    assert bytecode.check_bytecode(str(site), TAG, [], None, 0, memo)["findings"] == found["findings"]
    assert len(compiled) == 1  # a mismatch is never kept as a pair: compared again


def test_the_comparisons_are_a_phase_of_their_own_in_the_progress(tmp_path, pristine_venv):
    site = small_site(tmp_path, pristine_venv)
    told: list[tuple[int, int, str]] = []
    progress.listen(lambda done, total, phase: told.append((done, total, phase)))
    try:
        bytecode.check_bytecode(str(site), TAG, [], None, 0, None)
    finally:
        progress.listen(None)
    pycs = sum(1 for _ in site.rglob("*.pyc"))
    phased = [t for t in told if t[2] == bytecode.PHASE]
    assert phased and phased[-1][:2] == (pycs, pycs)  # every comparison counted, under its phase's name
    assert [t[0] for t in phased] == sorted(t[0] for t in phased)
    told.clear()
    progress.listen(lambda done, total, phase: told.append((done, total, phase)))
    try:  # a check that compares nothing has no such phase
        bytecode.check_bytecode(str(site), TAG, [], None, None, None)
    finally:
        progress.listen(None)
    assert told == []


def test_a_sources_syntax_warnings_are_not_the_audits(tmp_path):
    """A source that compiles with a SyntaxWarning (flashinfer ships several) is compared in silence."""
    src = tmp_path / "warns.py"
    src.write_text('def f(x):\n    return x is "a"\n')
    pyc = tmp_path / "warns.pyc"
    put(pyc, header(src) + code_of(src.read_bytes(), src.name))
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        assert pycompare.other_code(str(pyc), str(src), 0) is False
        compile(src.read_bytes(), str(src), "exec")  # (the source does warn)
    assert [w.category for w in told] == [SyntaxWarning]


def generated_site(root: Path, count: int, seed: int) -> tuple[list[tuple[str, str, str, int]], set[str]]:
    """`count` generated modules with their genuine pycs (timestamp and checked-hash, some -O), a few
    of them given foreign code behind a header that matches their source: the pairs to compare (rel,
    pyc, source, opt) and the rels of the forged pycs."""
    import random

    rng = random.Random(seed)
    pairs: list[tuple[str, str, str, int]] = []
    for i in range(count):
        src = root / f"pkg{i % 7}" / f"mod{i}.py"
        src.parent.mkdir(parents=True, exist_ok=True)
        body = "".join(
            f"def f{j}(x, y={rng.randint(0, 99)}):\n    return x * {rng.random()!r} + y - {j}\n"
            for j in range(rng.randint(1, 40))
        )
        src.write_text(f'"""module {i}"""\nimport os\nNAME = {str(src.name)!r}\n{body}')
        opt = 1 if i % 5 == 0 else 0
        pyc = pyc_of(src, opt)
        mode = (
            py_compile.PycInvalidationMode.CHECKED_HASH
            if i % 3 == 0
            else py_compile.PycInvalidationMode.TIMESTAMP
        )
        py_compile.compile(str(src), str(pyc), doraise=True, optimize=opt, invalidation_mode=mode)
        pairs.append((str(pyc.relative_to(root)), str(pyc), str(src), opt))
    forged: set[str] = set()
    for rel, pyc, src, opt in rng.sample(pairs, 9):
        data = Path(pyc).read_bytes()
        kind = len(forged) % 3
        if kind == 0:  # the same header, the code of the source with one more line (compiled elsewhere)
            put(Path(pyc), data[:16] + code_of(Path(src).read_bytes() + b"\nX = 1\n", Path(src).name, opt))
        elif kind == 1:  # a header with the source's true hash, other code
            put(Path(pyc), header(Path(src), 3) + code_of(b"x = 'other'\n", Path(src).name, opt))
        else:  # the source edited in place, size and mtime kept: the genuine pyc's header still matches
            st = os.stat(src)
            text = Path(src).read_bytes()
            edited = text.replace(b" + y - ", b" - y + ", 1)
            assert edited != text and len(edited) == len(text)
            Path(src).write_bytes(edited)
            os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
        forged.add(rel)
    return pairs, forged


@pytest.mark.parametrize("seed", [1, 2])
def test_the_workers_find_what_one_process_finds_and_keep_the_same_pairs(tmp_path, seed):
    """The comparisons made on the host's cores (worker processes, pycompare.compare_pairs) give the
    verdicts and the kept pairs of the same comparisons made in one process, on a generated corpus
    with foreign pycs whose header matches their source; a second run with the pairs kept compiles
    nothing, and a byte changed after that is compiled and found."""
    pairs, forged = generated_site(tmp_path, 3 * pycompare.POOL_FROM, seed)
    alone, pooled = pycompare.Compared(None), pycompare.Compared(str(tmp_path / "compared"))
    one = pycompare.compare_pairs(pairs, alone, workers=1)
    many = pycompare.compare_pairs(pairs, pooled, workers=3)
    assert many == one and {rel for rel, other in one.items() if other} == forged
    assert all(one[rel] is True for rel in forged)
    assert pooled.compiled == alone.compiled == len(pairs) and pooled.made == alone.made
    assert set(pooled.made) == {rel for rel, _, _, _ in pairs} - forged
    pooled.save()

    again = pycompare.Compared(str(tmp_path / "compared"))
    assert pycompare.compare_pairs(pairs, again, workers=3) == one and again.compiled == len(forged)
    rel, pyc, src, opt = next(p for p in pairs if p[0] not in forged)
    data = Path(pyc).read_bytes()  # a genuine pair kept, then its pyc given other code, same header
    put(Path(pyc), data[:16] + code_of(b"y = 'swapped in'\n", Path(src).name, opt))
    third = pycompare.Compared(str(tmp_path / "compared"))
    found = pycompare.compare_pairs(pairs, third, workers=3)
    assert {r for r, other in found.items() if other} == forged | {rel}


def test_the_workers_are_counted_in_the_progress_and_stopped_on_an_error(tmp_path, monkeypatch):
    pairs, _ = generated_site(tmp_path, 2 * pycompare.POOL_FROM, 3)
    told: list[tuple[int, int, str]] = []
    progress.listen(lambda done, total, phase: told.append((done, total, phase)))
    progress.expect(len(pairs))
    try:
        pycompare.compare_pairs(pairs, pycompare.Compared(None), workers=2)
    finally:
        progress.listen(None)
    assert told[-1][:2] == (len(pairs), len(pairs)) and len(told) > 2  # stepped as the answers came
    started: list[object] = []
    real = pycompare._started

    def failing_settled(answer, memo):
        raise KeyboardInterrupt  # Ctrl-C at the first answer

    def watching(jobs, workers, release):
        procs = real(jobs, workers, release)
        started.extend(procs)
        return procs

    monkeypatch.setattr(pycompare, "_started", watching)
    monkeypatch.setattr(pycompare, "_settled", failing_settled)
    with pytest.raises(KeyboardInterrupt):
        pycompare.compare_pairs(pairs, pycompare.Compared(None), workers=2)
    assert len(started) == 2 and all(p.returncode is not None for p in started)  # type: ignore[attr-defined]


def test_the_workers_run_on_an_ssh_host_and_find_every_kind_of_foreign_pyc(fleet):
    """Over SSH the agent is one program built in the host's interpreter: its workers start from the
    comparison's text alone and find what one process finds (84 comparisons: the pool's size), with the
    release's code digests placed on the host by the controller (its wheel in the wheels directory)."""
    keep = "sglang/srt/configs"
    site = fleet.site("ct129")
    assert drop_bytecode(site, keep=keep) > 1000
    assert sum(1 for _ in (site / keep / "__pycache__").iterdir()) >= pycompare.POOL_FROM
    fleet.pk("snapshot", "-t", "ct129", "--name", "start")
    made = forge_all(site, keep)
    wheels = fleet.env.root / "wheels"  # the release's code digests, made here and placed on the host
    wheels.mkdir()
    sources = sorted((site / keep).glob("*.py"))
    wheel_of(wheels / "sglang-0.5.23-py3-none-any.whl", site, sources)
    toml = fleet.env.root / "patchkeeper.toml"
    toml.write_text('wheels = "wheels"\n' + toml.read_text())
    doc = json.loads(fleet.pk("audit", "-t", "ct129", "--json", "--rehash", check=None).stdout)
    found = {f["path"]: f["detail"] for f in doc["findings"] if f["class"] == "bytecode"}
    assert set(found) == set(made)
    placed = fleet.venvs["ct129"] / ".patchkeeper" / "audit" / "bytecode.compared.release"
    assert set(marshal.loads(placed.read_bytes())[1]) == {
        hashlib.sha256(p.read_bytes()).digest() for p in sources
    }
    for path, words in made.items():
        assert words in found[path], (path, found[path])


@pytest.mark.parametrize("seed", [4, 5])
def test_the_releases_code_digests_spare_its_sources_compile_and_vouch_for_no_foreign_pyc(
    tmp_path, seed, monkeypatch
):
    """A generated corpus (foreign pycs behind matching headers, -O pycs, checked-hash pycs) compared with
    the release's code digests of its sources (made by release_code from a wheel of them, on every core):
    the verdicts of the comparisons without them, in one process and in workers; each genuine pyc of
    level 0 judged by its digest, every other one compiled; a table of another magic number not read."""
    pairs, forged = generated_site(tmp_path / "site", 3 * pycompare.POOL_FROM, seed)
    wheel = wheel_of(tmp_path / "pkg-1.0-py3-none-any.whl", tmp_path / "site", [Path(p[2]) for p in pairs])
    made = release_code._table(wheel, sys.executable)
    assert made is not None
    compared = tmp_path / "state" / "bytecode.compared"
    compared.parent.mkdir(mode=0o700)
    Path(f"{compared}.release").write_bytes(marshal.dumps(made))
    plain = pycompare.compare_pairs(pairs, pycompare.Compared(None), workers=1)
    assert {rel for rel, other in plain.items() if other} == forged
    vouched = {rel for rel, _, _, opt in pairs if opt == 0} - forged
    for workers in (1, 3):
        memo = pycompare.Compared(str(compared))
        assert pycompare.compare_pairs(pairs, memo, workers=workers) == plain
        assert (memo.vouched, memo.compiled) == (len(vouched), len(pairs) - len(vouched)), workers
        assert set(memo.made) == {rel for rel, _, _, _ in pairs} - forged  # kept as compiled pairs are

    # the digests are kept in the user cache: made again without starting an interpreter
    monkeypatch.setattr(release_code.subprocess, "Popen", None)
    assert release_code._table(wheel, sys.executable) == made
    stamp, table = made
    Path(f"{compared}.release").write_bytes(marshal.dumps((stamp[:2] + (b"\0\0\r\n",), table)))
    other = pycompare.Compared(str(compared))
    assert pycompare.compare_pairs(pairs, other, workers=1) == plain
    assert (other.vouched, other.compiled) == (0, len(pairs))


def test_a_code_digest_is_the_code_under_any_file_name_and_differs_for_other_code(tmp_path):
    """code_digest, the release digests' measure: equal for a source compiled under two names and for
    the pyc py_compile writes of it (marshal's references and file names set apart), different for
    code that differs in one constant, one name, one line number or one nested function."""
    text = b"import os\nX = {1, 2}\ndef f(a, b=2.5):\n    def g():\n        return a\n    return g, 'f'\n"
    src = tmp_path / "m.py"
    src.write_bytes(text)
    py_compile.compile(str(src), str(tmp_path / "m.pyc"), doraise=True)
    loaded = marshal.loads((tmp_path / "m.pyc").read_bytes()[16:])
    digest = pycompare.code_digest(compile(text, "/a/m.py", "exec", dont_inherit=True))
    assert pycompare.code_digest(compile(text, "/b/elsewhere.py", "exec", dont_inherit=True)) == digest
    assert pycompare.code_digest(loaded) == digest
    for changed in (
        (b"2.5", b"2.50000001"),
        (b"return a", b"return b"),
        (b"import os\n", b"import os\n\n"),
        (b"'f'", b"'g'"),
    ):
        other = text.replace(*changed)
        assert pycompare.code_digest(compile(other, "/a/m.py", "exec", dont_inherit=True)) != digest, changed
