"""Role-file templates: `{{ name }}` placeholders filled from a target's vars, then a patch set's defaults."""

from __future__ import annotations

import re

from .errors import BadInput

# Only {{ name }}: systemd's own $VAR, ${VAR} and %-specifiers never match, so they pass through untouched.
PLACEHOLDER = re.compile(rb"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")
NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")


def names(data: bytes) -> list[str]:
    """The variables a template uses, in first-use order."""
    return list(dict.fromkeys(m.group(1).decode() for m in PLACEHOLDER.finditer(data)))


def value_text(value: object) -> str:
    """A TOML value as it is written into a file: strings as they are, numbers in their usual form."""
    return value if isinstance(value, str) else str(value)


def check_values(table: object, where: str) -> list[str]:
    """Problems with a vars table: a table of lowercase names to strings or numbers."""
    if not isinstance(table, dict):
        return [f"{where} must be a table of name = value"]
    problems = []
    for key, value in table.items():
        if not NAME.match(key):
            problems.append(f"{where} {key!r} is not a variable name ([a-z_][a-z0-9_]*)")
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            problems.append(f"{where} {key} must be a string or a number, not {value!r}")
    return problems


def render(data: bytes, values: dict[str, str], origin: str, hint: str) -> bytes:
    """The template with every placeholder replaced; a placeholder without a value is refused by name."""
    missing = [n for n in names(data) if n not in values]
    if missing:
        listed = ", ".join(f"{{{{ {n} }}}}" for n in missing)
        raise BadInput(f"{origin} uses {listed} but no value is set for {', '.join(missing)}", hint)
    return PLACEHOLDER.sub(lambda m: values[m.group(1).decode()].encode(), data)
