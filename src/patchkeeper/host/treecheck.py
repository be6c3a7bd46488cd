"""The work of one audit of a site dir in units two processes share (Agent.audit_tree): the package
by groups of its directories, the other distributions against their RECORD, the bytecode beside it.

A cold audit's work is about one digest per file and one header per pyc, thousands of each, mostly
interpreter work: threads would wait on each other (the GIL), so one forked process (disk.share_units)
claims units beside this one from the start, the walk included. The units are planned from the
recorded manifest (the package's directories, weighed by their files' recorded sizes); what the
manifest does not know (new directories, the loose paths, the role files) is the "rest" unit, which
walks the package around the groups' directories. A group's directory counts only when the rest's
walk met it as a directory, exactly where one serial walk would have entered it. The answer, and
every cache written, is the one serial walk's. Standard library only (shipped to hosts).
"""

from __future__ import annotations

import os
from itertools import chain, islice

from .disk import ALGORITHM, StatCache, digest_files, is_managed_name, share_units, walk_files
from .bytecode import VerdictCache, _judge, _tally, _top_pycs, _walk_pyc, recompiled_sources
from .distcheck import RecordSeals

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs a command's start about 10 ms)
    from typing import Any, Dict, List, Optional, Tuple

    from .contract import Rows, ScanRequest

PARTS = 48  # the package in about this many groups: small enough that the two processes end together


