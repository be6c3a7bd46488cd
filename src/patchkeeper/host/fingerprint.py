"""The environment fingerprint, taken on the target: system, distributions, native libraries, GPU stack.

Standard library only (it runs in a remote host's interpreter). Everything that is compared is
free of install paths and times: distributions by name, files by their path relative to site,
libraries found inside a site directory as `$SITE/<path>`, so two installs of the same things
fingerprint alike. Stat caches (the audit's) keep a warm fingerprint from rereading any file.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import elf
from .disk import (
    ALGORITHM,
    STAGE_PREFIX,
    TEMP_PREFIX,
    algorithm_of,
    cpus,
    hash_file,
    map_files,
    normalize_name,
)
from .distcheck import SEALS, RecordSeals, shared_files
from .distinfo import record_identity, record_rows
from .gpu import gpu
from .startup import startup
from .statcache import StatCache, identity

SITE_TOKEN = "$SITE/"
PARTS = ("system", "distributions", "native", "gpu", "startup")
_OURS = (STAGE_PREFIX, TEMP_PREFIX)  # patchkeeper's stage and temp files: never a library anything loads


def take(
    sites: list[str],
    cache_root: str | None,
    main_site: str | None = None,
    parts: tuple[str, ...] = PARTS,
    managed: str | None = None,
    stdlib: list[str] | None = None,
    audit_seals: str | None = None,
) -> Dict[str, Any]:
    """The fingerprint's parts, as plain JSON-able values, with the hash its digests use.
    `managed` names the dist-info (in `main_site`) of the package whose files are a code state:
    the manifests compare those, so it is not checked against its RECORD again here; its name
    gives the entry-point groups of its plugins (startup.py). `stdlib`: the target's standard
    library directories, where its site hooks are looked for before the site dirs. `audit_seals`:
    the audit's RECORD seals of `main_site`, whose answers that still hold are taken (distcheck.RecordSeals)."""
    caches = {site: _cache_dir(cache_root, site, main_site) for site in sites}
    out: Dict[str, Any] = {"algorithm": ALGORITHM}
    if "system" in parts:
        out["system"] = system()
    vouched: Dict[str, List[Any]] = {}  # the shared objects the RECORD checks read (Resolver)
    if "distributions" in parts or "identities" in parts:  # "identities": a change's (see distributions)
        skip = os.path.join(main_site, managed) if main_site and managed else None
        also = {s: audit_seals for s in sites if audit_seals and main_site and caches[s] == cache_root}
        out["distributions"] = distributions(sites, caches, skip, "distributions" in parts, vouched, also)
    if "native" in parts:
        out["native"] = native(
            sites, os.path.join(cache_root, "native") if cache_root else None, lambda: vouched
        )
    if "gpu" in parts:
        out["gpu"] = gpu()
    if "startup" in parts:
        out["startup"] = startup(sites, stdlib or [], managed)
    return out


def _cache_dir(root: str | None, site: str, main_site: str | None) -> str | None:
    """The audit's cache dir for the target's own site; one below it per other site directory."""
    if root is None:
        return None
    if main_site is None or os.path.realpath(site) == os.path.realpath(main_site):
        return root

    return os.path.join(root, "sites", hashlib.sha256(site.encode()).hexdigest()[:16])


# ---- system ----------------------------------------------------------------------------------
def system() -> Dict[str, Any]:
    pretty = None
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("PRETTY_NAME="):
                        pretty = line.split("=", 1)[1].strip().strip('"').strip("'")
            break
        except OSError:
            continue
    return {"os": pretty or "unknown", "kernel": os.uname().release}


