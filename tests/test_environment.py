"""The environment fingerprint on real things: real wheels (six 1.16/1.17, markupsafe, torchcodec
--no-deps), a shared library built here with cc in the auditwheel layout, a stand-in nvidia-smi
printing a real H200 host's XML, and two hosts behind the test sshd."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SITE_REL, copy_venv, edit_file, fingerprinted, make_workspace
from made_wheels import pip_install
from sshd import sshd  # noqa: F401 (a fixture)

from patchkeeper import workspace
from patchkeeper.commands.verify import PREVIOUS_FAILS
from patchkeeper.host import elf, fingerprint, gpu as gpu_stack

WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels"))
CAPTURED = REPO.parent / "shared" / "fixtures" / "gpu-host-h200"
if not CAPTURED.exists():  # the worktrees of this repository sit one level deeper than main
    CAPTURED = Path("/work/shared/fixtures/gpu-host-h200")
# Two real H200 hosts' `nvidia-smi -q -x`: one captured by hand, one printed on the device machine (its README).
GPU_HOSTS = {
    "captured": CAPTURED / "nvidia-smi-q.xml",
    "device": REPO / "tests" / "fixtures" / "gpu-host-h200-device" / "nvidia-smi-q.xml",
}
GPU_XML = GPU_HOSTS["captured"]
UUIDS = {
    "captured": "GPU-24f329aa-fbed-d450-0b08-05de21981072",
    "device": "GPU-e416addf-13cd-bdcd-3df9-5916bbc6758d",
}


def wheel(pattern: str) -> Path:
    found = sorted(WHEELS.glob(pattern)) or sorted((WHEELS / "env").glob(pattern))
    if not found:
        pytest.fail(f"no {pattern} in {WHEELS}: run `make test`, which downloads it")
    return found[0]


@pytest.fixture(scope="module")
def env_pristine(pristine_venv, tmp_path_factory) -> Path:
    """sglang plus six 1.17.0, markupsafe (a .so) and torchcodec --no-deps (its .so files need
    FFmpeg and libtorch, which are not here)."""
    venv = tmp_path_factory.mktemp("env-pristine") / "venv"
    subprocess.run(["cp", "-a", str(pristine_venv), str(venv)], check=True)
    pip_install(venv, wheel("six-1.17.0-*.whl"), wheel("markupsafe-*.whl"), wheel("torchcodec-0.17.0-*.whl"))
    return venv


def build_ext(site: Path, marker: str = "one") -> None:
    """pkg/_ext.so with RUNPATH $ORIGIN/../pkg.libs needing pkg.libs/libdep.so.1, built with cc."""
    src = site.parent / f"csrc-{marker}"
    src.mkdir(exist_ok=True)
    (src / "dep.c").write_text(f'const char *dep_marker(void) {{ return "{marker}"; }}\n')
    (src / "ext.c").write_text(
        "#include <string.h>\nconst char *dep_marker(void);\n"
        "size_t ext(void) { return strlen(dep_marker()); }\n"
    )
    (site / "pkg.libs").mkdir(exist_ok=True)
    (site / "pkg").mkdir(exist_ok=True)
    dep = site / "pkg.libs" / "libdep.so.1"
    tmp = src / "libdep.so.1"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-Wl,-soname,libdep.so.1", "-o", str(tmp), str(src / "dep.c")], check=True
    )
    dep.unlink(missing_ok=True)
    shutil.copy(tmp, dep)
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-o",
            str(site / "pkg" / "_ext.so"),
            str(src / "ext.c"),
            f"-L{src}",
            "-l:libdep.so.1",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../pkg.libs",
        ],
        check=True,
    )


@pytest.fixture
def eenv(tmp_path, env_pristine):
    venv = copy_venv(env_pristine, tmp_path / "venv")
    build_ext(venv / SITE_REL)
    return make_workspace(tmp_path / "ws", venv)


def stand_in_nvidia_smi(
    bindir: Path, driver: str | None = None, gpus: int = 1, xml_path: Path = GPU_XML
) -> dict:
    """A `nvidia-smi` that prints a real H200 host's `-q -x` output (optionally with another
    driver version, or its GPU repeated): the environment for a CLI run with it on PATH."""
    xml = xml_path.read_text()
    if driver:
        xml = xml.replace(
            "<driver_version>580.159.04</driver_version>", f"<driver_version>{driver}</driver_version>"
        )
    if gpus > 1:
        start, end = xml.index("\t<gpu id="), xml.index("</gpu>") + len("</gpu>\n")
        block = xml[start:end]
        uuid = block[block.index("<uuid>") + len("<uuid>") :][:12]  # GPU-xxxxxxxx
        copies = [
            block.replace(uuid, f"GPU-{i:08x}").replace("00:06.0", f"00:{6 + i:02x}.0")
            for i in range(1, gpus)
        ]
        xml = xml[:end] + "".join(copies) + xml[end:]
        xml = xml.replace("<attached_gpus>1</attached_gpus>", f"<attached_gpus>{gpus}</attached_gpus>")
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / "nvidia-smi.xml").write_text(xml)
    script = bindir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ "$1 $2" = "-q -x" ] || exit 2\nexec cat "{bindir / "nvidia-smi.xml"}"\n')
    script.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


def env_json(e, *args, env=None) -> dict:
    return json.loads(e.pk("env", "--json", *args, env=env).stdout)


# ---- the parts, on real files ------------------------------------------------------------------
def test_elf_reader_and_loader_cache_agree_with_the_toolchain(tmp_path):
    site = tmp_path / "site-packages"
    site.mkdir()
    build_ext(site)
    ext = elf.read_dynamic(str(site / "pkg" / "_ext.so"))
    assert "libdep.so.1" in ext["needed"] and ext["runpath"] == ["$ORIGIN/../pkg.libs"] and ext["rpath"] == []
    assert elf.read_dynamic(str(site / "pkg.libs" / "libdep.so.1"))["soname"] == "libdep.so.1"
    (site / "not-elf.so").write_bytes(b"#!/bin/sh\n")
    with pytest.raises(elf.NotElf):
        elf.read_dynamic(str(site / "not-elf.so"))
    # /etc/ld.so.cache parsed with struct gives what `ldconfig -p` prints (first entry per name)
    cache = elf.parse_ld_cache(Path("/etc/ld.so.cache").read_bytes(), ext["machine"])
    printed: dict[str, str] = {}
    arch = {62: "x86-64", 183: "AArch64"}.get(ext["machine"], "")
    for line in subprocess.run(
        ["ldconfig", "-p"], capture_output=True, text=True, check=True
    ).stdout.splitlines()[1:]:
        name, _, path = line.strip().partition(" => ")
        if arch in name:
            printed.setdefault(name.split(" (")[0], path)
    assert cache == printed and "libc.so.6" in cache
    # the resolver follows RUNPATH ($ORIGIN expanded), then the cache, and names site files portably
    got = fingerprint.native([str(site)], None)["pkg/_ext.so"]["resolved"]
    assert (
        got["libdep.so.1"]["path"] == "$SITE/pkg.libs/libdep.so.1" and got["libdep.so.1"]["via"] == "runpath"
    )
    assert got["libc.so.6"]["via"] in ("cache", "default")


def own_record(site: Path, *rels: str) -> str:
    """A distribution `pkgdep` whose RECORD lists `rels` with their sha256, as pip writes one; its
    dist-info name."""
    info = site / "pkgdep-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkgdep\nVersion: 1.0\n")
    rows = []
    for rel in rels:
        data = (site / rel).read_bytes()
        b64 = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={b64},{len(data)}\n")
    (info / "RECORD").write_text("".join(rows) + f"{info.name}/RECORD,,\n")
    return info.name


def test_a_library_its_record_lists_is_named_by_that_digest_and_not_read_again(eenv, monkeypatch, tmp_path):
    """A first audit reads every file a RECORD lists (sha256), and the native part named each library
    it resolves by a digest of its own (3.2 GB of the serving venv read twice). A library inside the
    site dir is named by its sha256 now: the RECORD check's, for a file as its RECORD says and as it
    was when read; the sha256 of its bytes for any other. Every pass and verb names it alike; one
    outside the site dir keeps the target's algorithm."""
    from dataclasses import replace

    from patchkeeper.checks.scan import scan_request
    from patchkeeper.host.agent import Agent
    from patchkeeper.host.contract import TreeRequest
    from patchkeeper.host.disk import ALGORITHM
    from patchkeeper.targets import open_target

    site, dep = eenv.site, eenv.site / "pkg.libs" / "libdep.so.1"
    listed = own_record(site, "pkg.libs/libdep.so.1", "pkg/_ext.so")
    eenv.pk("snapshot", "--name", "s0")
    manifest = json.loads(eenv.pk("status", "--json").stdout)["state"]["manifest"]
    hashed: list[str] = []
    real = fingerprint.hash_file
    monkeypatch.setattr(
        fingerprint, "hash_file", lambda path, algo=None: hashed.append(path) or real(path, algo)
    )
    request = TreeRequest(
        str(eenv.state_dir / "store"),
        manifest,
        scan_request(open_target(workspace.load(eenv.root).target(None))),
        f"cpython-{sys.version_info.major}{sys.version_info.minor}",
        records=(listed,),
        record_cache=str(tmp_path / "records"),
        native_sites=(str(site),),
        native_cache=str(tmp_path / "native"),
    )

    def digest_of(answer) -> str:
        return answer.native["pkg/_ext.so"]["resolved"]["libdep.so.1"]["digest"]

    want = "sha256:" + hashlib.sha256(dep.read_bytes()).hexdigest()
    cold = Agent().audit_tree(request)
    assert not cold.records[listed].findings and digest_of(cold) == want
    assert str(dep) not in hashed  # the RECORD check's digest: read once
    libc = cold.native["pkg/_ext.so"]["resolved"]["libc.so.6"]
    assert not libc["path"].startswith("$SITE/") and libc["digest"].startswith(f"{ALGORITHM}:")
    assert digest_of(Agent().audit_tree(request)) == want  # warm, from the caches

    # the fingerprints of `env` (every RECORD checked) and of a change (none: the file is hashed) agree
    for parts in (("native", "distributions"), ("native", "identities")):
        hashed.clear()
        fp = fingerprint.take([str(site)], str(tmp_path / "-".join(parts)), str(site), parts)
        assert fp["native"]["pkg/_ext.so"]["resolved"]["libdep.so.1"]["digest"] == want
        assert (str(dep) in hashed) == (parts[1] == "identities")

    # other bytes than its RECORD lists: named by their own digest, never the RECORD's
    edit_file(dep, dep.read_bytes() + b"\0")
    hashed.clear()
    again = Agent().audit_tree(request)
    assert [f[:2] for f in again.records[listed].findings] == [("pkg.libs/libdep.so.1", "changed")]
    assert digest_of(again) == "sha256:" + hashlib.sha256(dep.read_bytes()).hexdigest() != want
    assert str(dep) in hashed
    assert digest_of(Agent().audit_tree(replace(request, native_cache=None))) == digest_of(again)


