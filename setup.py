"""Packaging beyond pyproject.toml: the repository's patchsets/ ship inside the wheel as patchkeeper.shipped,
each patch set directory a package of its own (so setuptools finds every one declared and warns of none).

An editable install (`pip install -e .`, what `make install` does) maps nothing to patchsets/: it is then
src/ alone, which setuptools installs as a plain .pth (no import finder, no "Editable installation"
warning), and `patchkeeper init` reads the shipped patch sets from the checkout (commands/init.shipped).
"""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.editable_wheel import editable_wheel

SRC = find_packages("src")
SHIPPED = ["patchkeeper.shipped"] + [
    f"patchkeeper.shipped.{'.'.join(p.relative_to('patchsets').parts)}"
    for p in sorted(Path("patchsets").rglob("*"))
    if p.is_dir()
]


class EditableSrcOnly(editable_wheel):
    """An editable install of src/ only: the shipped patch sets stay in the checkout."""

    def finalize_options(self) -> None:
        self.distribution.packages = SRC
        self.distribution.package_dir = {"": "src"}
        self.distribution.package_data = {}
        super().finalize_options()


setup(
    packages=SRC + SHIPPED,
    package_dir={"": "src", **{name: "/".join(["patchsets", *name.split(".")[2:]]) for name in SHIPPED}},
    package_data={name: ["*"] for name in SHIPPED},
    cmdclass={"editable_wheel": EditableSrcOnly},
)
