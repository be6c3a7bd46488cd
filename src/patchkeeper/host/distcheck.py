"""Installed distributions against their RECORD (for audit and the fingerprint); bytecode.py judges the pycs."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
import sys
import time
from typing import Any, Dict, Iterator, List

from . import elf, seal
from .disk import cpus, feed, is_install_record, map_files, map_threads, write_atomic
from .distinfo import console_scripts, paths_of, record_identity, record_lines, record_rows, record_text_rows
from .preflight import kind_of
from .statcache import StatCache, identity, load_cache, save_cache, writing_caches


def _record_digest(path: str, algo: str) -> str:
    """`algo:<urlsafe base64 without padding>`, the form RECORD files use."""

    h = hashlib.new(algo)
    feed(path, h)
    return f"{algo}:{base64.urlsafe_b64encode(h.digest()).rstrip(b'=').decode()}"


_LAUNCHER = None


def _is_launcher(rest: bytes, entry_points: set[str]) -> bool:
    """pip/distlib's console-script template calling one of this distribution's entry points."""

    global _LAUNCHER
    if _LAUNCHER is None:
        _LAUNCHER = re.compile(
            rb"(?:# -\*- coding: utf-8 -\*-\n)?import re\nimport sys\nfrom ([\w.]+) import ([\w.]+)\n"
            rb"if __name__ == ['\"]__main__['\"]:\n    sys\.argv\[0\] = re\.sub\(.*\)\n"
            rb"    sys\.exit\(([\w.]+)\(\)\)\n?"
        )
    m = _LAUNCHER.fullmatch(rest)
    return m is not None and f"{m.group(1).decode()}:{m.group(2).decode()}" in entry_points


def record_hash(data: bytes, algo: str) -> str:
    """`algo:<urlsafe base64 without padding>` of bytes, the form RECORD files use."""

    return f"{algo}:{base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b'=').decode()}"


def _shebang_only(path: str, algo: str, expected: str, entry_points: set[str]) -> bool:
    """True when a script differs from RECORD in its interpreter line alone (rewritten on install
    or relocation): its body is the wheel's with `#!python`, or a generated launcher."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return False
    if not data.startswith(b"#!"):
        return False
    first, _, rest = data.partition(b"\n")
    if rest.startswith(b"'''exec' "):  # pip's long-shebang form: #!/bin/sh, '''exec' python "$0" "$@", ' '''
        rest = rest.split(b"\n", 2)[-1]
    elif b"python" not in first:
        return False
    for head in (b"#!python\n", b"#!python\r\n"):
        if record_hash(head + rest, algo) == expected:
            return True
    return _is_launcher(rest, entry_points)