def test_an_audit_pass_that_fails_leaves_its_libraries_unread(eenv, monkeypatch, tmp_path):
    """Ctrl-C (or any error) during the RECORD checks: the native part, waiting for their digests,
    ends without reading the libraries it left for them, and the interrupt comes through."""
    from patchkeeper.host import treecheck
    from patchkeeper.host.agent import Agent
    from patchkeeper.host.contract import ScanRequest, TreeRequest

    site, dep = eenv.site, eenv.site / "pkg.libs" / "libdep.so.1"
    hashed: list[str] = []
    real = fingerprint.hash_file
    monkeypatch.setattr(
        fingerprint, "hash_file", lambda path, algo=None: hashed.append(path) or real(path, algo)
    )

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(treecheck, "_records", interrupted)
    request = TreeRequest(
        str(tmp_path / "store"),
        "blake3:" + "0" * 64,
        ScanRequest(str(site), walk=("pkg",)),
        "cpython-311",
        native_sites=(str(site),),
        native_cache=str(tmp_path / "native"),
    )
    with pytest.raises(KeyboardInterrupt):
        Agent().audit_tree(request)
    assert str(dep) not in hashed and not any(p.startswith(str(site)) for p in hashed)


def test_a_record_checks_digest_names_only_the_file_it_read(tmp_path):
    """fingerprint.Resolver takes a RECORD check's digest for a library only while the file has the
    identity it had when the check read it (a digest planted here, which no read would give)."""
    site = tmp_path / "site"
    (site / "lib").mkdir(parents=True)
    lib = site / "lib" / "libx.so.1"
    lib.write_bytes(b"\x7fELF not really")
    st = lib.stat()
    planted = "sha256:" + "ab" * 32
    table = {str(lib): [planted, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]}

    def named() -> str:
        resolver = fingerprint.Resolver([str(site)], None, lambda: table)
        found = resolver.identity(str(lib))
        resolver.finish()
        return found["digest"]

    assert named() == planted
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # the same bytes, another identity
    assert named() == "sha256:" + hashlib.sha256(lib.read_bytes()).hexdigest()