class TreeWork:
    """One audit's units (`groups`: the package's groups of directories, see groups) and their
    results: run (share_units calls `run`), then the merged rows, pycs and RECORD checks, and the
    caches saved (by this process only)."""

    def __init__(self, scan: ScanRequest, groups: List[List[str]], cache_tag: str, verify: List[str],
                 bytecode_cache: Optional[str], records: List[str], record_cache: Optional[str],
                 native: Optional[Tuple[List[str], Optional[str]]] = None, pyc_since: Optional[int] = None) -> None:
        self.root, self.walk, self.algorithm = scan.root, tuple(scan.walk), scan.algorithm or ALGORITHM
        self.paths, self.absolute = scan.paths, scan.absolute
        self.cached = StatCache(scan.cache)  # the scan's digests
        self.listings = StatCache(scan.cache + ".dirs") if scan.cache else None  # walked directories' entries
        self.verdicts = VerdictCache(bytecode_cache)  # clean pycs' verdicts
        self.pyc_listings = StatCache(bytecode_cache + ".dirs") if bytecode_cache else None
        self.record_cache = record_cache
        self.seals = RecordSeals(os.path.join(record_cache, "records.seal") if record_cache and records else None)
        self.cache_tag, self.first = cache_tag, frozenset(verify)
        self.stats: Dict[str, os.stat_result] = {}  # each source's stat, taken by this process's digests
        self.pyc_since = pyc_since  # pycs changed since then are recompiled and compared (bytecode._judge)
        self.judge = _judge(self.root, cache_tag, self.first, self.stats, self.verdicts, pyc_since)
        self.groups = _sound(groups, self.walk)
        self.skip = {d for group in self.groups for d in group}
        # units: the rest first (it meets the groups' directories), the RECORD checks, the bytecode
        # beside the package, then the groups, biggest first
        self.units: List[Tuple[str, Any]] = [("rest", None), *(("record", name) for name in records),
                                              *([("native", native)] if native else []),
                                              ("beside", None), *(("group", g) for g in self.groups)]

    def run(self, i: int) -> Any:
        """Unit i's result, as plain data (it may be computed in the forked process)."""
        kind, what = self.units[i]
        if kind == "record":  # (its answer, and its seal when that changed: saved by this process)
            where, seals = os.path.join(self.root, what), self.seals.seals
            before = seals.get(where)
            answer = self.seals.checked(self.root, [what], self.record_cache)[what]
            return answer, seals.get(where) is not before, seals.get(where)
        if kind == "native":  # the fingerprint's native part (its caches saved by the process that ran it)
            from . import fingerprint

            return fingerprint.native(*what)
        if kind == "beside":  # the bytecode outside the package's directories
            skip = frozenset(self.walk)
            found = list(chain(_top_pycs(self.root), _walk_pyc(self.root, skip, self.pyc_listings)) if skip
                         else _walk_pyc(self.root, listings=self.pyc_listings))
            return [("", (([], []), {}, {}), found, [self.judge(rel, in_cache) for rel, in_cache in found])]
        if kind == "group":
            return [self._tree([d]) for d in what]
        met: List[str] = []
        return [self._tree(list(self.walk), met, True), met]

    def _tree(self, dirs: List[str], met: Optional[List[str]] = None, rest: bool = False) -> Any:
        """(first dir, digests, pycs, their outcomes) of the files and pycs below `dirs`, the digests
        of the files hashed made into rows and stat cache entries where they were made
        (StatCache.taken: merging them, whichever process made them, is two dict updates); the rest
        also takes the loose paths and the role files, and walks around the groups' directories."""
        root, pycs = self.root, []  # type: ignore[var-annotated]
        skip = self.skip if rest else None
        names = dict.fromkeys(n for d in dirs for n in walk_files(root, d, pycs, self.listings, skip, met))
        if rest:  # as Agent.scan takes them
            walked = tuple(d + "/" for d in self.walk)
            names.update(dict.fromkeys(p for p in self.paths if not p.startswith(walked) and is_managed_name(p)))
        jobs = [(rel, f"{root}/{rel}" if rel[:1] != "/" else rel) for rel in names]
        if rest:
            jobs.extend(self.absolute.items())
        done = self.cached.taken(digest_files(jobs, self.cached.entries, self.algorithm, self.stats))
        return dirs[0] if dirs else "", done, pycs, [self.judge(rel, in_cache) for rel, in_cache in pycs]

    def unit(self, i: int) -> Tuple[Any, List[Optional[Dict[str, Any]]]]:
        """run(i), with what it left in this process's memory beside its result: the directory
        listings it added to the caches (a listing is added once, at the end of the cache's entries),
        so that they cross from the forked process with each unit rather than all at its end."""
        caches = (self.listings, self.pyc_listings)
        before = [len(c.fresh) if c is not None else 0 for c in caches]
        result = self.run(i)
        return result, [dict(islice(c.fresh.items(), n, None)) if c is not None else None
                        for c, n in zip(caches, before)]

    def merge(self, results: Dict[int, Any], kept: Any) -> Tuple[Rows, Dict[str, Any], List[Any], List[Any]]:
        """The rows found (stat cache and listings saved), the RECORD checks by dist-info, and every
        pyc with its outcome (the native part, when asked for, in `native`); a group's directory the
        rest's walk did not meet as one is left out."""
        if kept is not None:
            for mine, theirs in zip((self.listings, self.pyc_listings), kept):
                if mine is not None and theirs:
                    mine.fresh.update(theirs)
        rest, met = results[0]
        trees, met = [rest], set(met)
        for i, (kind, _) in enumerate(self.units):
            if kind == "beside":
                trees.extend(results[i])
            elif kind == "group":  # a directory counts where one serial walk would have entered it
                trees.extend(t for t in results[i] if t[0] in met)
        unmet = {f"{self.root}/{d}" for d in self.skip - met}
        if unmet and self.listings is not None:  # nor is a listing made there kept
            fresh, below = self.listings.fresh, tuple(u + "/" for u in unmet)
            for path in [p for p in fresh if p in unmet or p.startswith(below)]:
                del fresh[path]
        records, self.native = {}, None
        for i, (kind, what) in enumerate(self.units):
            if kind == "native":
                self.native = results[i]
            if kind == "record":
                records[what], changed, sealed = results[i]
                if changed:
                    self.seals.dirty = True
                    if sealed is None:
                        self.seals.seals.pop(os.path.join(self.root, what), None)
                    else:
                        self.seals.seals[os.path.join(self.root, what)] = sealed
        self.seals.save()
        out: Rows = {}
        cached = self.cached
        for _, taken, _, _ in trees:
            cached.merge(taken, out)
        cached.save()
        if self.listings is not None:
            self.listings.save()
        found = [p for _, _, pycs, _ in trees for p in pycs]
        outcomes = [o for _, _, _, outs in trees for o in outs]
        return out, records, found, outcomes

    def bytecode(self, found: List[Any], outcomes: List[Any], verify: set[str]) -> Dict[str, Any]:
        """The bytecode check's answer: the pycs of sources added to `verify` since the units ran
        (those the comparison or a RECORD check found changed) judged again, recompiled and compared."""
        from .bytecode import _pyc_source

        deep = frozenset(verify)
        again = deep - self.first
        if again:
            judge = _judge(self.root, self.cache_tag, deep, self.stats, self.verdicts, self.pyc_since)
            for i, (rel, in_cache) in enumerate(found):
                source = _pyc_source(rel, self.cache_tag) if in_cache else None
                if source is not None and source[0] in again:
                    outcomes[i] = judge(rel, in_cache)
        if self.pyc_listings is not None:
            self.pyc_listings.save()
        return _tally(found, outcomes, self.verdicts)

    def records_verify(self, records: Dict[str, Any]) -> set[str]:
        """The sources the RECORD checks found changed: their pycs are recompiled and compared."""
        return recompiled_sources(f for result in records.values() for f in result["findings"])


