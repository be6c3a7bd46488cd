"""One module per verb; each exposes a plain function that returns an exit code."""

import json


def emit_json(doc) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True))
