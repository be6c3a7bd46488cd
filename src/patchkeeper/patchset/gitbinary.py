"""git's binary patches (`GIT binary patch`): base85 lines of zlib data, a literal or a delta, as
git's apply.c reads them (parse_binary_hunk, decode_85) and patch-delta.c applies a delta."""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

from ..errors import BadInput, HunkFailed

NULL_ID = "0" * 40


@dataclass(frozen=True)
class BinaryPatch:
    """One file's binary change: the forward literal or delta, still encoded, and the blob ids of
    the bytes before and after (git writes them in full with --binary, and checks both)."""

    method: str  # "literal" | "delta"
    size: int  # the inflated size git wrote after the method
    lines: tuple[str, ...]  # the base85 lines, each led by its length character
    old_id: str
    new_id: str


def blob_sha1(data: bytes) -> str:
    """git's full object name of a blob."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _length(c: str) -> int:
    """A line's byte count from its first character: A-Z are 1-26, a-z are 27-52."""
    if "A" <= c <= "Z":
        return ord(c) - ord("A") + 1
    if "a" <= c <= "z":
        return ord(c) - ord("a") + 27
    return -1


MAX_SIZE = (
    1 << 30
)  # bytes a binary patch may declare: the file is held in memory whole, as git apply holds it
# Bytes the binary patches of one patch set may declare in all (each chunk inflated, forward and
# reverse, and each delta's result): `check` and `apply` hold every file they build at once. A whole
# sglang release diff (0.5.22 to 0.5.23, five .so files of 46 MB) declares under 100 MB.
MAX_TOTAL = 1 << 30
_STEP = 1 << 20  # bytes inflated or built at a time, each step checked against the declared size
_REDO = "write the diff again with `git diff --binary`"


def decode(patch: BinaryPatch, where: str) -> bytes:
    """The inflated data of the forward chunk (base85 of git's alphabet, which is RFC 1924's),
    inflated a step at a time and refused as soon as it passes the size the chunk declares: a few
    kilobytes of patch cannot take more memory than what they claim to hold."""
    if patch.size > MAX_SIZE:
        raise BadInput(
            f"{where}: the binary patch declares {patch.size} bytes, over the {MAX_SIZE >> 20} MiB "
            "patchkeeper holds in memory for one file",
            "ship a file that large another way than in a patch set",
        )
    try:
        return inflate(_base85(patch.lines), patch.size)
    except (ValueError, zlib.error) as exc:
        raise BadInput(f"{where}: corrupt binary patch: {exc}", _REDO) from None


def held(patch: BinaryPatch, where: str) -> int:
    """Bytes `patch` makes patchkeeper hold: its chunk inflated and, for a delta, the result the delta
    declares, read from the delta's first bytes (a few of its lines inflated, never the whole chunk)."""
    if patch.method == "literal":
        return patch.size
    try:
        head = zlib.decompressobj().decompress(_base85(patch.lines[:64]), 20)
        _, pos = _varint(head, 0)
        result, _ = _varint(head, pos)
    except (ValueError, zlib.error) as exc:
        raise BadInput(f"{where}: corrupt binary delta: {exc}", _REDO) from None
    return patch.size + result


def refuse_over_total(declared: int, where: str) -> None:
    """BadInput when binary patches declare more than MAX_TOTAL bytes in all, before any is inflated."""
    if declared > MAX_TOTAL:
        raise BadInput(
            f"{where}: the binary patches declare {declared} bytes in all, over the "
            f"{MAX_TOTAL >> 20} MiB patchkeeper holds in memory for one patch set",
            "ship files that large another way than in a patch set",
        )


def inflate(data: bytes, size: int) -> bytes:
    """zlib `data` that must inflate to exactly `size` bytes; ValueError as soon as it passes them
    (never more than size + 1 bytes of output are asked of zlib), or when it ends early."""
    stream = zlib.decompressobj()
    out = bytearray(stream.decompress(data, min(_STEP, size + 1)))
    while not stream.eof and len(out) <= size:
        piece = stream.decompress(stream.unconsumed_tail, min(_STEP, size + 1 - len(out)))
        if not piece and not stream.unconsumed_tail:
            break  # all input read, no output pending: the stream was cut
        out += piece
    if len(out) > size:
        raise ValueError(f"it inflates past the {size} bytes it declares")
    if not stream.eof:
        raise ValueError("the zlib stream ends early")
    if len(out) != size:
        raise ValueError(f"{len(out)} bytes inflated, {size} declared")
    return bytes(out)


_ALPHABET = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_DIGITS = bytes.maketrans(_ALPHABET, bytes(range(85)))


