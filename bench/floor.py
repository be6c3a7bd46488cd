"""The hashing floor: sha256 of every file named in LISTING (one path a line), one process per CPU.

`python bench/floor.py LISTING` reads each file whole through OpenSSL (hashlib.file_digest), the
files shared out in the listing's order (the bench writes it largest first, so no CPU is left with a
big file at the end) to os.cpu_count() worker processes, and prints the file count and bytes. No checking program can read and hash the same bytes faster with the same digest: a first
audit, which must hash every file it has never seen, is judged against this.
"""

from __future__ import annotations

import hashlib
import os
import sys
from concurrent.futures import ProcessPoolExecutor


def digest(paths: list[str]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as f:
            hashlib.file_digest(f, "sha256")
            total += f.tell()
    return total


def main() -> None:
    with open(sys.argv[1]) as f:
        paths = [line.rstrip("\n") for line in f if line.strip()]
    chunks = [paths[i : i + 64] for i in range(0, len(paths), 64)]
    cpus = os.cpu_count() or 1
    with ProcessPoolExecutor(cpus) as pool:
        total = sum(pool.map(digest, chunks))
    print(f"{len(paths)} files, {total} bytes, {cpus} processes")


if __name__ == "__main__":
    main()
