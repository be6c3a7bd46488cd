"""The sha256 floor of an audit: every regular file under the site dirs hashed once, one process per CPU.

Usage: sha256_floor.py MANIFEST.json SITE [SITE...]. Writes {path: [size, mode, sha256]} (the byte-for-byte
manifest a rollback is compared with) and prints one JSON line: files, bytes, seconds, processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def digest(path: str) -> tuple[str, int, int, str]:
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        return path, st.st_size, stat.S_IMODE(st.st_mode), hashlib.file_digest(f, "sha256").hexdigest()


def regular_files(site: str) -> list[str]:
    out = []
    for top, _dirs, files in os.walk(site):
        for name in files:
            path = os.path.join(top, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                out.append(path)
    return out


def main(argv: list[str]) -> int:
    manifest_path, sites = argv[0], argv[1:]
    started = time.perf_counter()
    paths = [p for site in sites for p in regular_files(site)]
    listed = time.perf_counter()
    processes = os.cpu_count() or 1
    with ProcessPoolExecutor(processes) as pool:
        rows = list(pool.map(digest, paths, chunksize=64))
    done = time.perf_counter()
    with open(manifest_path, "w") as f:
        json.dump({p: [size, mode, d] for p, size, mode, d in rows}, f, sort_keys=True)
    print(
        json.dumps(
            {
                "files": len(rows),
                "bytes": sum(r[1] for r in rows),
                "processes": processes,
                "walk_s": round(listed - started, 3),
                "seconds": round(done - started, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
