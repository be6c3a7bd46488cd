"""The fingerprint's GPU stack: `nvidia-smi -q -x` parsed (driver, CUDA, each GPU's identity, memory,
retired pages, remapped rows, ECC) and the recent NVRM Xid lines of the kernel log.

Standard library only (it runs in a remote host's interpreter, beside fingerprint.py).
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from typing import Any, Dict, Iterable, List, Optional

NO_DRIVER = "no NVIDIA driver"
XID_KEEP = 20  # most recent Xid lines kept


def gpu() -> Dict[str, Any]:
    """One `nvidia-smi -q -x`, parsed; or {"driver": None, "note": "no NVIDIA driver"}."""
    out: Dict[str, Any]

    exe = _which("nvidia-smi")
    if exe is None:
        return {"driver": None, "note": NO_DRIVER}

    try:
        proc = subprocess.run([exe, "-q", "-x"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        out = {"driver": None, "note": f"nvidia-smi failed: {exc}"}
    else:
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()[-1:]
            out = {
                "driver": None,
                "note": f"nvidia-smi exited {proc.returncode}" + (f": {tail[0]}" if tail else ""),
            }
        else:
            try:
                out = parse_nvidia_smi(proc.stdout)
            except ValueError as exc:
                out = {"driver": None, "note": f"nvidia-smi -q -x printed no XML this parser reads: {exc}"}
    xid = kernel_xid()
    if xid is not None:
        out["xid"] = xid
    return out


def _which(name: str) -> Optional[str]:
    """shutil.which for a bare name, without loading shutil on every fingerprint of a host without GPUs."""
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(directory or os.curdir, name)
        if os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path):
            return path
    return None


def _text(node: Any, path: str) -> Optional[str]:
    found = node.find(path) if node is not None else None
    value = (found.text or "").strip() if found is not None else ""
    return value if value and value not in ("N/A", "Unknown Error", "[N/A]") else None


def parse_nvidia_smi(xml: bytes) -> Dict[str, Any]:
    """Driver, CUDA, and per GPU: name, UUID, bus id, memory total, retired pages, remapped rows, ECC."""

    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise ValueError(str(exc)) from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"root element <{root.tag}>")
    gpus: List[Dict[str, Any]] = []
    for g in root.findall("gpu"):
        row: Dict[str, Any] = {
            "name": _text(g, "product_name"),
            "uuid": _text(g, "uuid"),
            "bus_id": _text(g, "pci/pci_bus_id") or g.get("id"),
            "memory_total": _text(g, "fb_memory_usage/total"),
        }
        retired = {
            k: v
            for k, v in (
                ("single_bit", _text(g, "retired_pages/multiple_single_bit_retirement/retired_count")),
                ("double_bit", _text(g, "retired_pages/double_bit_retirement/retired_count")),
                ("pending", _text(g, "retired_pages/pending_retirement")),
            )
            if v is not None
        }
        if retired:
            row["retired_pages"] = retired
        remapped = {
            k: v
            for k, v in (
                ("correctable", _text(g, "remapped_rows/remapped_row_corr")),
                ("uncorrectable", _text(g, "remapped_rows/remapped_row_unc")),
                ("pending", _text(g, "remapped_rows/remapped_row_pending")),
                ("failure", _text(g, "remapped_rows/remapped_row_failure")),
            )
            if v is not None
        }
        if remapped:
            row["remapped_rows"] = remapped
        ecc = _ecc(g)
        if ecc:
            row["ecc"] = ecc
        gpus.append(row)
    return {"driver": _text(root, "driver_version"), "cuda": _text(root, "cuda_version"), "gpus": gpus}


def _ecc(g: Any) -> Dict[str, str]:
    """ECC mode and the volatile / aggregate error counts, correctable and uncorrectable (DRAM and SRAM summed)."""
    out: Dict[str, str] = {}
    mode = _text(g, "ecc_mode/current_ecc")
    if mode is not None:
        out["mode"] = mode
    for scope in ("volatile", "aggregate"):
        counters = g.find(f"ecc_errors/{scope}")
        if counters is None:
            continue
        for kind in ("correctable", "uncorrectable"):
            values = [
                (c.text or "").strip()
                for c in counters
                if c.tag.endswith(f"_{kind}") or c.tag.startswith(f"sram_{kind}_")
            ]
            if values and all(v.isdigit() for v in values):
                out[f"{scope}_{kind}"] = str(sum(int(v) for v in values))
    return out


def xid_lines(records: Iterable[str]) -> List[str]:
    """The NVRM Xid lines among kernel log records (`/dev/kmsg` records or dmesg lines), newest last."""
    out = []
    for rec in records:
        if "Xid" not in rec:
            continue
        head, sep, text = rec.partition(";")
        if sep and head.count(",") >= 2:  # /dev/kmsg: "prio,seq,usec,flags;text"
            usec = head.split(",")[2]
            line = f"[{int(usec) / 1e6:12.6f}] {text.strip()}" if usec.isdigit() else text.strip()
        else:
            line = rec.strip()
        if "NVRM: Xid" in line:
            out.append(line)
    return out[-XID_KEEP:]


def kernel_xid() -> list[str] | None:
    """Recent Xid lines of the kernel log, when the login may read it; None when it may not."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records = []
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: the record was overwritten while reading; go on
                    continue
                break
            if not chunk:
                break
            records.append(chunk.decode("utf-8", "replace"))
    finally:
        os.close(fd)
    return xid_lines(records)
