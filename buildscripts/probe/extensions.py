"""A compiled extension that does not load, judged: built against another torch, whose it is, and whether
its package works without it.

Public reports read "undefined symbol: _ZN5torch…" as a missing-arch bug again and again (sglang#30562:
"filed as a missing SM121 wheel, but the wheel contains sm_121a; the cause is a PyTorch C++ ABI
mismatch"). An extension whose missing symbol is torch's (namespaces c10, torch, at) was built against
another torch than the image's. It fails the image (`torch-extension-abi-mismatch`) unless all of these
hold, and is then a warning naming the package, the torch it needs and the review:
  - the package imports without it (torchao 0.9 catches the failure and goes on without its C++ ops);
  - SGLang, installed beside it, calls none of its ops directly (torch.ops.NS for the package's namespaces);
  - the (distribution, version) was reviewed for what SGLang reaches through the package's own code and
    recorded in probe/reviewed.py (an op reached that way is beyond what a search of SGLang can see).
Standard library only (the probe runs with the image's Python).
"""

from __future__ import annotations

import functools
import json
import os
import re
from importlib import metadata
from typing import Any, Dict, List, Optional, Tuple

from . import core, reviewed

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


@functools.lru_cache(maxsize=None)
def torch_info(timeout: float) -> Dict[str, Any]:
    """The image's torch version and C++ ABI, asked once per probe run."""
    done = core.python_snippet(TORCH_INFO, timeout=timeout)
    for line in (done.stdout or "").splitlines():
        if line.startswith("@@torch "):
            info: Dict[str, Any] = json.loads(line[len("@@torch "):])
            return info
    return {}


def namespaces(top: str, site: str) -> List[str]:
    """The torch op namespaces a package's own Python uses or defines (`torch.ops.NS`, `Library("NS"`),
    its folder name included: the ops its extension registers go by these."""
    found = {top}
    uses = re.compile(r"torch\.ops\.(\w+)\.|torch\.library\.Library\(\s*[\"'](\w+)[\"']")
    for folder, _dirs, files in os.walk(os.path.join(site, top)):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), errors="replace") as fh:
                    found |= {a or b for a, b in uses.findall(fh.read())}
    return sorted(found)


def callers_of(top: str, site: str) -> Optional[List[str]]:
    """Files of the caller (SGLang) that call `top`'s compiled ops directly (torch.ops.NS for each of its
    namespaces, TOP.ops, `from TOP import ... ops`); None when the caller is not installed there."""
    root = os.path.join(site, CALLER)
    if not os.path.isdir(root):
        return None
    spaces = "|".join(re.escape(ns) for ns in namespaces(top, site))
    uses = re.compile(r"torch\.ops\.(?:%s)\b|\b%s\.ops\b|from %s import \(?[^)]*?\bops\b"
                      % (spaces, re.escape(top), re.escape(top)))
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
    review = reviewed.REVIEWED.get((dist or top, version or ""))
    finding["caller_uses_its_ops"] = direct
    finding["reviewed"] = review
    finding["fatal"] = not imports or direct is None or bool(direct) or review is None
    if not imports:
        consequence = f"{top} does not import without it"
    elif direct is None:
        consequence = f"{top} imports without it, but {CALLER} is not installed beside it to tell what it needs"
    elif direct:
        consequence = (f"{top} imports without it, but {CALLER} calls its compiled ops directly in "
                       f"{', '.join(direct[:3])}")
    elif review is None:
        consequence = (f"{top} imports without it and {CALLER} calls none of its ops directly, but whether "
                       f"{CALLER} reaches them through {top}'s own code was never reviewed for {package} "
                       "(probe/reviewed.py records the reviewed ones)")
    else:
        consequence = (f"{top} imports without it, so only its compiled ops are missing, {CALLER} calls none "
                       f"of them directly, and the review says: {review}")
    finding["summary"] = (f"torch extension ABI mismatch: {finding['library']} ({package}) does not load with "
                          f"torch {torch.get('version') or 'of this image'}, built against {built_for}; "
                          f"{consequence}. Fix: {fix}")
    return finding
