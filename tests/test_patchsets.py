"""The shipped patch sets: they load, fit sglang 0.5.23, and every file they produce compiles."""

from __future__ import annotations

import ast
import py_compile

import pytest

from conftest import PRISTINE, REPO, SITE_REL

from patchkeeper import patching, patchset

SHIPPED = ["ddtree", "dflash", "nextn"]


def produce(name: str) -> dict[str, bytes | None]:
    """Apply a shipped patch set to the pristine sglang files in memory."""
    ps = patchset.load(REPO / "patchsets", name)
    site = PRISTINE / SITE_REL
    out: dict[str, bytes | None] = {}
    for origin, fps in ps.patches:
        for fp in fps:
            current = out[fp.path] if fp.path in out else ((site / fp.path).read_bytes() if (site / fp.path).exists() else None)
            out[fp.path] = patching.apply(fp, current, origin).data
    return out


def test_shipped_patchsets_are_listed_in_one_group():
    # present, not alone: a user's own `patchkeeper record` here (as the README shows) adds more
    assert set(SHIPPED) <= set(patchset.names(REPO / "patchsets"))
    for name in SHIPPED:
        ps = patchset.load(REPO / "patchsets", name)
        assert ps.group == "speculative-algo" and ps.package_version == "==0.5.23"
        assert dict(ps.files)["unit"].startswith(b"[Unit]")


@pytest.mark.parametrize("name", SHIPPED)
def test_every_produced_file_compiles(name, tmp_path, pristine_venv):
    produced = produce(name)
    for rel, data in produced.items():
        if rel.endswith(".py") and data is not None:
            dest = tmp_path / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            py_compile.compile(str(dest), doraise=True)


def test_ddtree_adds_the_algorithm_everywhere_it_must(pristine_venv):
    produced = produce("ddtree")
    spec = produced["sglang/srt/speculative/spec_info.py"].decode()
    enum = next(n for n in ast.walk(ast.parse(spec)) if isinstance(n, ast.ClassDef) and n.name == "SpeculativeAlgorithm")
    members = [t.id for n in enum.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    assert "DDTREE" in members and "DFLASH" in members
    is_dflash = next(n for n in enum.body if isinstance(n, ast.FunctionDef) and n.name == "is_dflash")
    assert "DDTREE" in ast.unparse(is_dflash)
    assert "def build_draft_tree" in produced["sglang/srt/speculative/ddtree_utils.py"].decode()
    unit = dict(patchset.load(REPO / "patchsets", "ddtree").files)["unit"].decode()
    assert "--speculative-algorithm DDTREE" in unit
    nextn = dict(patchset.load(REPO / "patchsets", "nextn").files)["unit"].decode()
    assert "NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in nextn