def test_library_digests_of_two_algorithms_are_not_compared():
    """A fingerprint taken before a library inside the site dir was named by its sha256 holds the
    target's algorithm's digest for it: no "changed" from that alone, while two digests of one
    algorithm still tell other bytes."""
    from patchkeeper.checks.environment import native_changes

    def fp(digest: str) -> dict:
        where = {"path": "$SITE/pkg.libs/libdep.so.1", "size": 10, "digest": digest, "via": "runpath"}
        return {"pkg/_ext.so": {"needed": ["libdep.so.1"], "resolved": {"libdep.so.1": where}}}

    assert native_changes(fp("blake3:" + "1" * 64), fp("sha256:" + "2" * 64)) == []
    assert [c[1] for c in native_changes(fp("sha256:" + "1" * 64), fp("sha256:" + "2" * 64))] == ["changed"]


def test_the_fingerprint_lists_no_stage_or_temp_file_of_patchkeeper(tmp_path):
    """A transaction stages `.pk-stage-<id>-<name>` beside a shared object it replaces while its
    fingerprint may be taken (environment.taking): such names are never libraries anything loads."""
    site = tmp_path / "site-packages"
    site.mkdir()
    build_ext(site)
    ext = site / "pkg" / "_ext.so"
    shutil.copy(ext, site / "pkg" / ".pk-stage-20260101T000000-abcdef-_ext.so")
    shutil.copy(ext, site / "pkg" / ".pk-tmp-1234-5678.so")
    shutil.copy(ext, site / "pkg" / "_other.so")  # the control: any other name is listed
    listed = set(fingerprint.native([str(site)], None))
    assert {"pkg/_ext.so", "pkg/_other.so"} <= listed
    assert not [k for k in listed if "/.pk-" in k]


