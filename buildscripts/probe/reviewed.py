"""Compiled extensions reviewed as optional for SGLang: (distribution, version) -> where the evidence is.

An extension built against another torch fails the cell (probe/extensions.py) unless its package imports
without it, SGLang calls none of its ops, *and* someone read what SGLang reaches of the package and
recorded it here: the automatic checks cannot see an op reached through the package's own Python (a
torchao layout calling torch.ops.torchao), so a package nobody reviewed is never waved through.
"""

REVIEWED = {
    ("torchao", "0.9.0"): "docs/torch-abi.md: SGLang 0.5.10's --torchao-config choices reach none of its C++ ops",
}
