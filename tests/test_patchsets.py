"""The shipped patch sets: they load, fit sglang 0.5.23, and every file they produce compiles."""

from __future__ import annotations

import ast
import os
import py_compile
from dataclasses import replace

import pytest
from conftest import PRISTINE, REPO, SITE_REL

from patchkeeper.checks import algoscan, units
from patchkeeper.patchset import patching, patchset, unitsyntax
from patchkeeper.workspace import TargetConfig

SHIPPED = ["ddtree", "dflash", "nextn"]
WITH_CODE = ["ddtree"]  # dflash and nextn are built into sglang 0.5.23: their sets are the drop-in alone


def produce(name: str, without: str | None = None) -> dict[str, bytes | None]:
    """Apply a shipped patch set (but its patch `without`) to the pristine sglang files in memory."""
    ps = patchset.load(REPO / "patchsets", name)
    site = PRISTINE / SITE_REL
    out: dict[str, bytes | None] = {}
    for origin, fps in ps.patches:
        if origin == without:
            continue
        for fp in fps:
            current = (
                out[fp.path]
                if fp.path in out
                else ((site / fp.path).read_bytes() if (site / fp.path).exists() else None)
            )
            out[fp.path] = patching.apply(fp, current, origin).data
    return out


def test_shipped_patchsets_are_listed_in_one_group():
    # present, not alone: a user's own `patchkeeper record` here (as the README shows) adds more
    assert set(SHIPPED) <= set(patchset.names(REPO / "patchsets"))
    for name in SHIPPED:
        ps = patchset.load(REPO / "patchsets", name)
        assert ps.group == "speculative-algo" and ps.package_version == "==0.5.23"
        assert set(dict(ps.files)) == {"dropin"}  # a drop-in: the host's unit is the host's
        dropin = dict(ps.files)["dropin"].decode()
        assert (
            "[Service]\nExecStart=\nExecStart=" in dropin
        )  # clears the host's ExecStart=, then sets its own
        parsed = unitsyntax.parse(dropin)
        assert [(st.section, st.key) for st in parsed.settings] == [
            ("Service", "ExecStart")
        ] * 2 and not parsed.warnings


def test_only_the_sets_with_code_patch_code():
    assert [n for n in SHIPPED if patchset.load(REPO / "patchsets", n).patches] == WITH_CODE


@pytest.mark.parametrize("name", WITH_CODE)
def test_every_produced_file_compiles(name, tmp_path, pristine_venv):
    produced = produce(name)
    compiled = 0
    for rel, data in produced.items():
        if rel.endswith(".py") and data is not None:
            dest = tmp_path / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            py_compile.compile(str(dest), doraise=True)
            compiled += 1
    assert compiled, f"patch set {name} produced no Python file to compile"


def test_ddtree_adds_the_algorithm_everywhere_it_must(pristine_venv):
    produced = produce("ddtree")
    spec = produced["sglang/srt/speculative/spec_info.py"].decode()
    enum = next(
        n
        for n in ast.walk(ast.parse(spec))
        if isinstance(n, ast.ClassDef) and n.name == "SpeculativeAlgorithm"
    )
    members = [
        t.id for n in enum.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    ]
    assert "DDTREE" in members and "DFLASH" in members
    is_dflash = next(n for n in enum.body if isinstance(n, ast.FunctionDef) and n.name == "is_dflash")
    assert "DDTREE" in ast.unparse(is_dflash)
    assert "def build_draft_tree" in produced["sglang/srt/speculative/ddtree_utils.py"].decode()
    unit = dict(patchset.load(REPO / "patchsets", "ddtree").files)["dropin"].decode()
    assert "--speculative-algorithm DDTREE" in unit
    nextn = dict(patchset.load(REPO / "patchsets", "nextn").files)["dropin"].decode()
    assert (
        "NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in nextn
    )


# ---- ddtree: no place in sglang that compares the algorithm to DFLASH by name leaves DDTREE out ----
_found: dict[
    tuple[str, bytes], list[str]
] = {}  # a file's findings by its bytes: most files are the pristine ones