def test_xid_lines_from_kmsg_records_and_dmesg_lines():
    records = [
        "6,100,5000000,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04\n",
        "4,101,7123456,-;NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python3, GPU has fallen off the bus.\n",
        "[  912.5] NVRM: Xid (PCI:0000:00:06): 48, pid=77, DBE (0x2,0x1) has been detected.\n",
    ]
    assert gpu_stack.xid_lines(records) == [
        "[    7.123456] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        "[  912.5] NVRM: Xid (PCI:0000:00:06): 48, pid=77, DBE (0x2,0x1) has been detected.",
    ]


@pytest.mark.parametrize("host", sorted(GPU_HOSTS))
def test_nvidia_smi_xml_of_real_h200_hosts(host):
    """Field by field what `nvidia-smi -q -x` printed on each host (driver, CUDA, model, memory, ECC, rows)."""
    xml = GPU_HOSTS[host].read_bytes()
    gpu = gpu_stack.parse_nvidia_smi(xml)
    assert gpu["driver"] == "580.159.04" and gpu["cuda"] == "13.0"
    assert gpu["gpus"] == [
        {
            "name": "NVIDIA H200",
            "uuid": UUIDS[host],
            "bus_id": "00000000:00:06.0",
            "memory_total": "143771 MiB",
            "remapped_rows": {"correctable": "0", "uncorrectable": "0", "pending": "No", "failure": "No"},
            "ecc": {
                "mode": "Enabled",
                "volatile_correctable": "0",
                "volatile_uncorrectable": "0",
                "aggregate_correctable": "0",
                "aggregate_uncorrectable": "0",
            },
        }
    ]
    # The counts are sums over DRAM and SRAM: a volatile DRAM error and an SRAM parity error are 2.
    text = xml.decode()
    volatile = text.index("<volatile>")
    text = text[:volatile] + text[volatile:].replace(
        "<dram_uncorrectable>0<", "<dram_uncorrectable>1<", 1
    ).replace("<sram_uncorrectable_parity>0<", "<sram_uncorrectable_parity>1<", 1)
    ecc = gpu_stack.parse_nvidia_smi(text.encode())["gpus"][0]["ecc"]
    assert ecc["volatile_uncorrectable"] == "2" and ecc["aggregate_uncorrectable"] == "0"


def test_an_uncorrectable_ecc_error_is_a_health_change_and_an_older_fingerprint_without_ecc_is_not():
    from patchkeeper.checks import environment

    gpu = gpu_stack.parse_nvidia_smi(GPU_HOSTS["device"].read_bytes())
    before_ecc = {**gpu, "gpus": [{k: v for k, v in g.items() if k != "ecc"} for g in gpu["gpus"]]}
    assert environment.compare({"gpu": before_ecc}, {"gpu": gpu}) == []
    correctable = {
        **gpu,
        "gpus": [{**gpu["gpus"][0], "ecc": {**gpu["gpus"][0]["ecc"], "volatile_correctable": "7"}}],
    }
    assert environment.compare({"gpu": gpu}, {"gpu": correctable}) == []
    bad = {
        **gpu,
        "gpus": [{**gpu["gpus"][0], "ecc": {**gpu["gpus"][0]["ecc"], "volatile_uncorrectable": "2"}}],
    }
    [change] = environment.compare({"gpu": gpu}, {"gpu": bad})
    assert (change.subject, change.kind) == (UUIDS["device"], "health")
    assert (
        "'volatile_uncorrectable': '0'" in change.detail and "'volatile_uncorrectable': '2'" in change.detail
    )


