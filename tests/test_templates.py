"""templates.record: a rendered role file, edited or not, written back as its template (pure, no target)."""

from __future__ import annotations

import pytest

from patchkeeper.errors import Refused
from patchkeeper.patchset import templates

UNIT = (
    b"ExecStart={{ python }} -m sglang.launch_server --port {{port}} \\\n"
    b"    --host {{ host }} --tp-size {{ tp_size }} --mem-fraction-static 0.88\n"
    b"Environment=EXTRA={{ extra }}\nRestart=on-failure\n"
)
VALUES = {"python": "/venv/bin/python3", "port": "30000", "host": "0.0.0.0", "tp_size": "2", "extra": ""}


def record(now: bytes) -> templates.Recorded:
    return templates.record(UNIT, VALUES, now, "unit", "hint")


def test_record_keeps_placeholders_and_takes_edits_of_the_literal_text():
    rendered = templates.render(UNIT, VALUES, "unit", "hint")
    assert record(rendered) == templates.Recorded(UNIT)
    # a flag tuned beside two placeholders, a line added, the empty-valued line and its neighbour kept
    now = rendered.replace(b"0.88", b"0.9").replace(b"Restart=on-failure\n", b"Restart=always\nUser=root\n")
    assert record(now).data == UNIT.replace(b"0.88", b"0.9").replace(
        b"Restart=on-failure\n", b"Restart=always\nUser=root\n"
    )
    # removing a placeholder with its flag is an edit like any other; added text keeps a value as written
    now = rendered.replace(b"--host 0.0.0.0 ", b"").replace(b"Restart", b"# port 30000\nRestart")
    got = record(now)
    assert got.data == UNIT.replace(b"--host {{ host }} ", b"").replace(b"Restart", b"# port 30000\nRestart")
    assert got.literal == ("port",)
    # a deleted line takes its placeholder along, also one whose value is empty
    now = rendered.replace(b"Environment=EXTRA=\n", b"")
    assert record(now).data == UNIT.replace(b"Environment=EXTRA={{ extra }}\n", b"")


@pytest.mark.parametrize(
    "edit",
    [(b"--tp-size 2 ", b"--tp-size 4 "), (b"30000", b"30001"), (b"/venv/bin/python3", b"/usr/bin/python3")],
)
def test_record_refuses_an_edit_of_a_value_a_placeholder_fills_in(edit):
    now = templates.render(UNIT, VALUES, "unit", "hint").replace(*edit)
    with pytest.raises(Refused, match=r"changes the value of \{\{ (tp_size|port|python) \}\}"):
        record(now)
