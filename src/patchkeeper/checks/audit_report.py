"""An audit's answer: its findings, each of one class, and the report of one target, with its
summary line and its JSON document (docs/json.md)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..records.ledger import State

CLASSES = ("drift", "environment", "native", "bytecode", "probe", "patched")
INSTALLATION = "drift"  # the class of a change of the managed distribution's installation (installation.py)


@dataclass(frozen=True)
class Finding:
    """One thing an audit found, of one class (CLASSES), at one path."""

    cls: str  # one of CLASSES
    path: str  # site-relative path, "@role", or a module name for probes
    kind: str  # changed | added | removed | mode | missing | stale | mismatch | sourceless | import-failed …
    detail: str
    dist: str = ""  # the distribution a file belongs to, where known

    def to_dict(self) -> dict[str, Any]:
        return {
            "class": self.cls,
            "path": self.path,
            "kind": self.kind,
            "detail": self.detail,
            "dist": self.dist,
        }


@dataclass(frozen=True)
class AuditReport:
    """One target's audit: what was checked against which recorded state, and what was found."""

    target: str
    host: str
    package: str
    state: State | None
    files: int  # files checked (package, other distributions' RECORD entries, bytecode)
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    differences: dict[str, str] = field(default_factory=dict)  # key -> kind, files that differ from `state`

    def count(self, cls: str) -> int:
        return sum(1 for f in self.findings if f.cls == cls)

    @property
    def trouble(self) -> bool:
        return any(f.cls != "patched" for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 1 if self.trouble else 0

    def summary(self) -> str:
        """One line saying where the trouble is."""
        parts = []
        drift = self.count("drift")
        installed = [
            f.detail for f in self.findings if f.cls == INSTALLATION and f.path.endswith(".dist-info")
        ]
        if installed:
            parts.extend(installed)
            drift -= len(installed)
        if self.state is None:
            parts.append(
                f"no recorded state; {self.package} matches its RECORD"
                if not drift
                else f"no recorded state; {self.package} differs from its RECORD in {drift} file(s)"
            )
        else:
            name = f"{self.state.id} ({self.state.stack_text().strip('()')})"
            parts.append(
                f"code state matches {name}"
                if not drift
                else f"code state {name} has {drift} file(s) changed outside patchkeeper"
            )
        dists = _unique(f.dist or f.path for f in self.findings if f.cls == "environment")
        if dists:
            parts.append("environment drift in " + ", ".join(dists))
        damaged = _unique(f.path for f in self.findings if f.cls == "native" and f.kind == "damaged")
        if damaged:
            parts.append(
                f"{len(damaged)} shared object(s) damaged (they differ from their RECORD; "
                "`patchkeeper repair DIST` puts the release's bytes back)"
            )
        natives = _unique(f.path for f in self.findings if f.cls == "native" and f.kind != "damaged")
        if natives:
            parts.append(f"{len(natives)} shared object(s) no longer load their libraries as recorded")
        pycs = self.count("bytecode")
        if pycs:
            parts.append(
                f"{pycs} pyc file(s) do not match their source (Python runs them instead: delete them and "
                "Python compiles the source again"
                + (
                    ", or `snapshot --restore-pristine` takes them out, backed up"
                    if self.state is None
                    else ""
                )
                + ")"
            )
        probes = _unique(f.path for f in self.findings if f.cls == "probe")
        if probes:
            parts.append("import fails: " + ", ".join(probes))
        if len(parts) == 1 + len(installed):
            parts.append("environment clean")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "host": self.host,
            "package": self.package,
            "state": self.state.to_dict() if self.state else None,
            "files": self.files,
            "counts": {c: self.count(c) for c in CLASSES},
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
            "summary": self.summary(),
            "exit": self.exit_code,
        }


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