# ---- through the CLI ---------------------------------------------------------------------------
def test_env_of_real_wheels_and_two_installs_fingerprint_alike(eenv, pristine_venv, tmp_path):
    fp = env_json(eenv)
    dists = fp["distributions"]
    assert (
        dists["six"]["version"] == "1.17.0"
        and dists["six"]["differ"] == []
        and dists["six"]["installer"] == "pip"
    )
    assert dists["torchcodec"]["differ"] == [] and dists["sglang"]["managed"]
    speedups = next(k for k in fp["native"] if k.startswith("markupsafe/_speedups"))
    assert fp["native"][speedups]["resolved"]["libc.so.6"] is not None
    core5 = fp["native"]["torchcodec/libtorchcodec_core5.so"]
    assert core5["resolved"]["libtorch.so"] is None and core5["resolved"]["libavutil.so.57"] is None
    assert fp["gpu"] == {"driver": None, "note": "no NVIDIA driver"}
    assert fp["interpreter"]["tags"]["abi"].startswith("cp3") and fp["interpreter"]["libc"]["name"] == "glibc"

    screen = eenv.pk("env").stdout
    assert "gpu          no NVIDIA driver" in screen and "with unresolved sonames" in screen
    assert "torchcodec/libtorchcodec_core5.so: " in screen

    # another install of the same wheels at another path, at another time: alike
    other = tmp_path / "other-venv"
    copy_venv(pristine_venv, other)  # pip adds files; it writes into none of the linked ones
    pip_install(other, wheel("torchcodec-0.17.0-*.whl"), wheel("markupsafe-*.whl"), wheel("six-1.17.0-*.whl"))
    build_ext(other / SITE_REL, "one")
    with open(eenv.root / "patchkeeper.toml", "a") as f:
        f.write(f'\n[targets.other]\npython = "{other}/bin/python"\npackage = "sglang"\n')
    proc = eenv.pk("diff", "--env", "local", "other")
    assert "alike" in proc.stdout
    # six downgraded on one side: exit 1, named
    pip_install(other, wheel("six-1.16.0-*.whl"))
    doc = json.loads(eenv.pk("diff", "--env", "local", "other", "--json", check=1).stdout)
    assert doc["changes"] == [
        {
            "area": "distribution",
            "subject": "six",
            "kind": "version",
            "detail": "local: 1.17.0; other: 1.16.0",
        }
    ]


def test_audit_native_and_diff_env_find_a_removed_or_replaced_library(eenv):
    eenv.pk("snapshot", "--name", "before")
    doc = json.loads(eenv.pk("audit", "--json").stdout)
    assert doc["counts"]["native"] == 0 and doc["exit"] == 0  # torchcodec's unresolved sonames are no finding
    assert eenv.pk("diff", "--env", "-t", "local", "--against", "before").returncode == 0

    libs = eenv.site / "pkg.libs"
    (libs / "libdep.so.1").unlink()
    doc = json.loads(eenv.pk("audit", "--json", check=1).stdout)
    native = [f for f in doc["findings"] if f["class"] == "native"]
    assert [(f["path"], f["kind"]) for f in native] == [("pkg/_ext.so", "unresolved")]
    assert "libdep.so.1: $SITE/pkg.libs/libdep.so.1 then, not found now" in native[0]["detail"]
    assert "no longer load their libraries" in doc["summary"]
    out = eenv.pk("diff", "--env", "--against", "before", check=1).stdout
    assert "native       unresolved pkg/_ext.so  libdep.so.1" in out

    build_ext(eenv.site, "two")  # another libdep.so.1 in its place: resolves, to other bytes
    doc = json.loads(eenv.pk("audit", "--json", check=1).stdout)
    native = [f for f in doc["findings"] if f["class"] == "native"]
    assert [(f["path"], f["kind"]) for f in native] == [("pkg/_ext.so", "changed")]
    out = eenv.pk("diff", "--env", "local:before", "local", check=1).stdout
    assert (
        "native       changed    pkg/_ext.so  libdep.so.1: $SITE/pkg.libs/libdep.so.1 has other bytes" in out
    )


