"""Packaging beyond pyproject.toml: the repository's patchsets/ ship inside the wheel as patchkeeper.shipped,
each patch set directory a package of its own (so setuptools finds every one declared and warns of none)."""

from pathlib import Path

from setuptools import find_packages, setup

SHIPPED = ["patchkeeper.shipped"] + [
    f"patchkeeper.shipped.{'.'.join(p.relative_to('patchsets').parts)}"
    for p in sorted(Path("patchsets").rglob("*"))
    if p.is_dir()
]

setup(
    packages=find_packages("src") + SHIPPED,
    package_dir={"": "src", **{name: "/".join(["patchsets", *name.split(".")[2:]]) for name in SHIPPED}},
    package_data={name: ["*"] for name in SHIPPED},
)
