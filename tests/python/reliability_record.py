"""Results of the reliability tests for scripts/reliability_report.py.

When GL_RELIABILITY_OUT names a folder, `record(section, key, value)` merges
`value` under `key` into `<folder>/<section>.json`; otherwise it does
nothing, so the tests run the same in CI."""

import json
import os
import threading

_LOCK = threading.Lock()


def enabled() -> bool:
    return bool(os.environ.get("GL_RELIABILITY_OUT"))


def record(section: str, key: str, value) -> None:
    folder = os.environ.get("GL_RELIABILITY_OUT")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{section}.json")
    with _LOCK:
        data = {}
        if os.path.exists(path):
            with open(path) as f:
                data = json.load(f)
        data[key] = value
        with open(path, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True, default=str)