@pytest.mark.parametrize("host", sorted(GPU_HOSTS))
def test_gpu_stack_from_a_stand_in_nvidia_smi(eenv, tmp_path, host):
    h200 = stand_in_nvidia_smi(tmp_path / "bin-a", xml_path=GPU_HOSTS[host])
    fp = env_json(eenv, env=h200)
    assert fp["gpu"]["driver"] == "580.159.04" and fp["gpu"]["cuda"] == "13.0"
    assert [g["name"] for g in fp["gpu"]["gpus"]] == ["NVIDIA H200"]
    out = eenv.pk("env", env=h200).stdout
    assert "gpu          driver 580.159.04, CUDA 13.0, 1 GPU(s): NVIDIA H200 (143771 MiB)" in out
    assert (
        f"  00000000:00:06.0 NVIDIA H200 {UUIDS[host]}: remapped_rows correctable=0 uncorrectable=0 pending=No "
        "failure=No; ecc mode=Enabled volatile_correctable=0 volatile_uncorrectable=0 aggregate_correctable=0 "
        "aggregate_uncorrectable=0"
    ) in out
    eenv.pk("snapshot", "--name", "h200", env=h200)
    assert eenv.pk("diff", "--env", "--against", "h200", env=h200).returncode == 0

    newer = stand_in_nvidia_smi(tmp_path / "bin-b", driver="590.48.01", gpus=2, xml_path=GPU_HOSTS[host])
    doc = json.loads(eenv.pk("diff", "--env", "--against", "h200", "--json", env=newer, check=1).stdout)
    assert {(c["subject"], c["detail"]) for c in doc["changes"]} == {
        ("driver", "580.159.04 -> 590.48.01"),
        ("count", "1 -> 2 GPU(s)"),
        (
            "models",
            "driver 580.159.04, CUDA 13.0, 1 GPU(s): NVIDIA H200 (143771 MiB) -> "
            "driver 590.48.01, CUDA 13.0, 2 GPU(s): 2x NVIDIA H200 (143771 MiB)",
        ),
    }
    doc = json.loads(eenv.pk("diff", "--env", "--against", "h200", "--json", check=1).stdout)  # no driver now
    assert [c["subject"] for c in doc["changes"]] == ["driver"] and "no NVIDIA driver" in doc["changes"][0][
        "detail"
    ]


def test_every_state_and_passing_verification_keeps_a_fingerprint_and_old_ledgers_still_read(eenv):
    eenv.pk("apply", "ddtree")
    eenv.pk("rollback", "--to", "baseline")
    entries = [json.loads(p.read_text()) for p in sorted((eenv.state_dir / "ledger").glob("*.json"))]
    assert [e["kind"] for e in entries] == ["baseline", "apply", "rollback"]
    digests = {e["env"] for e in entries[1:]}
    assert len(digests) == 1  # the same environment each change: one object in the store
    assert entries[0]["env"] not in digests  # the baseline's reads every distribution's files, a change's not
    digest = digests.pop()
    algo, _, hexd = digest.partition(":")
    stored = json.loads((eenv.state_dir / "store" / "objects" / algo / hexd[:2] / hexd[2:]).read_bytes())
    assert stored["distributions"]["six"]["version"] == "1.17.0"

    # a ledger from before fingerprints: audit says so, diff --env refuses, nothing breaks
    for p in (eenv.state_dir / "ledger").glob("*.json"):
        doc = json.loads(p.read_text())
        doc.pop("env")
        edit_file(p, json.dumps(doc).encode())
    doc = json.loads(eenv.pk("audit", "--json").stdout)
    assert doc["exit"] == 0 and any("without an environment fingerprint" in n for n in doc["notes"])
    proc = eenv.pk("diff", "--env", check=2)
    assert "without an environment fingerprint" in proc.stderr and "hint:" in proc.stderr
    assert eenv.pk("log").returncode == 0