def check_record(
    site: str,
    name: str,
    cache_dir: str | None,
    outside: bool = False,
    stats: dict[str, os.stat_result | OSError] | None = None,
    lines: list[str] | None = None,
) -> dict[str, Any]:
    """A distribution's files against its RECORD (hash, size); `outside`: only its rows outside its
    package, the console scripts (`../`) and the installer's records (the managed distribution's,
    whose package is its code state). `stats` and `lines`: os.stat of the listed paths (seal.stats)
    and the RECORD's lines, taken by the caller, used in place of its own.

    `libraries`: each shared object this check found as its RECORD says (sha256), with the identity
    it had when read: {rel: [hex digest, size, mtime_ns, ctime_ns, inode, device]}. The native part
    identifies a library by that digest without reading it again (fingerprint.Resolver)."""
    dist_dir = os.path.join(site, name)
    record = os.path.join(dist_dir, "RECORD")
    if not os.path.exists(record):
        return {"files": 0, "findings": [], "note": "no RECORD: its files cannot be verified"}
    cache = StatCache(
        os.path.join(cache_dir, name + (".outside" if outside else "") + ".json") if cache_dir else None
    )
    findings: list[list[str]] = []
    todo: list[tuple[str, str, str, str, os.stat_result]] = []
    checked = 0
    mismatched: list[tuple[str, str, str, str]] = []
    matched: list[tuple[str, str, os.stat_result]] = []  # (rel, "algo:b64", stat) of shared objects
    rows = list(
        _outside_rows(record)
        if outside
        else record_text_rows(lines)
        if lines is not None
        else record_rows(record)
    )
    for rel, algo, b64, size in rows:
        checked += 1
        path = os.path.normpath(os.path.join(site, rel))
        try:
            st = seal.stat_taken(path, stats)
        except (FileNotFoundError, NotADirectoryError):
            findings.append([rel, "missing", "listed in RECORD, not on disk"])
            continue
        if not stat.S_ISREG(st.st_mode):
            findings.append(
                [rel, "not-a-file", f"RECORD lists a file; this is {kind_of(st)}, not a regular file"]
            )
            continue
        expected = f"{algo}:{b64}"
        digest = cache.lookup(rel, st) if size is None or st.st_size == size else None
        if digest is not None:
            if digest != expected:
                mismatched.append((rel, path, algo, expected))
            elif algo == "sha256" and elf.is_candidate(rel):
                matched.append((rel, expected, st))
        elif size is not None and st.st_size != size:
            mismatched.append((rel, path, algo, expected))
        else:
            todo.append((rel, path, algo, expected, st))

    def work(job: tuple[str, str, str, str, os.stat_result]) -> tuple[str, str, str, str, str]:
        rel, path, algo, expected, st = job
        try:
            digest = _record_digest(path, algo)
        except OSError as exc:
            return rel, path, algo, expected, f"unreadable: {exc.strerror}"
        return rel, path, algo, expected, digest

    results = map_files(work, todo, lambda job: job[4].st_size)
    for job, (_, _, _, _, digest) in zip(todo, results):
        if not digest.startswith("unreadable: "):
            cache.remember(job[0], job[4], digest)
    mismatched.extend(
        (rel, path, algo, expected) for rel, path, algo, expected, digest in results if digest != expected
    )
    matched.extend(
        (job[0], job[3], job[4])
        for job, (_, _, algo, expected, digest) in zip(todo, results)
        if digest == expected and algo == "sha256" and elf.is_candidate(job[0])
    )
    scripts = None
    sizes = {rel: size for rel, _, _, size in rows} if mismatched else {}
    for rel, path, algo, expected in mismatched:
        if rel.startswith("../") or os.path.isabs(rel):
            scripts = console_scripts(dist_dir) if scripts is None else scripts
            if _shebang_only(path, algo, expected, scripts):
                continue
        try:
            size = os.stat(path).st_size
        except OSError:
            size = -1
        listed = sizes.get(rel)
        findings.append(
            [
                rel,
                "changed",
                f"differs from RECORD ({expected.partition(':')[0]}, {size} bytes)"
                if listed is None or listed == size
                else f"differs from RECORD (size {listed} -> {size} bytes)",
            ]
        )
    cache.save()
    if (
        cache.path and writing_caches() and not os.path.exists(cache.path)
    ):  # an audit has run here: status may audit cheaply
        os.makedirs(os.path.dirname(cache.path), mode=0o700, exist_ok=True)
        write_atomic(cache.path, b"{}", 0o600)
    libraries = {
        rel: [_hex(expected), *identity(st)]
        for rel, expected, st in matched
        if not rel.startswith("../") and not os.path.isabs(rel)
    }
    return {
        "files": checked,
        "findings": sorted(findings),
        "identity": record_identity(rows),
        "libraries": libraries,
    }


def _hex(expected: str) -> str:
    """`sha256:<hex>` of a RECORD hash (`sha256:<urlsafe base64 without padding>`)."""
    b64 = expected.partition(":")[2]
    return "sha256:" + base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()


def _outside_rows(record: str) -> Iterator[tuple[str, str, str, int | None]]:
    """RECORD's rows outside the package, as record_rows gives them: the lines that may be one are
    picked by their text first (sglang's RECORD has 10,000 rows; a handful are outside it)."""
    lines = [
        line for line in record_lines(record) if line.startswith(("../", "/", '"')) or ".dist-info/" in line
    ]
    for row in record_text_rows(lines):
        if row[0].startswith(("../", "/")) or is_install_record(row[0]):
            yield row


