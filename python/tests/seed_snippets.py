"""The Python blocks of the two seed guides (``seed_guides/*.md``, copied verbatim) and the
few textual changes they need to run here; docs/python-seed-api.md explains each change."""

import contextlib
import io
import re
from pathlib import Path

_GUIDES = Path(__file__).parent / "seed_guides"

# The guides' module names are this package's, and neural_arch's arrays are numpy arrays
# (numpy in, numpy out) with the memory pool on the backend. Only these texts change.
SUBSTITUTIONS = {
    "from micrograd_rs import": "from rnn.micrograd import",
    "from neural_arch.backends.cuda_kernels import": "from rnn.backends.cuda_kernels import",
    "from neural_arch.backends import get_backend\nimport cupy as cp": "from rnn.backends import get_backend\nimport numpy as cp",
    "from neural_arch.backends import": "from rnn.backends import",
    "cp.get_default_memory_pool()": "cuda_backend.memory_pool()",
    "cp.cuda.memory.OutOfMemoryError": "MemoryError",
}


def snippets(guide):
    """``{number: code}`` of ``seed_guides/<guide>.md``, the substitutions applied."""
    text = (_GUIDES / f"{guide}.md").read_text()
    blocks = re.findall(r"^## (\d+)\. .*?\n\n```python\n(.*?)\n```", text, flags=re.S | re.M)
    out = {}
    for number, code in blocks:
        for old, new in SUBSTITUTIONS.items():
            code = code.replace(old, new)
        out[int(number)] = code
    return out


def run(code, **undefined):
    """Runs a snippet with the names it leaves undefined; returns (namespace, stdout)."""
    namespace = dict(undefined)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<seed snippet>", "exec"), namespace)
    return namespace, out.getvalue()