def test_a_previous_state_that_fails_too_is_reported_with_what_changed_since_it_passed(
    baselined, service, tmp_path
):
    env = baselined
    service()  # healthy until the toml says otherwise
    h200 = stand_in_nvidia_smi(tmp_path / "bin-a")
    env.pk("snapshot", "--name", "good", env=h200)
    assert "verification passed" in env.pk("verify", "--restart", env=h200).stdout  # keeps the fingerprint
    # then the driver changes, six appears, and every code state fails to generate
    toml = env.root / "patchkeeper.toml"
    toml.write_text(toml.read_text().replace("--default healthy", "--default degenerate"))
    pip_install(env.venv, wheel("six-1.16.0-*.whl"))
    newer = stand_in_nvidia_smi(tmp_path / "bin-b", driver="590.48.01")
    out = env.pk("apply", "ddtree", env=newer, check=3).stdout
    assert PREVIOUS_FAILS in out
    state = json.loads(env.pk("status", "--json").stdout)["state"]["id"]
    assert f"local: since state {state} last passed verification (" in out and " 24 tokens in " in out
    assert "  code         none: state " in out
    assert "  distribution added      six  1.16.0 (installed by pip)" in out
    assert "  gpu          changed    driver  580.159.04 -> 590.48.01" in out
    assert "  GPU now      driver 590.48.01, CUDA 13.0, 1 GPU(s): NVIDIA H200 (143771 MiB)" in out
    assert "remapped_rows correctable=0 uncorrectable=0 pending=No failure=No" in out
    kept = fingerprinted(
        env
    )  # every state and transaction, and the passing verification (not the failing ones)
    assert ("verify", True) in kept and all(ok for kind, ok in kept if kind != "verify")


def test_diff_env_between_two_ssh_hosts(fleet):
    assert "alike" in fleet.pk("diff", "--env", "ct129", "ct200").stdout
    pip_install(fleet.venvs["ct129"], wheel("six-1.17.0-*.whl"))
    pip_install(fleet.venvs["ct200"], wheel("six-1.16.0-*.whl"), wheel("markupsafe-*.whl"))
    doc = json.loads(fleet.pk("diff", "--env", "ct129", "ct200", "--json", check=1).stdout)
    speedups = next(c["subject"] for c in doc["changes"] if c["area"] == "native")
    assert [(c["area"], c["subject"], c["kind"]) for c in doc["changes"]] == [
        ("distribution", "markupsafe", "installed"),
        ("distribution", "six", "version"),
        ("native", speedups, "present"),
    ]
    assert doc["changes"][0]["detail"] == "ct129: not installed; ct200: 3.0.4 (installed by pip)"
    assert doc["a"] == "ct129 (now)" and doc["b"] == "ct200 (now)"
    fp = json.loads(fleet.pk("env", "-t", "ct200", "--json").stdout)  # taken on the host, by its own Python
    assert fp["where"]["python"] == f"{fleet.venvs['ct200']}/bin/python"
    assert fp["distributions"]["six"]["version"] == "1.16.0"
    assert any(k.startswith("markupsafe/_speedups") for k in fp["native"])


@pytest.mark.parametrize("how", ["truncated", "replaced"])
def test_a_damaged_shared_object_is_named_damaged_not_its_libraries_unresolved(eenv, how):
    """A .so cut short (a copy that stopped) or replaced by another build: checked against its
    RECORD first, it is "damaged"; its libraries are not called unresolved. `ldd` agrees that the
    file no longer loads what it did, for the loader's own reason."""
    eenv.pk("snapshot", "--name", "before")
    so = next((eenv.site / "markupsafe").glob("_speedups*.so"))
    rel = f"markupsafe/{so.name}"
    data = so.read_bytes()
    new = data[:4096] if how == "truncated" else (eenv.site / "pkg.libs" / "libdep.so.1").read_bytes()
    so.unlink()  # (a link of the pristine venv: written anew)
    so.write_bytes(new)
    ldd = subprocess.run(["ldd", str(so)], capture_output=True, text=True)
    doc = json.loads(eenv.pk("audit", "--json", check=1).stdout)
    native = [(f["path"], f["kind"], f["detail"]) for f in doc["findings"] if f["class"] == "native"]
    assert [(p, k) for p, k, _ in native] == [(rel, "damaged")], native
    assert f"differs from RECORD (size {len(data)} -> {len(new)} bytes)" in native[0][2]
    assert "not found now" not in json.dumps(doc)
    if how == "truncated":
        assert ldd.returncode != 0 or "not a dynamic executable" in ldd.stdout + ldd.stderr, ldd
    out = eenv.pk("diff", "--env", "--against", "before", check=1).stdout
    assert f"native       damaged    {rel}" in out and "then, not found now" not in out, out
    # an intact object whose library is gone is still "unresolved"
    so.unlink()
    so.write_bytes(data)
    (eenv.site / "pkg.libs" / "libdep.so.1").unlink()
    ldd = subprocess.run(["ldd", str(eenv.site / "pkg/_ext.so")], capture_output=True, text=True)
    assert "libdep.so.1 => not found" in ldd.stdout
    doc = json.loads(eenv.pk("audit", "--json", check=1).stdout)
    assert [(f["path"], f["kind"]) for f in doc["findings"] if f["class"] == "native"] == [
        ("pkg/_ext.so", "unresolved")
    ]


