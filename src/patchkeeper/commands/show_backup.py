"""`patchkeeper show-backup DIGEST`: the bytes of a backed-up file, verified, on stdout."""

from __future__ import annotations

import sys

from ..change.session import Session
from ..errors import BadInput, PatchkeeperError, StoreError
from ..workspace import Workspace
from . import emit_json, text_or_base64

MIN_HEX = 8  # a shorter prefix of a backup's digest is refused


def show_backup(ws: Workspace, target: str | None, digest: str, as_json: bool = False) -> int:
    """Print the backed-up bytes; with --json: {"target", "digest", "size", "bytes"} (or "bytes_base64"
    when they are not UTF-8 text)."""
    with Session(ws, target, "show-backup", write=False) as s:
        full = _resolve(s, digest)
        try:
            data = s.target.agent.store_get(s.target.info.store, full)  # re-hashed: a corrupt object raises
        except PatchkeeperError as exc:
            raise StoreError(
                f"cannot give back {full}: {exc}",
                "check the digest with `patchkeeper log`; a damaged store needs its backup",
            ) from None
        if as_json:
            emit_json(
                {"target": s.target.name, "digest": full, "size": len(data), **text_or_base64("bytes", data)}
            )
            return 0
        out = sys.stdout.buffer
        sys.stdout.flush()
        out.write(data)
        out.flush()
        return 0


def _resolve(s: Session, digest: str) -> str:
    """A full digest as given, or the one backup in the target's ledger whose digest starts so (as
    `log` shows one, cut short with an ellipsis, or without it)."""
    algorithm, _, hexpart = digest.removesuffix("\u2026").removesuffix("...").rpartition(":")
    if algorithm and len(hexpart) == (64 if algorithm in ("blake3", "sha256") else 0):
        return digest
    if len(hexpart) < MIN_HEX or any(c not in "0123456789abcdef" for c in hexpart):
        raise BadInput(
            f"{digest!r} is neither a digest nor a prefix of {MIN_HEX}+ hex digits of one",
            "copy the digest from `patchkeeper rollback` or `patchkeeper log`",
        )
    found = {
        d: k
        for e in s.ledger.entries()
        for k, d in e.backed_up.items()
        if d.partition(":")[2].startswith(hexpart) and (not algorithm or d.startswith(algorithm + ":"))
    }
    if len(found) == 1:
        return next(iter(found))
    if not found:
        raise BadInput(
            f"no backup on target {s.target.name} has a digest starting {digest!r}",
            "`patchkeeper log` lists the backed-up hand edits and their digests",
        )
    raise BadInput(
        f"{len(found)} backups have a digest starting {digest!r}",
        "give more digits; the candidates: " + "; ".join(f"{d} ({k})" for d, k in sorted(found.items())),
    )
