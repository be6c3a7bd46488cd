"""A generated corpus of systemd unit + drop-in layouts for comparing patchkeeper's reading of unit files with a
live systemd manager (tests/test_units_live.py): search path order, prefix and template directories, masking
(by /dev/null, by an empty file, by name), aliases, symlinked directories, ExecStart= and Environment= syntax
systemd ignores or refuses, specifiers, variables, FIFOs, BOMs, continuations, quoting, prefixes, resets.

Every layout's units are named with a prefix of their own (`c07-...`), so that all of them load side by side in
one manager; each ExecStart= runs the recorder (tests/livesystemd.py), which writes down the argv and the
environment it really got. Two roots share the search path: `split` (/lib and /usr/lib apart) and `merged`
(/lib a symlink to usr/lib, as on Debian 12)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

E, R, UL, L, ULL = (
    "etc/systemd/system",
    "run/systemd/system",
    "usr/lib/systemd/system",
    "lib/systemd/system",
    "usr/local/lib/systemd/system",
)
CONTROL = "etc/systemd/system.control"
ALGOS = ("EAGLE", "NEXTN", "DDTREE", "DFLASH")
K = "@KEY@"  # in a layout given as data (one()): where its key (c07) goes in names, paths and texts


@dataclass(frozen=True)
class Layout:
    """Files below a root (relative path -> bytes; b"->X" a symlink to X, b"|fifo" a FIFO, "{ROOT}" replaced by
    the root) and the unit name the target names."""

    key: str  # c07-what-it-tests
    klass: str  # the class of the issue it belongs to
    root: str  # "split" or "merged"
    unit: str  # the name the target's unit role names
    files: dict[str, bytes]


def _b(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode()


def layouts(rec: str) -> list[Layout]:
    """Every layout, `rec` being the recorder's path (each ExecStart= runs it)."""
    out: list[Layout] = []
    counter = itertools.count()

    def one(
        klass: str,
        what: str,
        files: dict[str, str | bytes],
        unit: str = f"{K}-s.service",
        root: str = "split",
    ) -> None:
        """A layout given as data: its unit's name and files, each naming the layout's key (c07) as K."""
        key = f"c{next(counter):02d}"
        out.append(
            Layout(
                f"{key}-{what}",
                klass,
                root,
                unit.replace(K, key),
                {p.replace(K, key): _b(v).replace(K.encode(), key.encode()) for p, v in files.items()},
            )
        )

    def svc(args: str, extra: str = "") -> str:
        return f"[Unit]\nDescription=corpus\n[Service]\n{extra}ExecStart={rec} {args}\n"

    def drop(body: str) -> str:
        return f"[Service]\n{body}"

    algo = itertools.cycle(ALGOS)

    def spec() -> str:
        return f"--model-path /m --speculative-algorithm {next(algo)}"

    # ---- last round's classes: search path order, masking by name, prefixes, resets ------------------------
    for d in (E, R, ULL, L, UL):
        one("search path", f"unit-in-{d.split('/')[0]}", {f"{d}/{K}-s.service": svc(spec())})
    for hi, lo in ((E, UL), (R, ULL), (ULL, UL), (L, UL), (E, R)):
        one(
            "search path",
            f"order-{hi.split('/')[0]}-over-{lo.split('/')[0]}",
            {f"{hi}/{K}-s.service": svc(spec()), f"{lo}/{K}-s.service": svc(spec())},
        )
    one(
        "masking by name",
        "same-name-dropin-masked",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/50-x.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            f"{R}/{K}-s.service.d/50-x.conf": drop("Environment=HIDDEN=1\n"),
            f"{UL}/{K}-s.service.d/60-y.conf": drop("Environment=SEEN=1\n"),
        },
    )
    one(
        "resets",
        "dropins-in-name-order-reset",
        {
            f"{UL}/{K}-s.service": svc(spec(), "Environment=A=1 B=2\n"),
            f"{E}/{K}-s.service.d/a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\nEnvironment=\n"),
            f"{R}/{K}-s.service.d/b.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\nEnvironment=C=3\n"),
        },
    )
    one(
        "resets",
        "two-execstart-refused",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf": drop(f"ExecStart={rec} {spec()}\n"),
        },
    )
    one(
        "resets",
        "reset-leaves-none",
        {f"{UL}/{K}-s.service": svc(spec()), f"{E}/{K}-s.service.d/a.conf": drop("ExecStart=\n")},
    )
    one(
        "prefixes",
        "dash-prefix-dirs",
        {
            f"{UL}/{K}-sglang-qwen.service": svc(spec()),
            f"{E}/{K}-sglang-.service.d/10-p.conf": drop(
                f"ExecStart=\nExecStart={rec} {spec()}\nEnvironment=P=1\n"
            ),
            f"{R}/{K}-.service.d/20-q.conf": drop("Environment=Q=1\n"),
            f"{E}/{K}-sglang-qwen.service.d/30-r.conf": drop("Environment=R=1\n"),
        },
        unit=f"{K}-sglang-qwen.service",
    )
    one(
        "prefixes",
        "prefix-dir-masked-by-name",
        {
            f"{UL}/{K}-sglang-qwen.service": svc(spec()),
            f"{E}/{K}-sglang-.service.d/10-p.conf": drop("Environment=FROM_PREFIX=1\n"),
            f"{E}/{K}-sglang-qwen.service.d/10-p.conf": drop("Environment=FROM_UNIT=1\n"),
        },
        unit=f"{K}-sglang-qwen.service",
    )
    one(
        "prefixes",
        "control-dir-first",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{CONTROL}/{K}-s.service.d/50-c.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            f"{E}/{K}-s.service.d/60-e.conf": drop("Environment=E=1\n"),
        },
    )
    # ---- syntax: BOM, continuations, quoting, exec prefixes ------------------------------------------------
    syntax: list[tuple[str, str, str]] = [
        ("bom", "syntax", "\ufeff" + svc(spec())),
        ("crlf", "syntax", svc(spec(), "Environment=A=1\r\n").replace("\n", "\r\n")),
        ("continuation", "continuations", f"[Service]\nExecStart={rec} --a \\\n  --b \\\n# c \\\n  --d\n"),
        (
            "backslash-space-no-continuation",
            "continuations",
            f"[Service]\nExecStart={rec} --a \\   \n  --b x\n",
        ),
        ("continuation-at-eof", "continuations", f"[Service]\nExecStart={rec} a \\"),
        ("quoting", "quoting", f'[Service]\nExecStart={rec} "a b" \'c d\' x"y z"w "" \'\' "q\\"r"\n'),
        ("escapes", "quoting", f"[Service]\nExecStart={rec} \\s \\x41 \\101 \\u00e9 \\t\n"),
        ("unknown-escape-kept", "quoting", f"[Service]\nExecStart={rec} e\\ f \\? tail\n"),
        ("prefix-minus-at", "prefixes", f"[Service]\nExecStart=-@{rec} argv0 x\n"),
        ("prefix-colon", "prefixes", f"[Service]\nEnvironment=X=1\nExecStart=:{rec} $X ${{X}}\n"),
        ("prefix-plus-bang", "prefixes", f"[Service]\nExecStart=+{rec} y\n"),
        ("prefix-bang-bang", "prefixes", f"[Service]\nExecStart=!!{rec} y\n"),
        ("semicolon-escaped", "quoting", f"[Service]\nExecStart={rec} a \\; b\n"),
        ("semicolon-two-commands", "quoting", f"[Service]\nExecStart={rec} a ; {rec} b\n"),
        (
            "environment-words",
            "quoting",
            f"[Service]\nEnvironment=\"A=1 2\" C='q r' D=\\x41 1B=2 F=\\s\nExecStart={rec} x\n",
        ),
        (
            "environment-reset",
            "resets",
            f"[Service]\nEnvironment=K=1\nEnvironment=\nEnvironment=L=1\nExecStart={rec} x\n",
        ),
        ("comment-ending-in-backslash", "continuations", f"[Service]\n# note \\\nExecStart={rec} d\n"),
        ("empty-line-ends-continuation", "continuations", f"[Service]\nExecStart={rec} a\\\n\n b\n"),
        ("even-backslash-run", "continuations", f"[Service]\nExecStart={rec} a\\\\\\\\\nEnvironment=N=1\n"),
        ("spaces-around-keys", "syntax", f"  [Service]  \n ExecStart = {rec}  j  \n"),
        ("plus-then-bang", "prefixes", f"[Service]\nExecStart=+!{rec} y\n"),
        ("unknown-escapes-and-nul", "quoting", f'[Service]\nExecStart={rec} e\\ f \\? "\\;" \\x00 tail\\\n'),
        (
            "oneshot-commands",
            "quoting",
            f"[Service]\nType=oneshot\nExecStart={rec} f1 ; {rec} f2 \\; f3 x;y ;\n",
        ),
    ]
    for what, klass, text in syntax:
        one(klass, what, {f"{UL}/{K}-s.service": text})
    one(
        "syntax",
        "bom-in-dropin",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf": "\ufeff" + drop(f"ExecStart=\nExecStart={rec} b\n"),
        },
    )
    # ---- templates and specifiers ----------------------------------------------------------------------------
    one(
        "template instance",
        "instance-from-template",
        {f"{UL}/{K}-sglang@.service": svc(f"--model %i {spec()}")},
        unit=f"{K}-sglang@qwen.service",
    )
    one(
        "template instance",
        "instance-dropins",
        {
            f"{UL}/{K}-sglang@.service": svc(f"--model %i {spec()}"),
            f"{E}/{K}-sglang@.service.d/10-t.conf": drop("Environment=T=%i\n"),
            f"{E}/{K}-sglang@qwen.service.d/20-i.conf": drop(
                f"ExecStart=\nExecStart={rec} %n %N %p {spec()}\n"
            ),
            f"{R}/{K}-sglang@other.service.d/20-o.conf": drop("Environment=OTHER=1\n"),
        },
        unit=f"{K}-sglang@qwen.service",
    )
    one(
        "template instance",
        "instance-file-over-template",
        {
            f"{UL}/{K}-sglang@.service": svc(spec()),
            f"{E}/{K}-sglang@qwen.service": svc(f"own %i {spec()}"),
        },
        unit=f"{K}-sglang@qwen.service",
    )
    one(
        "template instance",
        "escaped-instance",
        {f"{UL}/{K}-sglang@.service": svc("%i %I")},
        unit=f"{K}-sglang@a\\x2db.service",
    )
    one(
        "specifiers",
        "prefix-specifiers",
        {f"{UL}/{K}-a-b@.service": svc("%p %P %j %J %n %N %%")},
        unit=f"{K}-a-b@x.service",
    )
    one("specifiers", "host-specifier", {f"{UL}/{K}-s.service": svc("--host %H")})
    one("specifiers", "unknown-specifier", {f"{UL}/{K}-s.service": svc("--x %Z")})
    one(
        "specifiers",
        "unknown-specifier-ignored-line",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf": drop(f"ExecStart=-{rec} %Z\n"),
        },
    )
    one(
        "specifiers",
        "unknown-specifier-in-environment",
        {f"{UL}/{K}-s.service": svc(spec(), "Environment=A=1 B=%Z C=3\n")},
    )
    # ---- masking, aliases, symlinked directories -------------------------------------------------------------
    one(
        "masking",
        "masked-by-dev-null",
        {f"{UL}/{K}-s.service": svc(spec()), f"{E}/{K}-s.service": b"->/dev/null"},
    )
    one("masking", "masked-by-empty-file", {f"{UL}/{K}-s.service": svc(spec()), f"{E}/{K}-s.service": ""})
    one(
        "masking",
        "masked-in-run-with-dropin",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{R}/{K}-s.service": b"->/dev/null",
            f"{E}/{K}-s.service.d/a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
        },
    )
    one(
        "masking",
        "masked-dropin",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{UL}/{K}-s.service.d/50-a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            f"{E}/{K}-s.service.d/50-a.conf": b"->/dev/null",
        },
    )
    one(
        "alias",
        "alias-dropin-on-real-name",
        {
            f"{UL}/{K}-real.service": svc(spec()),
            f"{E}/{K}-alias.service": f"->{{ROOT}}/{UL}/{K}-real.service".encode(),
            f"{E}/{K}-alias.service.d/override.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
        },
        unit=f"{K}-real.service",
    )
    one(
        "alias",
        "alias-named-by-target",
        {
            f"{UL}/{K}-real.service": svc(spec()),
            f"{UL}/{K}-alias.service": f"->{K}-real.service".encode(),
            f"{E}/{K}-real.service.d/override.conf": drop("Environment=VIA_REAL=1\n"),
            f"{E}/{K}-alias.service.d/override2.conf": drop("Environment=VIA_ALIAS=1\n"),
        },
        unit=f"{K}-alias.service",
    )
    one(
        "alias",
        "linked-unit-file-outside",
        {
            f"opt/units/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service": f"->{{ROOT}}/opt/units/{K}-s.service".encode(),
        },
    )
    one(
        "alias",
        "linked-under-another-name-outside",
        {
            f"opt/units/{K}-other.service": svc(spec()),
            f"{E}/{K}-s.service": f"->{{ROOT}}/opt/units/{K}-other.service".encode(),
        },
    )
    one(
        "symlinked dropin dir",
        "dropin-dir-symlink-to-other-name",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{UL}/{K}-other.service.d/a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            f"{E}/{K}-s.service.d": f"->{{ROOT}}/{UL}/{K}-other.service.d".encode(),
        },
    )
    one(
        "symlinked dropin dir",
        "dropin-dir-symlink-same-name",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"opt/d/{K}-s.service.d/a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            f"{E}/{K}-s.service.d": f"->{{ROOT}}/opt/d/{K}-s.service.d".encode(),
        },
    )
    one(
        "symlinked dropin dir",
        "dropin-file-symlink",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            "opt/d/z.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            f"{E}/{K}-s.service.d/z.conf": b"->{ROOT}/opt/d/z.conf",
        },
    )
    one(
        "symlinked dropin dir",
        "dropin-dir-symlink-chain",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"opt/real/{K}.d/a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            f"opt/hop/{K}.d": f"->{{ROOT}}/opt/real/{K}.d".encode(),
            f"{E}/{K}-s.service.d": f"->{{ROOT}}/opt/hop/{K}.d".encode(),
        },
    )
    one(
        "symlinked dropin dir",
        "dropin-dir-symlink-relative",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/shared-{K}.d/a.conf": drop("Environment=REL=1\n"),
            f"{E}/{K}-s.service.d": f"->shared-{K}.d".encode(),
        },
    )
    one(  # the manager keeps a symlink whose text, read from its working directory /, is a directory:
        # "tmp" is, so this one is followed (from where it lies) where the one above is not
        "symlinked dropin dir",
        "dropin-dir-symlink-relative-text-a-dir-from-root",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/tmp/{K}.conf": drop("Environment=FROM_ROOT_TOO=1\n"),
            f"{E}/{K}-s.service.d": b"->tmp",
        },
    )
    one(
        "symlinked dropin dir",
        "dropin-dir-symlink-dangling",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{UL}/{K}-s.service.d/a.conf": drop("Environment=KEPT=1\n"),
            f"{E}/{K}-s.service.d": f"->{{ROOT}}/opt/nowhere/{K}.d".encode(),
        },
    )
    one(
        "symlinked dropin dir",
        "dropin-dir-symlink-masks-one-of-the-same-name",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{UL}/{K}-s.service.d/50-a.conf": drop("Environment=LOW=1\n"),
            f"opt/d/{K}-s.service.d/50-a.conf": drop("Environment=HIGH=1\n"),
            f"{E}/{K}-s.service.d": f"->{{ROOT}}/opt/d/{K}-s.service.d".encode(),
        },
    )
    one(
        "symlinked dropin dir",
        "dropin-file-symlink-relative",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/real.txt": drop("Environment=LINKED=1\n"),
            f"{E}/{K}-s.service.d/b.conf": b"->real.txt",
        },
    )
    one(
        "symlinked dropin dir",
        "dropin-file-symlink-loop",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf": b"->b.conf",
            f"{E}/{K}-s.service.d/b.conf": b"->a.conf",
        },
    )
    # ---- ExecStart= lines systemd ignores or refuses ---------------------------------------------------------
    bad_exec = [
        ("minus-empty-path", "ExecStart=-\n", "ignored line"),
        ("minus-relative-path", "ExecStart=-rel/x a\n", "ignored line"),
        ("minus-unbalanced-quote", f'ExecStart=-{rec} "open\n', "ignored line"),
        ("unbalanced-quote-first-word", 'ExecStart="/x\n', "ignored line"),
        ("relative-path", "ExecStart=rel/x a\n", "ignored line"),
        ("unbalanced-quote", f'ExecStart={rec} "open\n', "ignored line"),
    ]
    for what, line, _klass in bad_exec:
        one(
            "ExecStart= errors",
            what,
            {f"{UL}/{K}-s.service": svc(spec()), f"{E}/{K}-s.service.d/a.conf": drop(line)},
        )
    one(
        "section headers",
        "bad-section-header-in-dropin",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf": f"[Service\nExecStart=\nExecStart={rec} {spec()}\n",
            f"{E}/{K}-s.service.d/b.conf": drop("Environment=AFTER=1\n"),
        },
    )
    one(
        "section headers",
        "bad-section-header-in-unit",
        {f"{UL}/{K}-s.service": f"[Service\nExecStart={rec} {spec()}\n"},
    )
    one(
        "section headers",
        "unknown-section",
        {f"{UL}/{K}-s.service": svc(spec()) + f"[Bogus]\nExecStart={rec} no\n"},
    )
    # ---- bytes systemd refuses ---------------------------------------------------------------------------------
    one(
        "invalid UTF-8",
        "invalid-utf8-in-assignment",
        {f"{UL}/{K}-s.service": _b(svc(spec())) + b"Environment=A=\xff\xfe\n"},
    )
    one("invalid UTF-8", "invalid-utf8-in-comment", {f"{UL}/{K}-s.service": b"# \xff\n" + _b(svc(spec()))})
    one(
        "invalid UTF-8",
        "invalid-utf8-in-dropin",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf": b"[Service]\nEnvironment=B=\xc3\x28\n",
        },
    )
    one(
        "invalid UTF-8",
        "invalid-utf8-in-unit-section",
        {f"{UL}/{K}-s.service": b"[Unit]\nDescription=\xff\n" + _b(svc(spec())).replace(b"[Unit]\n", b"")},
    )
    one(
        "invalid UTF-8",
        "invalid-utf8-before-execstart",
        {
            f"{UL}/{K}-s.service": b"[Service]\nEnvironment=A=1\n"
            + b"Environment=B=\xff\n"
            + f"ExecStart={rec} x\n".encode()
        },
    )
    one(
        "invalid UTF-8",
        "invalid-utf8-in-dropin-then-execstart",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf": b"[Service]\nEnvironment=B=\xc3\x28\n"
            + f"ExecStart=\nExecStart={rec} {spec()}\n".encode(),
        },
    )
    one(
        "long line",
        "line-over-1MiB-in-dropin-then-execstart",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf": drop(
                "Environment=A=1\nEnvironment=LONG="
                + "y" * (1 << 20)
                + f"\nExecStart=\nExecStart={rec} {spec()}\n"
            ),
        },
    )
    one(
        "long line",
        "line-over-1MiB",
        {f"{UL}/{K}-s.service": svc(spec()) + "Environment=LONG=" + "x" * (1 << 20) + "\n"},
    )
    one(
        "long line",
        "line-over-1MiB-in-dropin",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf": drop("Environment=LONG=" + "y" * (1 << 20) + "\n"),
        },
    )
    one(
        "long line",
        "long-line-under-1MiB",
        {f"{UL}/{K}-s.service": svc(spec()) + "Environment=LONG=" + "x" * 70000 + "\n"},
    )
    # ---- Environment= ------------------------------------------------------------------------------------------
    for what, value in (
        ("bad-escape", "A=1 B=\\q C=3"),
        ("bad-quote", 'A=1 B="open'),
        ("control-character", "A=1 B=\\x01 C=3"),
        ("invalid-name", "1A=1 B-C=2 D=4"),
        ("no-equals", "A=1 NOEQ D=4"),
    ):
        one("Environment=", what, {f"{UL}/{K}-s.service": svc("$A ${C}", f"Environment={value}\n")})
    # ---- variables -------------------------------------------------------------------------------------------
    one(
        "variables",
        "var-from-environment",
        {f"{UL}/{K}-s.service": svc("$ARGS ${ONE}y $$HOME", 'Environment=ARGS="-a -b" ONE=x\n')},
    )
    one("variables", "var-from-manager", {f"{UL}/{K}-s.service": svc("${PK_RECORD_DIR} $HOME")})
    one(
        "variables",
        "var-from-environment-file",
        {
            f"{UL}/{K}-s.service": svc("$ALGO", "EnvironmentFile={ROOT}/opt/env/algo\n"),
            "opt/env/algo": "ALGO=NEXTN\n",
        },
    )
    one(
        "variables",
        "environment-file-overrides",
        {
            f"{UL}/{K}-s.service": svc(
                "${ALGO}", "Environment=ALGO=EAGLE\nEnvironmentFile=-{ROOT}/opt/env/algo2\n"
            ),
            "opt/env/algo2": "ALGO=DDTREE\n",
        },
    )
    one(
        "variables",
        "environment-file-missing-optional",
        {f"{UL}/{K}-s.service": svc("x", "EnvironmentFile=-{ROOT}/opt/env/none\n")},
    )
    one(
        "variables",
        "environment-file-var-in-path",
        {f"{UL}/{K}-s.service": svc("x", "EnvironmentFile=-${HOME}/env\nEnvironment=Y=1\n")},
    )
    one(
        "variables",
        "unset-environment",
        {f"{UL}/{K}-s.service": svc("${A}", "Environment=A=1 B=2\nUnsetEnvironment=A\n")},
    )
    # ---- non-regular files in drop-in directories --------------------------------------------------------------
    one(
        "non-regular dropins",
        "directory-conf",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/a.conf/x": "",
            f"{E}/{K}-s.service.d/b.conf": drop("Environment=B=1\n"),
        },
    )
    one(
        "non-regular dropins",
        "hidden-and-other-suffixes",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{E}/{K}-s.service.d/.h.conf": drop("ExecStart=\n"),
            f"{E}/{K}-s.service.d/n.txt": drop("ExecStart=\n"),
            f"{E}/{K}-s.service.d/b.conf": drop("Environment=B=1\n"),
        },
    )
    # ---- merged /usr ---------------------------------------------------------------------------------------------
    one(
        "merged /usr",
        "merged-usr-unit-and-dropin",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{UL}/{K}-s.service.d/50-patchkeeper.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
        },
        root="merged",
    )
    one(
        "merged /usr",
        "merged-usr-etc-over-lib",
        {
            f"{UL}/{K}-s.service": svc(spec()),
            f"{UL}/{K}-s.service.d/50-a.conf": drop("Environment=LIB=1\n"),
            f"{E}/{K}-s.service.d/50-a.conf": drop("Environment=ETC=1\n"),
        },
        root="merged",
    )
    return out


def fifo_layout(rec: str) -> Layout:
    """A FIFO named *.conf in a drop-in directory: systemd 252 opens it to read and blocks until a writer comes
    (its whole manager with it), so it is loaded by a manager of its own."""
    files = {
        f"{UL}/fifo-s.service": f"[Service]\nExecStart={rec} x\n",
        f"{E}/fifo-s.service.d/a.conf": b"|fifo",
        f"{E}/fifo-s.service.d/b.conf": "[Service]\nEnvironment=B=1\n",
    }
    return Layout(
        "fifo-conf", "non-regular dropins", "split", "fifo-s.service", {k: _b(v) for k, v in files.items()}
    )


def iter_files(layout: Layout, root: str) -> Iterator[tuple[str, bytes]]:
    """The layout's files with {ROOT} replaced by `root`."""
    for rel, data in layout.files.items():
        yield rel, data.replace(b"{ROOT}", root.encode())