def _base85(lines: tuple[str, ...]) -> bytes:
    """The bytes of git's base85 lines (each line's bytes, its padding to 4 dropped)."""
    sizes = [_length(line[0]) for line in lines]
    if any(len(line) != 1 + (n + 3) // 4 * 5 or n < 0 for line, n in zip(lines, sizes)):
        raise ValueError("a base85 line whose length is not the one its first character gives")
    if all(n % 4 == 0 for n in sizes[:-1]):  # git's own lines: 52 bytes each but the last
        return _words("".join(line[1:] for line in lines))[: sum(sizes)]
    return b"".join(_words(line[1:])[:n] for line, n in zip(lines, sizes))


def _words(text: str) -> bytes:
    """Base85 digits, 5 to a big-endian 32-bit word. The words are summed as whole-number columns
    (one big integer per digit place, 32 bits a word) rather than one by one in Python, which is
    100x slower for a release's .so. A word over 2**32 spills into the next one and gives other
    bytes, which zlib or the blob id check after inflating refuses."""
    body = text.encode("ascii")
    if len(body) % 5 or body.translate(None, _ALPHABET):
        raise ValueError("a base85 line of the wrong length or with a character outside git's alphabet")
    digits = body.translate(_DIGITS)
    words = len(digits) // 5
    total = 0
    for place in range(5):
        column = bytearray(4 * words)
        column[0::4] = digits[place::5]
        total = total * 85 + int.from_bytes(column, "little")
    little = total.to_bytes(4 * words + 8, "little")[: 4 * words]
    out = bytearray(4 * words)
    for k in range(4):
        out[k::4] = little[3 - k :: 4]
    return bytes(out)


def _varint(delta: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(delta):
            raise ValueError("the delta ends in its header")
        byte = delta[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def apply_delta(source: bytes, delta: bytes) -> bytes:
    """git's patch_delta: copy runs of the source and insert literal bytes. The result's declared size
    is checked first (at most MAX_SIZE) and every op against it before it runs, so the output never
    passes it; a copy outside the source is refused. A copy's offset and size bytes are read one `if`
    each, as patch-delta.c does: a release's .so deltas hold a few hundred thousand of them."""
    size, pos = _varint(delta, 0)
    if size != len(source):
        raise ValueError(f"the delta is for {size} bytes, the file has {len(source)}")
    want, pos = _varint(delta, pos)
    if want > MAX_SIZE:
        raise ValueError(f"the delta declares a result of {want} bytes, over {MAX_SIZE >> 20} MiB")
    out = bytearray()
    end = len(delta)
    while pos < end:
        cmd = delta[pos]
        pos += 1
        if cmd & 0x80:
            offset = length = 0
            if cmd & 0x01:
                offset = delta[pos]
                pos += 1
            if cmd & 0x02:
                offset |= delta[pos] << 8
                pos += 1
            if cmd & 0x04:
                offset |= delta[pos] << 16
                pos += 1
            if cmd & 0x08:
                offset |= delta[pos] << 24
                pos += 1
            if cmd & 0x10:
                length = delta[pos]
                pos += 1
            if cmd & 0x20:
                length |= delta[pos] << 8
                pos += 1
            if cmd & 0x40:
                length |= delta[pos] << 16
                pos += 1
            length = length or 0x10000
            if offset + length > size:
                raise ValueError("the delta copies past the end of the file")
            if len(out) + length > want:
                raise ValueError(f"the delta builds past the {want} bytes it declares")
            out += source[offset : offset + length]
        elif cmd:
            if pos + cmd > end:
                raise ValueError("the delta ends inside an insert")
            if len(out) + cmd > want:
                raise ValueError(f"the delta builds past the {want} bytes it declares")
            out += delta[pos : pos + cmd]
            pos += cmd
        else:
            raise ValueError("the delta holds the reserved opcode 0")
    if len(out) != want:
        raise ValueError(f"the delta gives {len(out)} bytes, {want} declared")
    return bytes(out)


def check_old(patch: BinaryPatch, data: bytes | None, where: str) -> None:
    """HunkFailed unless `data` is the blob the patch names as its old one (as git apply checks)."""
    old_id = blob_sha1(data) if data is not None else NULL_ID
    if old_id != patch.old_id:
        raise HunkFailed(
            f"{where}: the binary patch is for blob {patch.old_id[:12]}, the file is {old_id[:12]}",
            "the file differs from what the patch set was written against; "
            "run `patchkeeper check` or rebuild the patch set",
        )


def apply(patch: BinaryPatch, data: bytes | None, where: str) -> bytes:
    """The file's new bytes; HunkFailed unless `data` is the blob the patch names as its old one."""
    check_old(patch, data, where)
    payload = decode(patch, where)
    if patch.method == "literal":
        out = payload
    else:
        try:
            out = apply_delta(data or b"", payload)
        except IndexError:
            raise BadInput(f"{where}: corrupt binary delta: it ends inside a copy", _REDO) from None
        except ValueError as exc:
            raise BadInput(f"{where}: corrupt binary delta: {exc}", _REDO) from None
    if blob_sha1(out) != patch.new_id:
        raise BadInput(
            f"{where}: the binary patch gives blob {blob_sha1(out)[:12]}, not the {patch.new_id[:12]} "
            "it names",
            "write the diff again with `git diff --binary`",
        )
    return out