def swapped(detail: str, a: str, b: str) -> str:
    """A two-host difference's detail with the hosts' values in the other order."""
    head, na, va, nb, vb = re.split(rf"\b({re.escape(a)}|{re.escape(b)}): ", detail)
    return f"{head}{nb}: {vb}; {na}: {va.removesuffix('; ')}"


def test_diff_env_of_two_hosts_is_one_comparison_either_way_round(eenv, pristine_venv, tmp_path):
    """`diff --env A B` names each difference with A's value and B's; `diff --env B A` gives the
    mirrored report: the same differences, each with its values swapped, native lines included."""
    other = tmp_path / "other-venv"
    copy_venv(pristine_venv, other)
    pip_install(other, wheel("torchcodec-0.17.0-*.whl"), wheel("markupsafe-*.whl"), wheel("six-1.16.0-*.whl"))
    build_ext(other / SITE_REL, "two")  # another libdep.so.1: resolves to other bytes
    osite = other / SITE_REL
    so = next((osite / "markupsafe").glob("_speedups*.so"))
    data = so.read_bytes()
    so.unlink()
    so.write_bytes(data[:4096])  # damaged on one host only
    edit_file(
        eenv.site / "markupsafe/__init__.py", (eenv.site / "markupsafe/__init__.py").read_bytes() + b"#\n"
    )
    with open(eenv.root / "patchkeeper.toml", "a") as f:
        f.write(f'\n[targets.other]\npython = "{other}/bin/python"\npackage = "sglang"\n')
    ab = json.loads(eenv.pk("diff", "--env", "local", "other", "--json", check=1).stdout)["changes"]
    ba = json.loads(eenv.pk("diff", "--env", "other", "local", "--json", check=1).stdout)["changes"]
    got = {(c["area"], c["subject"], c["kind"]): c["detail"] for c in ab}
    assert got[("distribution", "six", "version")] == "local: 1.17.0; other: 1.16.0"
    speedups = f"markupsafe/{so.name}"
    assert got[("native", speedups, "damaged")] == "local: as in RECORD; other: differs from RECORD (changed)"
    assert got[("distribution", "markupsafe", "files")].startswith(
        "differ from RECORD: local: markupsafe/__init__.py (changed); other: " + f"{speedups} (changed)"
    )
    ext = got[("native", "pkg/_ext.so", "resolves")]
    assert ext.startswith("libdep.so.1: local: ") and "; other: " in ext
    assert not any(k[0] == "native" and k[1] == speedups and k[2] != "damaged" for k in got)
    assert sorted(
        (c["area"], c["subject"], c["kind"], swapped(c["detail"], "local", "other")) for c in ab
    ) == sorted((c["area"], c["subject"], c["kind"], c["detail"]) for c in ba)
    screen = eenv.pk("diff", "--env", "local", "other", check=1).stdout
    assert screen.startswith("environments of local (now) and other (now), each difference with both values:")
    # the code diff of the two hosts says the environments differ too
    out = eenv.pk(
        "diff", "local", "other", check=None
    ).stdout  # (exit: the files', the unit role on one side)
    assert "the environments differ too: " in out and "`patchkeeper diff --env local other` lists them" in out


def test_diff_env_against_a_recorded_state_lists_files_that_differ_from_record_now(eenv):
    """A change's fingerprint checks identities only; compared with now, a file that differs from
    its RECORD now is still named, as against a baseline's (which read every file)."""
    eenv.pk("apply", "nextn")  # the baseline (files read), then the apply (identities only)
    assert eenv.pk("diff", "--env", "-t", "local").returncode == 0
    edit_file(eenv.site / "six.py", (eenv.site / "six.py").read_bytes() + b"# by hand\n")
    out = eenv.pk("diff", "--env", "-t", "local", check=1).stdout
    assert (
        "distribution files      six  1 file(s) differ from RECORD now (files not checked then): six.py (changed)"
        in out
    ), out
    out = eenv.pk("diff", "--env", "local:baseline", "local", check=1).stdout
    assert "distribution files      six  1 file(s) differ from RECORD (was 0): six.py (changed)" in out, out
