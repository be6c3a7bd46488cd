"""Packaging beyond pyproject.toml: the repository's patchsets/ ship inside the wheel as patchkeeper.shipped."""

from setuptools import find_packages, setup

setup(
    packages=find_packages("src") + ["patchkeeper.shipped"],
    package_dir={"": "src", "patchkeeper.shipped": "patchsets"},
    package_data={"patchkeeper.shipped": ["**/*"]},
)
