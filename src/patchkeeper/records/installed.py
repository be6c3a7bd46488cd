"""What a state records of the managed distribution's installation (checks/installation.py compares it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..targets import TargetInfo


@dataclass(frozen=True)
class Installed:
    """One installation of the managed distribution, as a state's ledger entry records it.

    `files` is a digest of what its RECORD says the release's files are (host/distinfo.installation):
    the same for two installs of one wheel, by pip or by uv. `record` (RECORD's size and mtime)
    moves with every reinstall and is kept by a copy of the venv; `installer` is INSTALLER's word."""

    dist_info: str
    version: str
    installer: str = ""
    files: str | None = None
    rows: int = 0
    record: tuple[int, int] | None = None

    @classmethod
    def of(cls, info: TargetInfo) -> Installed:
        found = info.installation or {}
        record = found.get("record")
        return cls(
            info.dist_info,
            info.version,
            found.get("installer") or "",
            found.get("files"),
            int(found.get("rows") or 0),
            (int(record[0]), int(record[1])) if record else None,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Installed:
        record = d.get("record")
        return cls(
            str(d.get("dist_info", "")),
            str(d.get("version", "")),
            str(d.get("installer") or ""),
            d.get("files"),
            int(d.get("rows") or 0),
            (int(record[0]), int(record[1])) if record else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "dist_info": self.dist_info,
            "version": self.version,
            "installer": self.installer,
            "files": self.files,
            "rows": self.rows,
            "record": list(self.record) if self.record else None,
        }