# ---- distributions ---------------------------------------------------------------------------
def distributions(
    sites: list[str],
    caches: dict[str, str | None],
    managed: str | None = None,
    files: bool = True,
    vouched: Dict[str, List[Any]] | None = None,
    also: Dict[str, str] | None = None,
) -> Dict[str, Dict[str, Any]]:
    """normalized name -> {name, version, installer, files, differ: [[path, kind], ...], identity,
    shared: [path, ...]}: `identity` says what it is (its RECORD's files and hashes, distinfo.record_identity),
    `differ` whether its files match that, `shared` the files another distribution installed over.
    The first site directory on sys.path that holds a distribution wins, as for imports.

    Without `files` (the fingerprint a change keeps), each distribution is told by its identity
    alone, marked `"checked": "identity"` with no `files` or `differ`: its files are not read or
    stat'ed, so a change costs the same in a venv of 200 distributions as in a bare one; `audit`
    and `env` check every file, and put in `vouched` the shared objects they found as their RECORD
    says (vouched_libraries). `also`: site -> another caller's RECORD seals of it (the audit's),
    whose answers that still hold are taken (distcheck.RecordSeals)."""
    out: Dict[str, Dict[str, Any]] = {}
    for site in sites:
        try:
            names = sorted(n for n in os.listdir(site) if n.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
        cache_dir = caches.get(site)
        installers = StatCache(os.path.join(cache_dir, "installers.json") if cache_dir else None)
        identities = StatCache(
            os.path.join(cache_dir, "identities.json") if cache_dir and not files else None
        )
        seals = (
            RecordSeals(os.path.join(cache_dir, SEALS), (also or {}).get(site))
            if cache_dir and files
            else RecordSeals(None)
        )
        rows: Dict[str, Dict[str, Any]] = {}
        for dist_info in names:
            stem = dist_info.rsplit(".", 1)[0]
            name, _, version = stem.partition("-")
            key = normalize_name(name)
            if key in out:
                continue
            out[key] = {
                "name": name,
                "version": version.split("-")[0] or "unknown",
                "installer": _installer(site, dist_info, installers),
            }
            if dist_info.endswith(".egg-info"):
                out[key].update(files=0, differ=[], note="egg-info: no RECORD to verify against")
            elif managed and os.path.join(site, dist_info) == managed:
                out[key].update(files=None, differ=[], managed=True)
            elif not files:
                out[key].update(identity=_identity(site, dist_info, identities), checked="identity")
            else:
                rows[dist_info] = out[key]
        checked = shared_files(site, seals.checked(site, list(rows), cache_dir) if rows else {})
        if vouched is not None:
            vouched.update(vouched_libraries(site, checked))
        for dist_info, result in checked.items():
            row = rows[dist_info]
            row.update(
                files=result["files"],
                differ=sorted([p, k] for p, k, _ in result["findings"] if k != "shared"),
            )
            shared = sorted(p for p, k, _ in result["findings"] if k == "shared")
            if shared:  # files another distribution installed over (see distcheck.shared_files)
                row["shared"] = shared
            if result.get("identity"):
                row["identity"] = result["identity"]
            if result.get("note"):
                row["note"] = result["note"]
        installers.save()
        identities.save()
        seals.save()
    return out


def vouched_libraries(site: str, checked: Dict[str, Dict[str, Any]]) -> Dict[str, List[Any]]:
    """Absolute path -> [sha256 digest, size, mtime_ns, ctime_ns, inode, device] of every shared
    object the RECORD checks (`checked`, check_record's answers) found as listed."""
    return {
        os.path.normpath(os.path.join(site, rel)): found
        for result in checked.values()
        for rel, found in (result.get("libraries") or {}).items()
    }


def _identity(site: str, dist_info: str, cache: StatCache) -> str | None:
    """A distribution's RECORD identity (distinfo.record_identity)."""
    found = _kept(site, f"{dist_info}/RECORD", cache, lambda path: record_identity(record_rows(path)))
    return None if found is None else str(found)


def _installer(site: str, dist_info: str, cache: StatCache) -> str:
    def read(path: str) -> str:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(200).strip() or "unknown"

    return str(_kept(site, f"{dist_info}/INSTALLER", cache, read) or "unknown")


def _kept(site: str, rel: str, cache: StatCache, read: Callable[[str], Any]) -> Any:
    """What `read` makes of the file `rel` below the site dir, kept in `cache` by the file's stat
    identity; None when the file is absent or unreadable."""
    path = os.path.join(site, rel)
    try:
        st = os.stat(path)
        known = cache.lookup(rel, st)
        if known is None:
            known = read(path)
            cache.remember(rel, st, known)
    except OSError:
        return None
    return known


# ---- native libraries ------------------------------------------------------------------------
def shared_objects(site: str, listings: StatCache | None = None) -> Iterator[Tuple[str, str, os.stat_result]]:
    """(relative path, absolute path, stat) of every candidate shared object below a site dir.

    `listings` remembers, per directory, its subdirectories and candidate names, keyed by the
    directory's own stat identity: adding, removing or renaming an entry moves the directory's
    mtime and ctime, so a remembered listing is used only for a directory that has not changed
    since (and, as StatCache does, never for one changed within the clock's granularity)."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        path = os.path.join(site, rel_dir) if rel_dir else site
        listing = None
        if listings is not None:
            try:
                dst = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(dst.st_mode):
                continue
            listing = listings.lookup(path, dst)
        if listing is None:
            try:
                with os.scandir(path) as it:
                    entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            listing = (
                [
                    name
                    for name, is_dir in entries
                    if is_dir and name != "__pycache__" and not name.endswith(".dist-info")
                ],
                [
                    name
                    for name, is_dir in entries
                    if not is_dir and elf.is_candidate(name) and not name.startswith(_OURS)
                ],
            )
            if listings is not None:
                listings.remember(path, dst, listing)
        prefix = f"{rel_dir}/" if rel_dir else ""
        stack.extend(prefix + name for name in listing[0])
        for name in listing[1]:
            full = f"{path}/{name}"
            try:
                st = os.stat(full)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield prefix + name, full, st


def _sha256(path: str) -> Optional[str]:
    """The sha256 digest of a file, None if it is gone or unreadable."""
    try:
        return hash_file(path, "sha256")
    except OSError:
        return None


class Abandoned(Exception):
    """The native part given up with its pass (Resolver.finish)."""


class Resolver:
    """Where the dynamic loader would find a soname for an object, and that file's identity.

    A library inside a site dir is identified by its sha256, the digest its distribution's RECORD
    lists: the RECORD checks of the same pass read it already, and `vouched` (called once, when the
    objects are resolved; vouched_libraries) gives what they found, with the identity each file had
    when they read it. A library whose file has that identity still gets their digest; any other
    (not listed, changed, or changed since) is hashed here with sha256. A library outside the site
    dirs is hashed with the target's algorithm. Which digest a library has follows from where it is,
    never from what was cached, so two passes, two verbs and two hosts name it alike."""

    def __init__(
        self,
        sites: list[str],
        cache_dir: str | None,
        vouched: Callable[[], Dict[str, List[Any]] | None] | None = None,
    ) -> None:
        self.sites = [os.path.join(os.path.realpath(s), "") for s in sites]
        self.raw_sites = [os.path.join(s, "") for s in sites]
        self.ids = StatCache(os.path.join(cache_dir, "libraries.json") if cache_dir else None)
        self.ld_cache = StatCache(os.path.join(cache_dir, "ld.so.cache.json") if cache_dir else None)
        self._tables: dict[int, dict[str, str]] = {}
        self._memo: Dict[Tuple[Any, ...], Optional[Dict[str, Any]]] = {}
        self._vouched = vouched
        self._pending: list[tuple[Dict[str, Any], str, os.stat_result]] = []  # digests left to finish()

    def table(self, machine: int) -> dict[str, str]:
        """The loader cache for one architecture, parsed once per stat identity of the file."""
        if machine not in self._tables:
            path = "/etc/ld.so.cache"
            try:
                st = os.stat(path)
            except OSError:
                self._tables[machine] = {}
                return self._tables[machine]
            known = self.ld_cache.lookup(str(machine), st)
            if known is None:
                with open(path, "rb") as f:
                    known = elf.parse_ld_cache(f.read(), machine)
                self.ld_cache.remember(str(machine), st, known)
            self._tables[machine] = known
        return self._tables[machine]

    def portable(self, path: str) -> str:
        """`$SITE/<rel>` for a path inside a site directory, else the path itself."""
        for raw, real in zip(self.raw_sites, self.sites):
            for base in (raw, real):
                if path.startswith(base):
                    return SITE_TOKEN + path[len(base) :]
        return path

    def identity(self, path: str) -> Optional[Dict[str, Any]]:
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        portable = self.portable(path)
        algorithm = "sha256" if portable.startswith(SITE_TOKEN) else ALGORITHM
        digest = self.ids.lookup(path, st)
        if digest is not None and algorithm_of(digest) != algorithm:  # kept by a version before this rule
            digest = None
        found = {"path": portable, "size": st.st_size, "digest": digest}
        if digest is None and self._vouched is not None and algorithm == "sha256":
            self._pending.append((found, path, st))  # the RECORD checks may have read it: finish()
        elif digest is None:
            try:
                found["digest"] = digest = hash_file(path, algorithm)
            except OSError:
                return None
            self.ids.remember(path, st, digest)
        return found

    def finish(self) -> None:
        """Each library left for the RECORD checks gets its digest: theirs where its file has the
        identity it had when they read it, else the sha256 of its bytes now (None if it is gone).
        `vouched` giving None abandons the pass (its caller failed): no library is read then."""
        table = self._vouched() if self._pending and self._vouched is not None else {}
        if table is None:
            raise Abandoned("the pass that would vouch for these libraries failed")
        stats = {path: st for _, path, st in reversed(self._pending)}  # the first stat of each
        done: Dict[str, Optional[str]] = {}
        unread = []
        for path, st in stats.items():
            seen = table.get(path)
            if seen is not None and tuple(seen[1:]) == identity(st):  # as when the check read it
                done[path] = seen[0]
            else:
                unread.append(path)
        # on the cores: a change's fingerprint on a host never audited reads them all here
        done.update(zip(unread, map_files(_sha256, unread, lambda path: stats[path].st_size, cpus())))
        for path, digest in done.items():
            if digest is not None:
                self.ids.remember(path, stats[path], digest)
        for found, path, _ in self._pending:
            found["digest"] = done[path]
        self._pending.clear()

    def resolve(self, soname: str, info: Dict[str, Any], origin: str) -> Optional[Dict[str, Any]]:
        """{"path", "size", "digest", "via"} of the file the loader would load, or None.
        Order as ld.so(8): DT_RPATH (only without DT_RUNPATH), DT_RUNPATH, the loader cache, the
        default directories. LD_LIBRARY_PATH is left out on purpose: it is the environment of
        whoever runs patchkeeper, not of the service (its unit sets its own)."""
        runpath = [("runpath", elf.expand_origin(p, origin)) for p in info["runpath"]]
        rpath = [] if runpath else [("rpath", elf.expand_origin(p, origin)) for p in info["rpath"]]
        key = (soname, tuple(rpath), tuple(runpath), info["machine"], info["class"])
        if key in self._memo:
            return self._memo[key]
        found = None
        if "/" in soname:
            candidates = [("path", soname if os.path.isabs(soname) else os.path.join(origin, soname))]
        else:
            candidates = [(via, os.path.join(d, soname)) for via, d in rpath + runpath]
            cached = self.table(info["machine"]).get(soname)
            if cached:
                candidates.append(("cache", cached))
            candidates += [
                ("default", os.path.join(d, soname)) for d in elf.default_dirs(info["machine"], info["class"])
            ]
        for via, path in candidates:
            found = self.identity(path)  # a dict of its own (finish() may fill its digest in)
            if found is not None:
                found["via"] = via
                break
        self._memo[key] = found
        return found

    def save(self) -> None:
        self.ids.save()
        self.ld_cache.save()


def native(
    sites: list[str], cache_dir: str | None, vouched: Callable[[], Dict[str, List[Any]] | None] | None = None
) -> Dict[str, Dict[str, Any]]:
    """`<rel path>` -> {needed, rpath, runpath, resolved: {soname: identity or None}} for every ELF
    shared object below the site dirs (extension modules and bundled `*.libs/` libraries); `vouched`:
    the libraries the RECORD checks of the same pass read (Resolver), called once every object is
    resolved (it may wait for them)."""
    parsed = StatCache(os.path.join(cache_dir, "elf.json") if cache_dir else None)
    listings = StatCache(os.path.join(cache_dir, "dirs.cache")) if cache_dir else None
    resolver = Resolver(sites, cache_dir, vouched)
    out: Dict[str, Dict[str, Any]] = {}
    for index, site in enumerate(sites):
        for rel, path, st in shared_objects(site, listings):
            info = parsed.lookup(path, st)
            if info is None:
                try:
                    info = elf.read_dynamic(path)
                except (elf.NotElf, OSError, ValueError) as exc:
                    info = {"not_elf": str(exc)}
                parsed.remember(path, st, info)
            if "not_elf" in info:
                continue
            origin = os.path.dirname(path)
            key = rel if index == 0 or rel not in out else f"{site}/{rel}"
            out[key] = {
                "needed": info["needed"],
                "rpath": info["rpath"],
                "runpath": info["runpath"],
                "resolved": {so: resolver.resolve(so, info, origin) for so in info["needed"]},
            }
    resolver.finish()
    parsed.save()
    if listings is not None:
        listings.save()
    resolver.save()
    return out
