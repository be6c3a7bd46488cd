"""ELF shared objects read with `struct`: DT_NEEDED, RPATH/RUNPATH, and the loader's cache (stdlib only)."""

from __future__ import annotations

import os
import struct
import sys
from typing import Any, Dict

ET_DYN = 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_SONAME, DT_STRSZ, DT_RPATH, DT_RUNPATH = 0, 1, 5, 14, 10, 15, 29
PT_LOAD, PT_DYNAMIC = 1, 2
_CACHE_MAGIC = b"glibc-ld.so.cache1.1"
_FLAG_ELF_LIBC6 = 0x0003
# e_machine -> the architecture bits ld.so.cache entries carry (glibc's FLAG_*_LIB64 and friends)
_CACHE_ARCH = {62: 0x0300, 183: 0x0A00, 3: 0x0000, 40: 0x0900, 21: 0x0500, 2: 0x0000, 43: 0x0000}
_TRIPLET = {
    62: "x86_64-linux-gnu",
    183: "aarch64-linux-gnu",
    3: "i386-linux-gnu",
    21: "powerpc64le-linux-gnu",
}
_MAX_DYNAMIC = 1 << 20  # a dynamic section or string table bigger than this is not one


class NotElf(ValueError):
    """The file is not an ELF shared object this module can read."""


def is_candidate(name: str) -> bool:
    """A file name a shared object can have: `x.so`, `x.cpython-311-x86_64-linux-gnu.so`, `libx.so.1.2`."""
    return name.endswith(".so") or ".so." in name


def read_dynamic(path: str) -> Dict[str, Any]:
    """{"class", "machine", "soname", "needed", "rpath", "runpath"} of an ELF shared object (ET_DYN).

    Raises NotElf for anything else (other files, executables, object files, truncated files)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF":
            raise NotElf("no ELF header")
        cls, data = head[4], head[5]
        if cls not in (1, 2) or data not in (1, 2):
            raise NotElf("unknown ELF class or byte order")
        e = "<" if data == 1 else ">"
        if cls == 2:
            e_type, machine, _, _, phoff, _, _, _, phentsize, phnum = struct.unpack_from(
                e + "HHIQQQIHHH", head, 16
            )
            ph_fmt, dyn_fmt = e + "IIQQQQQQ", e + "qQ"
        else:
            e_type, machine, _, _, phoff, _, _, _, phentsize, phnum = struct.unpack_from(
                e + "HHIIIIIHHH", head, 16
            )
            ph_fmt, dyn_fmt = e + "IIIIIIII", e + "iI"
        if e_type != ET_DYN:
            raise NotElf("not a shared object")
        if phentsize < struct.calcsize(ph_fmt) or not 0 < phnum < 4096:
            raise NotElf("bad program headers")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        if len(table) < phentsize * phnum:
            raise NotElf("truncated program headers")
        loads, dynamic = [], None
        for i in range(phnum):
            fields = struct.unpack_from(ph_fmt, table, i * phentsize)
            if cls == 2:
                p_type, _, offset, vaddr, _, filesz, _, _ = fields
            else:
                p_type, offset, vaddr, _, filesz, _, _, _ = fields
            if p_type == PT_LOAD:
                loads.append((vaddr, offset, filesz))
            elif p_type == PT_DYNAMIC:
                dynamic = (offset, filesz)
        out: Dict[str, Any] = {
            "class": 64 if cls == 2 else 32,
            "machine": machine,
            "soname": None,
            "needed": [],
            "rpath": [],
            "runpath": [],
        }
        if dynamic is None:
            return out  # statically linked: needs nothing
        offset, size = dynamic
        if size > _MAX_DYNAMIC:
            raise NotElf("bad dynamic section")
        f.seek(offset)
        raw = f.read(size)
        step = struct.calcsize(dyn_fmt)
        tags: list[tuple[int, int]] = []
        for i in range(0, len(raw) - step + 1, step):
            tag, val = struct.unpack_from(dyn_fmt, raw, i)
            if tag == DT_NULL:
                break
            tags.append((tag, val))
        strtab = next((v for t, v in tags if t == DT_STRTAB), None)
        strsz = next((v for t, v in tags if t == DT_STRSZ), 0)
        if strtab is None or not 0 < strsz <= _MAX_DYNAMIC:
            return out
        where = next((off + strtab - va for va, off, sz in loads if va <= strtab < va + sz), None)
        if where is None:
            raise NotElf("string table outside the loaded segments")
        f.seek(where)
        strings = f.read(strsz)

    def string(at: int) -> str:
        end = strings.find(b"\0", at)
        return strings[at : end if end >= 0 else len(strings)].decode("utf-8", "surrogateescape")

    for tag, val in tags:
        if val >= len(strings):
            continue
        if tag == DT_NEEDED:
            out["needed"].append(string(val))
        elif tag == DT_SONAME:
            out["soname"] = string(val)
        elif tag == DT_RPATH:
            out["rpath"].extend(p for p in string(val).split(":") if p)
        elif tag == DT_RUNPATH:
            out["runpath"].extend(p for p in string(val).split(":") if p)
    return out


def expand_origin(entry: str, origin: str) -> str:
    """A run path entry with $ORIGIN / ${ORIGIN} replaced by the object's directory."""
    return os.path.normpath(entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin))


def parse_ld_cache(data: bytes, machine: int | None) -> dict[str, str]:
    """soname -> path from the bytes of /etc/ld.so.cache (glibc's 1.1 format, alone or after the
    old one), keeping the entries for `machine` (an e_machine; None keeps all); first entry wins,
    as in the loader (the file lists preferred entries first)."""
    start = data.find(_CACHE_MAGIC)
    if start < 0 or len(data) < start + 48:
        return {}
    order = "<" if sys.byteorder == "little" else ">"
    nlibs, _ = struct.unpack_from(order + "II", data, start + 20)
    want = _CACHE_ARCH.get(machine) if machine is not None else None
    out: dict[str, str] = {}

    def string(at: int) -> str:
        at += start
        end = data.find(b"\0", at)
        return data[at:end].decode("utf-8", "surrogateescape")

    base = start + 48
    for i in range(min(nlibs, (len(data) - base) // 24)):
        flags, key, value, _, hwcap = struct.unpack_from(order + "iIIIQ", data, base + 24 * i)
        if flags & 0x00FF != _FLAG_ELF_LIBC6 and flags & 0x00FF != 0x0001:
            continue
        if want is not None and flags & 0xFF00 != want:
            continue
        name = string(key)
        if name not in out:
            out[name] = string(value)
    return out


def default_dirs(machine: int, elf_class: int) -> list[str]:
    """The directories the loader tries last (glibc's system dirs; Debian's multiarch ones first)."""
    triplet = _TRIPLET.get(machine)
    dirs = [f"/lib/{triplet}", f"/usr/lib/{triplet}"] if triplet else []
    if elf_class == 64:
        dirs += ["/lib64", "/usr/lib64"]
    return dirs + ["/lib", "/usr/lib"]