def dflash_only_comparisons(files: dict[str, bytes]) -> list[str]:
    """Every comparison (==, !=, in, not in, is) that names DFLASH but not DDTREE, as "path:line"
    (algoscan: the scan `port` runs against a new release)."""
    out = []
    for rel, data in sorted(files.items()):
        if (rel, data) not in _found:
            _found[rel, data] = [str(p) for p in algoscan.places(rel, data, "DDTREE")]
        out += _found[rel, data]
    return out


def naming_dflash(root) -> dict[str, bytes]:
    """The .py files below `root` that mention DFLASH at all, by their path relative to root's parent."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    data = f.read()
                if b"DFLASH" in data:
                    out[os.path.relpath(path, root.parent)] = data
    return out


@pytest.fixture(scope="module")
def pristine_dflash(pristine_venv) -> dict[str, bytes]:
    return naming_dflash(pristine_venv / SITE_REL / "sglang")


def test_applied_ddtree_leaves_no_dflash_only_comparison(baselined, pristine_dflash):
    env = baselined
    left = dflash_only_comparisons(pristine_dflash)
    assert len(left) >= 20 and "sglang/srt/arg_groups/kv_cache_hook.py:647" in left  # what there is to fix
    env.pk("apply", "ddtree")
    assert dflash_only_comparisons(naming_dflash(env.site / "sglang")) == []


@pytest.mark.parametrize(
    "dropped",
    [p for p, _ in patchset.load(REPO / "patchsets", "ddtree").patches if p != "0004-ddtree-utils.patch"],
)
def test_every_ddtree_comparison_patch_is_needed(dropped, pristine_dflash):
    produced = {rel: data for rel, data in produce("ddtree", without=dropped).items() if data is not None}
    left = dflash_only_comparisons(
        {**pristine_dflash, **{k: v for k, v in produced.items() if b"DFLASH" in v}}
    )
    fixed_by_it = {
        fp.path
        for origin, fps in patchset.load(REPO / "patchsets", "ddtree").patches
        if origin == dropped
        for fp in fps
    }
    assert left and {entry.partition(":")[0] for entry in left} <= fixed_by_it


def test_shipped_dropins_render_the_ct129_deployment():
    issue = (
        "/root/ml-env/bin/python3 -m sglang.launch_server --model-path /root/models/Qwen3.6-27B --port 30000 "
        "--host 0.0.0.0 --tp-size 2 --mem-fraction-static 0.88 --context-length 131072 "
        "--max-running-requests 16 --mamba-full-memory-ratio 0.5 --mamba-scheduler-strategy extra_buffer "
        "--reasoning-parser qwen3 --tool-call-parser qwen3_coder"
    ).split()
    host = (REPO / "demo/sglang-qwen.service").read_text()  # the host's unit, its own ExecStart= cleared

    def effective(dropin: bytes) -> list[str]:
        command = units.effective([("unit", host), ("dropin", dropin.decode())])
        assert command is not None and command.source == "dropin" and command.refused is None
        return list(command.argv)

    ct129 = TargetConfig(
        name="ct129", python="/root/ml-env/bin/python3", package="sglang"
    )  # python: the target's
    nextn = patchset.load(REPO / "patchsets", "nextn").bind(ct129)
    assert (
        effective(dict(nextn.files)["dropin"])
        == issue
        + (
            "--speculative-algo NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4"
        ).split()
    )
    for name in ("dflash", "ddtree"):
        ps = patchset.load(REPO / "patchsets", name)
        assert "draft_model_path" in ps.variables and "draft_model_path" not in dict(ps.defaults)
        argv = effective(dict(ps.bind(replace(ct129, vars={"draft_model_path": "/d"})).files)["dropin"])
        assert argv == issue + [
            "--speculative-algorithm",
            name.upper(),
            "--speculative-draft-model-path",
            "/d",
        ]
    ddtree = patchset.load(REPO / "patchsets", "ddtree").description  # what is proven, and what is not
    assert "is lossless" in ddtree and "not wired yet" in ddtree and "verifies a linear chain" in ddtree
