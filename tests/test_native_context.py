"""`env` says which extension libraries stay unresolved in the import context: a library another
package of the site dirs provides, loaded before them (torch/lib for torch extensions), satisfies a
soname the loader would not find for the object alone. Real shared objects, built here with cc and
installed by pip from wheels made here."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import copy_venv, make_workspace
from made_wheels import make_wheel, pip_install


def build(where, name: str, source: str, *flags: str) -> bytes:
    (where / f"{name}.c").write_text(source)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(where / name), str(where / f"{name}.c"), *flags], check=True
    )
    return (where / name).read_bytes()


@pytest.fixture
def nenv(tmp_path, pristine_venv):
    src = tmp_path / "csrc"
    src.mkdir()
    prov = build(src, "libprov.so", 'const char *prov(void) { return "prov"; }\n', "-Wl,-soname,libprov.so")
    ext = build(
        src,
        "_ext.so",
        "const char *prov(void);\nconst char *ext(void) { return prov(); }\n",
        f"-L{src}",
        "-l:libprov.so",
    )  # no RUNPATH: alone, the loader cannot find libprov.so
    build(
        src, "libnowhere.so", "int nowhere(void) { return 0; }\n", "-Wl,-soname,libnowhere.so"
    )  # never installed
    broken = build(
        src,
        "_broken.so",
        "int nowhere(void);\nint b(void) { return nowhere(); }\n",
        f"-L{src}",
        "-l:libnowhere.so",
    )
    wheels = tmp_path / "w"
    venv = copy_venv(pristine_venv, tmp_path / "venv")
    pip_install(
        venv,
        make_wheel(wheels, "prov-lib", "1.0", {"provpkg/__init__.py": b"", "provpkg/lib/libprov.so": prov}),
        make_wheel(
            wheels, "prov-user", "1.0", {"provuser/__init__.py": b"import provpkg\n", "provuser/_ext.so": ext}
        ),
        make_wheel(
            wheels, "prov-broken", "1.0", {"provbroken/__init__.py": b"", "provbroken/_broken.so": broken}
        ),
    )
    return make_workspace(tmp_path / "ws", venv)


def test_env_tells_unresolved_alone_from_unresolved_in_the_import_context(nenv):
    site = nenv.site
    loads = (
        "import ctypes, sys\nctypes.CDLL(sys.argv[1])\n"
        "try:\n    ctypes.CDLL(sys.argv[2])\nexcept OSError as exc:\n    print(exc)\n"
    )
    python = str(nenv.venv / "bin/python")
    alone = subprocess.run(
        [python, "-c", "import ctypes, sys\nctypes.CDLL(sys.argv[1])", str(site / "provuser/_ext.so")],
        capture_output=True,
        text=True,
    )
    assert alone.returncode != 0 and "libprov.so" in alone.stderr  # the loader cannot find it alone
    after = subprocess.run(
        [python, "-c", loads, str(site / "provpkg/lib/libprov.so"), str(site / "provuser/_ext.so")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert after.stdout == ""  # it loads once the library is in the process

    doc = json.loads(nenv.pk("env", "--json").stdout)
    assert doc["native"]["provuser/_ext.so"]["resolved"]["libprov.so"] is None
    assert doc["import_context"]["provuser/_ext.so"] == {"libprov.so": "provpkg/lib/libprov.so"}
    assert doc["import_context"]["provbroken/_broken.so"] == {"libnowhere.so": None}
    screen = nenv.pk("env").stdout
    standalone = len(doc["import_context"])  # sglang's own rust_tree_core extension needs torch, absent here
    context = sum(None in found.values() for found in doc["import_context"].values())
    assert context == standalone - 1
    assert f"{standalone} with unresolved sonames alone, {context} in the import context too" in screen
    assert "  provbroken/_broken.so: libnowhere.so" in screen
    assert "provuser/_ext.so: libprov.so from provpkg/lib/libprov.so" in screen
    assert "  provuser/_ext.so: libprov.so\n" not in screen