def run_all(work: TreeWork) -> Tuple[Dict[int, Any], Any]:
    """Every unit of `work`, shared with a forked process where that helps (disk.share_units), and
    the listings the units added, whichever process ran them (for TreeWork.merge)."""
    done, _ = share_units(work.unit, len(work.units))
    results: Dict[int, Any] = {}
    listed: List[Dict[str, Any]] = [{}, {}]
    for i, (result, added) in done.items():
        results[i] = result
        for mine, theirs in zip(listed, added):
            if theirs:
                mine.update(theirs)
    return results, listed


def _sound(groups: List[List[str]], walk: Tuple[str, ...]) -> List[List[str]]:
    """The groups without any directory a group may not start at (a plan kept in a cache is not
    believed blindly): one outside the package's top directories, a top one or a dist-info (the rest
    walks those), one named twice or below another group's."""
    tops = {d for d in walk if not d.endswith(".dist-info")}
    taken: set[str] = set()
    out = []
    for group in groups:
        kept = []
        for d in group if isinstance(group, list) else ():
            parts = d.split("/") if isinstance(d, str) else []
            if (len(parts) < 2 or parts[0] not in tops or d.endswith(".dist-info") or "" in parts
                    or "." in parts or ".." in parts or "__pycache__" in parts or d in taken):
                continue
            kept.append(d)
            taken.add(d)
        if kept:
            out.append(kept)
    nested = {d for d in taken if any("/".join(d.split("/")[:i]) in taken for i in range(1, d.count("/") + 1))}
    return [g for g in ([d for d in group if d not in nested] for group in out) if g]


def groups(expected: Rows, walk: Tuple[str, ...]) -> List[List[str]]:
    """The package's directories the recorded manifest knows, in groups of about 1/PARTS of its work
    (a file costs a digest, more when big, and a .py its pyc's header too), biggest first; a directory
    heavier than that is split into its subdirectories (its own files stay with the rest)."""
    tops = {d for d in walk if not d.endswith(".dist-info")}
    own: Dict[str, int] = {}  # a directory's own files' weight
    for key, row in expected.items():
        head, _, name = key.rpartition("/")
        if head and head.partition("/")[0] in tops:
            own[head] = own.get(head, 0) + 2 + row[1] // 25_000 + name.endswith(".py")
    weight: Dict[str, int] = {}
    children: Dict[str, List[str]] = {}
    for d, w in own.items():
        child = None
        while True:
            weight[d] = weight.get(d, 0) + w
            if child is not None:
                kids = children.setdefault(d, [])
                if child not in kids:
                    kids.append(child)
            if "/" not in d:
                break
            d, child = d.rpartition("/")[0], d
    total = sum(weight.get(t, 0) for t in tops)
    if not total:
        return []
    limit = max(total // PARTS, 1)
    whole: List[str] = []  # directories taken whole
    stack = [t for t in tops if t in weight]
    while stack:
        d = stack.pop()
        kids = children.get(d, [])
        if weight[d] <= limit or not kids:
            if d not in tops and not d.endswith(".dist-info"):  # the rest walks these itself (a walk
                whole.append(d)  # started at a dist-info passes its bytecode by: see walk_files)
        else:
            stack.extend(kids)
    whole.sort(key=lambda d: (-weight[d], d))
    groups: List[List[str]] = []
    sizes: List[int] = []
    for d in whole:  # the small ones packed together, up to half the limit
        if groups and sizes[-1] + weight[d] <= limit and weight[d] < limit // 2:
            groups[-1].append(d)
            sizes[-1] += weight[d]
        else:
            groups.append([d])
            sizes.append(weight[d])
    return groups