def shared_files(site: str, results: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """`results` (check_record's answers by dist-info name), where a file found changed is listed by
    another distribution's RECORD of the same site too and holds that one's bytes: a file two
    distributions own, the later install's bytes winning (flashinfer-python and torch_c_dlpack_ext
    both install a top-level build_backend.py), reported as kind "shared", not as a change."""
    wanted = {
        f[0]
        for r in results.values()
        for f in r["findings"]
        if f[1] == "changed" and not f[0].startswith("../") and not os.path.isabs(f[0])
    }
    if not wanted:
        return results
    try:
        names = sorted(n for n in os.listdir(site) if n.endswith(".dist-info"))
    except OSError:
        return results
    listed: Dict[str, List[tuple[str, str]]] = {}  # path -> [(dist-info, "algo:b64")]
    for name in names:
        record = os.path.join(site, name, "RECORD")
        try:
            with open(record, "rb") as f:
                text = f.read()
        except OSError:
            continue
        if not any(w.encode("utf-8", "surrogateescape") in text for w in wanted):
            continue
        for rel, algo, b64, _ in record_rows(record):
            if rel in wanted:
                listed.setdefault(rel, []).append((name, f"{algo}:{b64}"))
    out = {}
    for dist_info, result in results.items():
        findings = []
        for finding in result["findings"]:
            rel, kind = finding[0], finding[1]
            owner = None
            for other, expected in listed.get(rel, []) if kind == "changed" else ():
                try:
                    if (
                        other != dist_info
                        and _record_digest(os.path.join(site, rel), expected.partition(":")[0]) == expected
                    ):
                        owner = other
                        break
                except (OSError, ValueError):
                    continue
            if owner is None:
                findings.append(finding)
            else:
                label = owner[: -len(".dist-info")]
                findings.append(
                    [
                        rel,
                        "shared",
                        f"also installed by {label}, whose bytes it holds (the later install wins)",
                    ]
                )
        out[dist_info] = dict(result, findings=findings) if findings != result["findings"] else result
    return out


_SEAL_FORMAT = ("pk-record-seals", 5, tuple(sys.version_info[:2]))
SEALS = (
    "records.seal"  # RecordSeals' file in the cache dir of whoever checks (the audit's, the fingerprint's)
)


class Covered:
    """The files a RECORD check stat'ed in one audit (RecordSeals.covered): `digest` of their paths
    and identities, and the paths (`paths()`, a set, made when a seal is written). The tree's seal
    leaves out the files it shares with them and keeps `digest` in its key instead: while the
    RECORD checks find every one of those identities as it was, so are the tree's shared files; when
    one moved, the digest differs and the tree is read again (treecheck._check)."""

    def __init__(self, digest: str, taken: Dict[str, tuple[str, bytes]]) -> None:
        self.digest = digest
        self._taken = taken

    def paths(self) -> set[str]:
        return {p for names, _ in self._taken.values() for p in names.split("\0")}

    def settled(self, started_ns: int) -> bool:
        """Whether every identity is older than the clock granularity before `started_ns`."""
        return all(seal.settled(ids, started_ns) for _, ids in self._taken.values())


def _link_digests(source_dir: str, cache_dir: str, dist_info: str) -> None:
    """check_record's digest cache of `dist_info` in `source_dir`, linked into `cache_dir` where that
    has none (a cache file is replaced by rename, never written in place: the link is a copy)."""
    ours, theirs = os.path.join(cache_dir, dist_info + ".json"), os.path.join(source_dir, dist_info + ".json")
    if not writing_caches() or os.path.lexists(ours):  # (a dry run writes no cache)
        return
    try:
        if not stat.S_ISREG(os.lstat(theirs).st_mode):  # a symlink there is nobody's cache: not followed
            return
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        os.link(theirs, ours, follow_symlinks=False)
    except OSError:  # none there, or another file system: the next check of it hashes it whole
        pass


class RecordSeals:
    """Each distribution's RECORD check (check_record's answer), sealed with the stat identity of
    every file it read: the audit's and the fingerprint's, each in a file of its own.

    An answer is given again while the RECORD, the dist-info dir and every file the RECORD lists keep
    the identity (size, mtime, ctime, inode, device; of the file a path resolves to, as check_record
    stats it) they had before the check read them: one stat per file, no RECORD parsed, no cache loaded.
    Any install, removal, rewrite or re-pointed symlink moves one of them; an answer whose files
    changed within the clock's granularity of the check is never sealed (the racily-clean rule).

    `also`: another caller's seals of the same site (the audit's for the fingerprint, the fingerprint's
    for the audit), read and never written: an answer that holds there is the same check's answer,
    taken into these seals as if it had been made here, with that caller's digest cache of the
    distribution linked beside ours where we have none (so a later change to one of its files is
    hashed alone). A first change after an audit, or a first audit after a change, does not read an
    11 GB environment again."""

    def __init__(self, path: str | None, also: str | None = None) -> None:
        self.path = path
        self.also = also
        self.seals: Dict[str, Any] = {}
        self.dirty = False
        # what the last `checked` read, by dist-info dir: (its paths joined by NUL, their identities
        # as taken then), which the tree's seal relies on for the files it shares (Covered)
        self.taken: Dict[str, tuple[str, bytes]] = {}
        if path is not None:  # absent, damaged or another version's: every answer is checked again
            self.seals = load_cache(path, _SEAL_FORMAT) or {}

    def checked(self, site: str, dist_infos: List[str], cache_dir: str | None) -> Dict[str, Dict[str, Any]]:
        """check_record(site, name, cache_dir) of each name, sealed."""
        held = self._held(site, dist_infos, self.seals)
        if self.also is not None and len(held) < len(dist_infos):
            found = load_cache(self.also, _SEAL_FORMAT) or {}
            for name, answer in self._held(site, [n for n in dist_infos if n not in held], found).items():
                held[name] = answer
                d = os.path.join(site, name)
                self.seals[d] = found[d]
                self.dirty = True
                if cache_dir is not None:
                    _link_digests(os.path.dirname(self.also), cache_dir, name)
        todo = [name for name in dist_infos if name not in held]

        # one distribution per CPU at a time: most of an environment's bytes are single large
        # libraries (an nvidia-* wheel holds one), whose hashing releases the GIL, so one checked
        # after another leaves the other CPUs idle (a first audit of the serving venv: see bench/BENCHMARKS.md)
        def check(name: str) -> Dict[str, Any]:
            return self._check(site, name, cache_dir)

        checked = dict(zip(todo, map_threads(check, todo, cpus()) if len(todo) > 1 else map(check, todo)))
        return {name: held[name] if name in held else checked[name] for name in dist_infos}

    def _held(self, site: str, dist_infos: List[str], seals: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
        """The answers `seals` hold for `dist_infos` whose every file keeps its sealed identity
        (taken in one list: torch alone lists about 15,000 files)."""
        dirs = [os.path.join(site, name) for name in dist_infos]
        sealed = [seals.get(d) for d in dirs]
        paths = [p for entry in sealed if entry is not None for p in entry[0].split("\0")]
        ids = seal.stat_identities(paths, os.stat)
        held: Dict[str, Dict[str, Any]] = {}
        at = 0
        for d, name, entry in zip(dirs, dist_infos, sealed):
            if entry is not None:
                if ids[at : at + len(entry[1])] == entry[1]:
                    held[name] = dict(entry[2])
                    self.taken[d] = (entry[0], entry[1])
                at += len(entry[1])
        return held

    def _check(self, site: str, dist_info: str, cache_dir: str | None) -> Dict[str, Any]:
        started = time.time_ns()
        dist_dir = os.path.join(site, dist_info)
        record = os.path.join(dist_dir, "RECORD")
        inputs = [dist_dir, record]
        head = seal.stat_identities(inputs, os.stat)  # before the RECORD is read
        lines = record_lines(record)  # read once, for the seal's paths and the check's rows
        listed = [os.path.normpath(os.path.join(site, rel)) for rel in paths_of(lines)]
        stats = seal.stats(listed, os.stat)  # before check_record reads any of them; it stats none again
        inputs += listed
        ids = head + seal.pack(stats[path] for path in listed)
        result = check_record(site, dist_info, cache_dir, stats=stats, lines=lines or None)
        self.taken[dist_dir] = ("\0".join(inputs), ids)  # (this runs on one thread per CPU: one key each)
        if self.path is not None:
            if seal.settled(ids, started):
                self.seals[dist_dir] = ("\0".join(inputs), ids, result)
            else:
                self.seals.pop(dist_dir, None)
            self.dirty = True
        return result

    def covered(self) -> Covered:
        """What the last `checked` read, for the tree's seal (treecheck): the identities of every file
        it stat'ed, in one order, as one digest (each distribution's paths follow from its RECORD,
        whose identity is among them), and the paths."""
        h = hashlib.sha256()
        for d in sorted(self.taken):
            ids = self.taken[d][1]
            h.update(b"%d:%d:" % (len(d), len(ids)))
            h.update(d.encode("utf-8", "surrogateescape"))
            h.update(ids)
        return Covered(h.hexdigest(), self.taken)

    def save(self) -> None:
        """Write the seals (not durably: a lost seal only costs one full check)."""
        if self.dirty and self.path is not None:
            save_cache(self.path, _SEAL_FORMAT, self.seals)
