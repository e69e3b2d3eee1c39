"""The values the Rust API computes (``fixtures/rust_reference.json``, written by
``cargo run -p rnn-python --example rust_reference``), as numpy arrays."""

import json
from pathlib import Path

import numpy as np

_PATH = Path(__file__).parent / "fixtures" / "rust_reference.json"
_DATA = json.loads(_PATH.read_text())


def array(name, dtype=np.float32):
    """The tensor ``name`` of the fixture."""
    entry = _DATA[name]
    return np.array(entry["data"], dtype=dtype).reshape(entry["shape"])


def values(name):
    """The list ``name`` of the fixture (floats)."""
    return np.array(_DATA[name], dtype=np.float64)
