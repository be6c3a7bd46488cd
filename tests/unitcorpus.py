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
from collections.abc import Callable, Iterator
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

    def add(
        klass: str, what: str, build: Callable[[str], tuple[str, dict[str, str | bytes]]], root: str = "split"
    ):
        key = f"c{next(counter):02d}"
        unit, files = build(key)
        out.append(Layout(f"{key}-{what}", klass, root, unit, {k: _b(v) for k, v in files.items()}))

    def svc(args: str, extra: str = "") -> str:
        return f"[Unit]\nDescription=corpus\n[Service]\n{extra}ExecStart={rec} {args}\n"

    def drop(body: str) -> str:
        return f"[Service]\n{body}"

    algo = itertools.cycle(ALGOS)

    def spec() -> str:
        return f"--model-path /m --speculative-algorithm {next(algo)}"

    # ---- last round's classes: search path order, masking by name, prefixes, resets ------------------------
    for d in (E, R, ULL, L, UL):
        add(
            "search path",
            f"unit-in-{d.split('/')[0]}",
            lambda k, d=d: (f"{k}-s.service", {f"{d}/{k}-s.service": svc(spec())}),
        )
    for hi, lo in ((E, UL), (R, ULL), (ULL, UL), (L, UL), (E, R)):
        add(
            "search path",
            f"order-{hi.split('/')[0]}-over-{lo.split('/')[0]}",
            lambda k, hi=hi, lo=lo: (
                f"{k}-s.service",
                {f"{hi}/{k}-s.service": svc(spec()), f"{lo}/{k}-s.service": svc(spec())},
            ),
        )
    add(
        "masking by name",
        "same-name-dropin-masked",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/50-x.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
                f"{R}/{k}-s.service.d/50-x.conf": drop("Environment=HIDDEN=1\n"),
                f"{UL}/{k}-s.service.d/60-y.conf": drop("Environment=SEEN=1\n"),
            },
        ),
    )
    add(
        "resets",
        "dropins-in-name-order-reset",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec(), "Environment=A=1 B=2\n"),
                f"{E}/{k}-s.service.d/a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\nEnvironment=\n"),
                f"{R}/{k}-s.service.d/b.conf": drop(
                    f"ExecStart=\nExecStart={rec} {spec()}\nEnvironment=C=3\n"
                ),
            },
        ),
    )
    add(
        "resets",
        "two-execstart-refused",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/a.conf": drop(f"ExecStart={rec} {spec()}\n"),
            },
        ),
    )
    add(
        "resets",
        "reset-leaves-none",
        lambda k: (
            f"{k}-s.service",
            {f"{UL}/{k}-s.service": svc(spec()), f"{E}/{k}-s.service.d/a.conf": drop("ExecStart=\n")},
        ),
    )
    add(
        "prefixes",
        "dash-prefix-dirs",
        lambda k: (
            f"{k}-sglang-qwen.service",
            {
                f"{UL}/{k}-sglang-qwen.service": svc(spec()),
                f"{E}/{k}-sglang-.service.d/10-p.conf": drop(
                    f"ExecStart=\nExecStart={rec} {spec()}\nEnvironment=P=1\n"
                ),
                f"{R}/{k}-.service.d/20-q.conf": drop("Environment=Q=1\n"),
                f"{E}/{k}-sglang-qwen.service.d/30-r.conf": drop("Environment=R=1\n"),
            },
        ),
    )
    add(
        "prefixes",
        "prefix-dir-masked-by-name",
        lambda k: (
            f"{k}-sglang-qwen.service",
            {
                f"{UL}/{k}-sglang-qwen.service": svc(spec()),
                f"{E}/{k}-sglang-.service.d/10-p.conf": drop("Environment=FROM_PREFIX=1\n"),
                f"{E}/{k}-sglang-qwen.service.d/10-p.conf": drop("Environment=FROM_UNIT=1\n"),
            },
        ),
    )
    add(
        "prefixes",
        "control-dir-first",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{CONTROL}/{k}-s.service.d/50-c.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
                f"{E}/{k}-s.service.d/60-e.conf": drop("Environment=E=1\n"),
            },
        ),
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
        add(klass, what, lambda k, text=text: (f"{k}-s.service", {f"{UL}/{k}-s.service": text}))
    add(
        "syntax",
        "bom-in-dropin",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/a.conf": "\ufeff" + drop(f"ExecStart=\nExecStart={rec} b\n"),
            },
        ),
    )
    # ---- templates and specifiers ----------------------------------------------------------------------------
    add(
        "template instance",
        "instance-from-template",
        lambda k: (f"{k}-sglang@qwen.service", {f"{UL}/{k}-sglang@.service": svc(f"--model %i {spec()}")}),
    )
    add(
        "template instance",
        "instance-dropins",
        lambda k: (
            f"{k}-sglang@qwen.service",
            {
                f"{UL}/{k}-sglang@.service": svc(f"--model %i {spec()}"),
                f"{E}/{k}-sglang@.service.d/10-t.conf": drop("Environment=T=%i\n"),
                f"{E}/{k}-sglang@qwen.service.d/20-i.conf": drop(
                    f"ExecStart=\nExecStart={rec} %n %N %p {spec()}\n"
                ),
                f"{R}/{k}-sglang@other.service.d/20-o.conf": drop("Environment=OTHER=1\n"),
            },
        ),
    )
    add(
        "template instance",
        "instance-file-over-template",
        lambda k: (
            f"{k}-sglang@qwen.service",
            {
                f"{UL}/{k}-sglang@.service": svc(spec()),
                f"{E}/{k}-sglang@qwen.service": svc(f"own %i {spec()}"),
            },
        ),
    )
    add(
        "template instance",
        "escaped-instance",
        lambda k: (f"{k}-sglang@a\\x2db.service", {f"{UL}/{k}-sglang@.service": svc("%i %I")}),
    )
    add(
        "specifiers",
        "prefix-specifiers",
        lambda k: (f"{k}-a-b@x.service", {f"{UL}/{k}-a-b@.service": svc("%p %P %j %J %n %N %%")}),
    )
    add(
        "specifiers",
        "host-specifier",
        lambda k: (f"{k}-s.service", {f"{UL}/{k}-s.service": svc("--host %H")}),
    )
    add(
        "specifiers",
        "unknown-specifier",
        lambda k: (f"{k}-s.service", {f"{UL}/{k}-s.service": svc("--x %Z")}),
    )
    add(
        "specifiers",
        "unknown-specifier-ignored-line",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/a.conf": drop(f"ExecStart=-{rec} %Z\n"),
            },
        ),
    )
    add(
        "specifiers",
        "unknown-specifier-in-environment",
        lambda k: (f"{k}-s.service", {f"{UL}/{k}-s.service": svc(spec(), "Environment=A=1 B=%Z C=3\n")}),
    )
    # ---- masking, aliases, symlinked directories -------------------------------------------------------------
    add(
        "masking",
        "masked-by-dev-null",
        lambda k: (
            f"{k}-s.service",
            {f"{UL}/{k}-s.service": svc(spec()), f"{E}/{k}-s.service": b"->/dev/null"},
        ),
    )
    add(
        "masking",
        "masked-by-empty-file",
        lambda k: (f"{k}-s.service", {f"{UL}/{k}-s.service": svc(spec()), f"{E}/{k}-s.service": ""}),
    )
    add(
        "masking",
        "masked-in-run-with-dropin",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{R}/{k}-s.service": b"->/dev/null",
                f"{E}/{k}-s.service.d/a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            },
        ),
    )
    add(
        "masking",
        "masked-dropin",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{UL}/{k}-s.service.d/50-a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
                f"{E}/{k}-s.service.d/50-a.conf": b"->/dev/null",
            },
        ),
    )
    add(
        "alias",
        "alias-dropin-on-real-name",
        lambda k: (
            f"{k}-real.service",
            {
                f"{UL}/{k}-real.service": svc(spec()),
                f"{E}/{k}-alias.service": f"->{{ROOT}}/{UL}/{k}-real.service".encode(),
                f"{E}/{k}-alias.service.d/override.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            },
        ),
    )
    add(
        "alias",
        "alias-named-by-target",
        lambda k: (
            f"{k}-alias.service",
            {
                f"{UL}/{k}-real.service": svc(spec()),
                f"{UL}/{k}-alias.service": f"->{k}-real.service".encode(),
                f"{E}/{k}-real.service.d/override.conf": drop("Environment=VIA_REAL=1\n"),
                f"{E}/{k}-alias.service.d/override2.conf": drop("Environment=VIA_ALIAS=1\n"),
            },
        ),
    )
    add(
        "alias",
        "linked-unit-file-outside",
        lambda k: (
            f"{k}-s.service",
            {
                f"opt/units/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service": f"->{{ROOT}}/opt/units/{k}-s.service".encode(),
            },
        ),
    )
    add(
        "alias",
        "linked-under-another-name-outside",
        lambda k: (
            f"{k}-s.service",
            {
                f"opt/units/{k}-other.service": svc(spec()),
                f"{E}/{k}-s.service": f"->{{ROOT}}/opt/units/{k}-other.service".encode(),
            },
        ),
    )
    add(
        "symlinked dropin dir",
        "dropin-dir-symlink-to-other-name",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{UL}/{k}-other.service.d/a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
                f"{E}/{k}-s.service.d": f"->{{ROOT}}/{UL}/{k}-other.service.d".encode(),
            },
        ),
    )
    add(
        "symlinked dropin dir",
        "dropin-dir-symlink-same-name",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"opt/d/{k}-s.service.d/a.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
                f"{E}/{k}-s.service.d": f"->{{ROOT}}/opt/d/{k}-s.service.d".encode(),
            },
        ),
    )
    add(
        "symlinked dropin dir",
        "dropin-file-symlink",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                "opt/d/z.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
                f"{E}/{k}-s.service.d/z.conf": b"->{ROOT}/opt/d/z.conf",
            },
        ),
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
        add(
            "ExecStart= errors",
            what,
            lambda k, line=line: (
                f"{k}-s.service",
                {f"{UL}/{k}-s.service": svc(spec()), f"{E}/{k}-s.service.d/a.conf": drop(line)},
            ),
        )
    add(
        "section headers",
        "bad-section-header-in-dropin",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/a.conf": f"[Service\nExecStart=\nExecStart={rec} {spec()}\n",
                f"{E}/{k}-s.service.d/b.conf": drop("Environment=AFTER=1\n"),
            },
        ),
    )
    add(
        "section headers",
        "bad-section-header-in-unit",
        lambda k: (f"{k}-s.service", {f"{UL}/{k}-s.service": f"[Service\nExecStart={rec} {spec()}\n"}),
    )
    add(
        "section headers",
        "unknown-section",
        lambda k: (f"{k}-s.service", {f"{UL}/{k}-s.service": svc(spec()) + f"[Bogus]\nExecStart={rec} no\n"}),
    )
    # ---- bytes systemd refuses ---------------------------------------------------------------------------------
    add(
        "invalid UTF-8",
        "invalid-utf8-in-assignment",
        lambda k: (f"{k}-s.service", {f"{UL}/{k}-s.service": _b(svc(spec())) + b"Environment=A=\xff\xfe\n"}),
    )
    add(
        "invalid UTF-8",
        "invalid-utf8-in-comment",
        lambda k: (f"{k}-s.service", {f"{UL}/{k}-s.service": b"# \xff\n" + _b(svc(spec()))}),
    )
    add(
        "invalid UTF-8",
        "invalid-utf8-in-dropin",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/a.conf": b"[Service]\nEnvironment=B=\xc3\x28\n",
            },
        ),
    )
    add(
        "invalid UTF-8",
        "invalid-utf8-in-unit-section",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": b"[Unit]\nDescription=\xff\n"
                + _b(svc(spec())).replace(b"[Unit]\n", b"")
            },
        ),
    )
    add(
        "invalid UTF-8",
        "invalid-utf8-before-execstart",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": b"[Service]\nEnvironment=A=1\n"
                + b"Environment=B=\xff\n"
                + f"ExecStart={rec} x\n".encode()
            },
        ),
    )
    add(
        "invalid UTF-8",
        "invalid-utf8-in-dropin-then-execstart",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/a.conf": b"[Service]\nEnvironment=B=\xc3\x28\n"
                + f"ExecStart=\nExecStart={rec} {spec()}\n".encode(),
            },
        ),
    )
    add(
        "long line",
        "line-over-1MiB-in-dropin-then-execstart",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/a.conf": drop(
                    "Environment=A=1\nEnvironment=LONG="
                    + "y" * (1 << 20)
                    + f"\nExecStart=\nExecStart={rec} {spec()}\n"
                ),
            },
        ),
    )
    add(
        "long line",
        "line-over-1MiB",
        lambda k: (
            f"{k}-s.service",
            {f"{UL}/{k}-s.service": svc(spec()) + "Environment=LONG=" + "x" * (1 << 20) + "\n"},
        ),
    )
    add(
        "long line",
        "line-over-1MiB-in-dropin",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/a.conf": drop("Environment=LONG=" + "y" * (1 << 20) + "\n"),
            },
        ),
    )
    add(
        "long line",
        "long-line-under-1MiB",
        lambda k: (
            f"{k}-s.service",
            {f"{UL}/{k}-s.service": svc(spec()) + "Environment=LONG=" + "x" * 70000 + "\n"},
        ),
    )
    # ---- Environment= ------------------------------------------------------------------------------------------
    for what, value in (
        ("bad-escape", "A=1 B=\\q C=3"),
        ("bad-quote", 'A=1 B="open'),
        ("control-character", "A=1 B=\\x01 C=3"),
        ("invalid-name", "1A=1 B-C=2 D=4"),
        ("no-equals", "A=1 NOEQ D=4"),
    ):
        add(
            "Environment=",
            what,
            lambda k, value=value: (
                f"{k}-s.service",
                {f"{UL}/{k}-s.service": svc("$A ${C}", f"Environment={value}\n")},
            ),
        )
    # ---- variables -------------------------------------------------------------------------------------------
    add(
        "variables",
        "var-from-environment",
        lambda k: (
            f"{k}-s.service",
            {f"{UL}/{k}-s.service": svc("$ARGS ${ONE}y $$HOME", 'Environment=ARGS="-a -b" ONE=x\n')},
        ),
    )
    add(
        "variables",
        "var-from-manager",
        lambda k: (f"{k}-s.service", {f"{UL}/{k}-s.service": svc("${PK_RECORD_DIR} $HOME")}),
    )
    add(
        "variables",
        "var-from-environment-file",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc("$ALGO", "EnvironmentFile={ROOT}/opt/env/algo\n"),
                "opt/env/algo": "ALGO=NEXTN\n",
            },
        ),
    )
    add(
        "variables",
        "environment-file-overrides",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(
                    "${ALGO}", "Environment=ALGO=EAGLE\nEnvironmentFile=-{ROOT}/opt/env/algo2\n"
                ),
                "opt/env/algo2": "ALGO=DDTREE\n",
            },
        ),
    )
    add(
        "variables",
        "environment-file-missing-optional",
        lambda k: (
            f"{k}-s.service",
            {f"{UL}/{k}-s.service": svc("x", "EnvironmentFile=-{ROOT}/opt/env/none\n")},
        ),
    )
    add(
        "variables",
        "environment-file-var-in-path",
        lambda k: (
            f"{k}-s.service",
            {f"{UL}/{k}-s.service": svc("x", "EnvironmentFile=-${HOME}/env\nEnvironment=Y=1\n")},
        ),
    )
    add(
        "variables",
        "unset-environment",
        lambda k: (
            f"{k}-s.service",
            {f"{UL}/{k}-s.service": svc("${A}", "Environment=A=1 B=2\nUnsetEnvironment=A\n")},
        ),
    )
    # ---- non-regular files in drop-in directories --------------------------------------------------------------
    add(
        "non-regular dropins",
        "directory-conf",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/a.conf/x": "",
                f"{E}/{k}-s.service.d/b.conf": drop("Environment=B=1\n"),
            },
        ),
    )
    add(
        "non-regular dropins",
        "hidden-and-other-suffixes",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{E}/{k}-s.service.d/.h.conf": drop("ExecStart=\n"),
                f"{E}/{k}-s.service.d/n.txt": drop("ExecStart=\n"),
                f"{E}/{k}-s.service.d/b.conf": drop("Environment=B=1\n"),
            },
        ),
    )
    # ---- merged /usr ---------------------------------------------------------------------------------------------
    add(
        "merged /usr",
        "merged-usr-unit-and-dropin",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{UL}/{k}-s.service.d/50-patchkeeper.conf": drop(f"ExecStart=\nExecStart={rec} {spec()}\n"),
            },
        ),
        root="merged",
    )
    add(
        "merged /usr",
        "merged-usr-etc-over-lib",
        lambda k: (
            f"{k}-s.service",
            {
                f"{UL}/{k}-s.service": svc(spec()),
                f"{UL}/{k}-s.service.d/50-a.conf": drop("Environment=LIB=1\n"),
                f"{E}/{k}-s.service.d/50-a.conf": drop("Environment=ETC=1\n"),
            },
        ),
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
