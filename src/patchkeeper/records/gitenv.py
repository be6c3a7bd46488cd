"""git configuration given in the environment (git-config(1), ENVIRONMENT): GIT_CONFIG_COUNT=N with
GIT_CONFIG_KEY_<i> and GIT_CONFIG_VALUE_<i> for i from 0. Ours are added after the user's own, so that
theirs stay in effect and ours win where both name a key (a later entry overrides an earlier one)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import BadInput

COUNT = "GIT_CONFIG_COUNT"
_MAX = 2**31 - 1  # git refuses a count over INT_MAX: "too many entries in GIT_CONFIG_COUNT"
# what git's strtoul(value, &end, 10) reads with nothing left over (else "bogus count in GIT_CONFIG_COUNT")
_NUMBER = re.compile(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)")
_HINT = (
    "set GIT_CONFIG_COUNT to the number of GIT_CONFIG_KEY_<i>/GIT_CONFIG_VALUE_<i> pairs you give git "
    "(counted from 0), or unset it; then run the command again"
)


def user_count(environ: Mapping[str, str]) -> int:
    """The number of entries the user's GIT_CONFIG_COUNT gives, read as git reads it (unset or empty:
    none); BadInput for a count git refuses."""
    raw = environ.get(COUNT)
    if not raw:
        return 0
    m = _NUMBER.fullmatch(raw)
    if not m:
        raise BadInput(f"{COUNT}={raw!r} in your environment is not a number (git refuses it too)", _HINT)
    count = int(m.group(2))
    if m.group(1) == "-" and count:  # strtoul wraps a negative count round to a huge one
        count = _MAX + 1
    if count > _MAX:
        raise BadInput(f"{COUNT}={raw!r} in your environment is more entries than git takes", _HINT)
    return count


def after_users(environ: Mapping[str, str], ours: Mapping[str, str]) -> dict[str, str]:
    """The variables that give git `ours` (key: value) after the user's own entries of `environ`."""
    first = user_count(environ)
    out = {COUNT: str(first + len(ours))}
    for i, (key, value) in enumerate(ours.items(), first):
        out[f"GIT_CONFIG_KEY_{i}"] = key
        out[f"GIT_CONFIG_VALUE_{i}"] = value
    return out
