"""A compiled extension that does not load, judged: built against another torch, whose it is, and whether
its package works without it.

Public reports read "undefined symbol: _ZN5torch…" as a missing-arch bug again and again (sglang#30562:
"filed as a missing SM121 wheel, but the wheel contains sm_121a; the cause is a PyTorch C++ ABI
mismatch"). An extension whose missing symbol is torch's (namespaces c10, torch, at) was built against
another torch than the image's. Whether that fails the image depends on its package:
  - the package imports without it (torchao 0.9 catches the failure and goes on without its C++ ops):
    a warning, naming the package, the torch it needs and which of its callers reach the lost ops;
  - the package does not import without it: a failure (`torch-extension-abi-mismatch`).
Standard library only (the probe runs with the image's Python).
"""

from __future__ import annotations

import json
import os
import re
from importlib import metadata
from typing import Any, Dict, List, Optional, Tuple

from . import core

# The missing symbol is one of torch's C++ API (c10::, torch::, at::), possibly const-qualified (_ZNK).
TORCH_SYMBOL = re.compile(r"undefined symbol: (_ZNK?(?:3c10|5torch|2at)\d\w*)")
# `Ss` is the pre-C++11 ABI's abbreviation of std::string; the C++11 ABI spells std::__cxx11::basic_string.
OLD_STRING_ABI = re.compile(r"(?<=[0-9A-Z_])Ss(?=[A-Z0-9_]|$)")
# The caller whose use of a package's compiled ops matters here: SGLang, as a server start imports it.
CALLER = "sglang"

TORCH_INFO = """
import json, torch
print("@@torch " + json.dumps({"version": torch.__version__,
                               "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))}))
"""


def owner(path: str, site: str) -> Tuple[str, Optional[str], Optional[str]]:
    """(top-level package folder, distribution name, version) of a file under `site`."""
    top = os.path.relpath(path, site).split(os.sep)[0]
    index = getattr(metadata, "packages_distributions", None)   # Python < 3.10 has no index of top-level names
    names: List[str] = list(index().get(top, [])) if index else []
    for name in names:
        try:
            return top, name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return top, None, None


def torch_info(timeout: float) -> Dict[str, Any]:
    done = core.python_snippet(TORCH_INFO, timeout=timeout)
    for line in (done.stdout or "").splitlines():
        if line.startswith("@@torch "):
            info: Dict[str, Any] = json.loads(line[len("@@torch "):])
            return info
    return {}


def callers_of(top: str, site: str) -> List[str]:
    """Files of the caller (SGLang) that call `top`'s compiled ops directly (torch.ops.TOP / TOP.ops)."""
    root = os.path.join(site, CALLER)
    uses = re.compile(r"torch\.ops\.%s\b|\b%s\.ops\b|from %s import [^\n]*\bops\b" % ((re.escape(top),) * 3))
    found = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, errors="replace") as fh:
                    if uses.search(fh.read()):
                        found.append(os.path.relpath(path, site))
    return sorted(found)


def judge(path: str, error: str, site: str, timeout: float) -> Optional[Dict[str, Any]]:
    """The finding for an extension that does not load because of torch's C++ ABI; None for another cause.
    `fatal` is whether the image fails for it: its package does not import without it, or SGLang calls its
    compiled ops directly (then a server needs them)."""
    symbol = TORCH_SYMBOL.search(error)
    if symbol is None:
        return None
    top, dist, version = owner(path, site)
    torch = torch_info(timeout)
    imports = core.python_snippet(f"import {top}", timeout=timeout).returncode == 0 if top.isidentifier() else False
    package = f"{dist or top} {version or ''}".strip()
    if torch.get("cxx11_abi") and OLD_STRING_ABI.search(symbol.group(1)) and "__cxx11" not in symbol.group(1):
        built_for = ("a torch with the pre-C++11 ABI (the missing symbol spells std::string the old way; "
                     "PyPI's torch used that ABI before 2.7)")
    else:
        built_for = "another torch version (this torch does not export the symbol)"
    finding: Dict[str, Any] = {
        "library": os.path.relpath(path, site), "package": package, "symbol": symbol.group(1),
        "image_torch": torch.get("version"), "built_for": built_for, "package_imports_without_it": imports,
    }
    fix = (f"install a {dist or top} build made for torch {torch.get('version') or 'of this image'} "
           "(or pin the torch it was built for)")
    direct = callers_of(top, site) if imports else []
    finding["caller_uses_its_ops"] = direct
    finding["fatal"] = not imports or bool(direct)
    if imports:
        reach = (f"but {CALLER} calls them directly in {', '.join(direct[:3])}" if direct else
                 f"{CALLER} calls none of them directly")
        consequence = f"{top} imports without it, so only its compiled ops are missing, {reach}"
    else:
        consequence = f"{top} does not import without it"
    finding["summary"] = (f"torch extension ABI mismatch: {finding['library']} ({package}) does not load with "
                          f"torch {torch.get('version')}, built against {built_for}; {consequence}. Fix: {fix}")
    return finding
