"""Platforms as Docker and containerd read them, and only as they read them.

containerd (Docker's containerd store, Kubernetes, `ctr`) and Docker's classic store pick an index entry
through containerd's `platforms.Normalize`: Go's `strings.ToLower` on each field, then aliases (`x86_64` is
amd64, `aarch64` is arm64, `armhf` is arm/v7) and default variants (arm64's v8, arm's v7, amd64's v1 are
dropped or filled in). Readers built on containers/image (skopeo, Podman, CRI-O) compare the fields as they
are written. So an entry spelled `Linux/x86_64` is linux/amd64 to containerd and nothing to Podman, and an
entry spelled with a letter whose lower case Go and Python disagree on (`lİnux`: Go lowers İ to `i`, Python to
`i` plus a combining dot) is linux/amd64 to containerd and another platform to Python.

Hence two rules, here and nowhere else:
- `containerd` (and `normalised`, the project's key for a platform) read a platform exactly as containerd does:
  whoever picks an index entry (`check`, `verify` by digest, promotion) picks the one the engine would pull, and
  two entries one platform to containerd make an index ambiguous;
- `read` refuses a platform any two of those readers could read apart: a field that is not lowercase ASCII
  letters and digits, an alias, a variant containerd rewrites, an os or architecture without the other, and
  fields some containerd versions match on and others ignore (`os.features`, `os.version` off Windows).
"""

from __future__ import annotations

import platform as host_platform
import re
from collections.abc import Mapping

PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?")
FIELD = re.compile(r"[a-z0-9]+")   # ASCII only: `re` with a str pattern would match any Unicode digit for \d
# What `uname -m` says on machines whose platform Docker names otherwise (i686 is a uname name, not an index's).
UNAME = {"x86_64": "amd64", "aarch64": "arm64", "i686": "386", "i386": "386", "armv7l": "arm"}
# Go's unicode.ToLower is the simple (one to one) mapping of UnicodeData.txt; Python's str.lower applies
# SpecialCasing's full mappings too, which for one code point gives two (`İ` -> `i̇`). Checked over every code
# point by tests/unit/test_platform_reading.py.
GO_LOWER_EXCEPTIONS = {"\u0130": "i"}
HINT = ("the index or image was not written by this project's promotion or by buildx: do not use it; write "
        "platforms as containerd does (lowercase ASCII, `linux/amd64`, `linux/arm64` or `linux/arm64/v8`)")
DEFAULT_OS = "linux"   # what containerd fills in for an empty os: its own (runtime.GOOS), on the hosts served here


class NotCanonical(ValueError):
    """A platform that two readers of images could read as different platforms: the message says how."""


def machine() -> str:
    """This machine's platform as an index names it (`linux/amd64`): what Docker would pull here."""
    name = host_platform.machine().lower()
    return f"linux/{UNAME.get(name, name)}"


def problem(value: str) -> str | None:
    return None if PLATFORM.fullmatch(value) else f"{value!r} is not OS/ARCHITECTURE[/VARIANT], e.g. linux/arm64"


def go_lower(text: str) -> str:
    """`text` as Go's strings.ToLower writes it: each code point by its simple lowercase mapping."""
    return "".join(GO_LOWER_EXCEPTIONS.get(c) or (low if len(low := c.lower()) == 1 else c) for c in text)


def containerd(os: str, architecture: str, variant: str = "") -> tuple[str, str, str]:
    """(os, architecture, variant) as containerd's platforms.Normalize reads them (containerd/platforms,
    database.go: normalizeOS, normalizeArch)."""
    os = go_lower(os) or DEFAULT_OS
    os = "darwin" if os == "macos" else os
    architecture, variant = go_lower(architecture), go_lower(variant)
    if architecture == "i386":
        return os, "386", ""
    if architecture in ("x86_64", "x86-64", "amd64"):
        return os, "amd64", "" if variant == "v1" else variant
    if architecture in ("aarch64", "arm64"):
        return os, "arm64", {"8": "", "v8": "", "v8.0": "", "9": "v9", "9.0": "v9", "v9.0": "v9"}.get(variant, variant)
    if architecture in ("armhf", "armel"):
        return os, "arm", "v7" if architecture == "armhf" else "v6"
    if architecture == "arm" and variant in ("", "7", "5", "6", "8"):
        return os, "arm", f"v{variant or '7'}"
    return os, architecture, variant


def normalised(platform: str) -> str:
    """`platform` (os/architecture[/variant]) as containerd reads it, as one key: `linux/arm64/v8` for arm64,
    which containerd writes without a variant and Docker with v8 (both are one platform)."""
    os, architecture, variant = containerd(*[*platform.split("/", 2), "", ""][:3])
    variant = variant or ("v8" if architecture == "arm64" else "")
    return "/".join(part for part in (os, architecture, variant) if part)


def matches(found: str, asked: str) -> bool:
    """`found` is a platform Docker takes for `asked` (an arm64 entry without variant is v8); a variant is
    compared only when `asked` names one."""
    f, a = normalised(found).split("/"), normalised(asked).split("/")
    if f[:2] != a[:2]:
        return False
    return len(asked.split("/")) < 3 or f[2:] == a[2:]


def spelling_problem(os: str, architecture: str, variant: str = "") -> str | None:
    """Why readers of images could read this platform apart (None: it is written as containerd writes it, or
    as arm64/v8, Docker's spelling of containerd's arm64)."""
    fields = {"os": os, "architecture": architecture, "variant": variant}
    for name, value in fields.items():
        lowered = go_lower(value)
        if not value.isascii() or lowered != value or value.lower() != value:
            python = f", Python as {value.lower()!r}" if value.lower() != lowered else ""
            return (f"its {name} {value!r} is not lowercase ASCII: containerd reads it as {lowered!r}{python}, "
                    "skopeo and Podman as it is written")
    read = containerd(os, architecture, variant)
    if read != (os, architecture, variant) and (read, variant) != ((os, "arm64", ""), "v8"):
        return (f"{'/'.join(filter(None, fields.values()))} is containerd's {'/'.join(filter(None, read))}, "
                "but skopeo and Podman, which compare platforms as written, take it for another")
    for name, value in fields.items():
        if value and not FIELD.fullmatch(value):
            return f"its {name} {value!r} holds more than lowercase letters and digits (no platform is written so)"
    return None


def written_problem(platform: str) -> str | None:
    """`spelling_problem` of `os/architecture[/variant]` as one string (None: written as containerd writes it)."""
    parts = platform.split("/")
    if not 2 <= len(parts) <= 3:
        return f"{platform!r} is not os/architecture[/variant]"
    return spelling_problem(*parts)


def read(named: Mapping[str, object], *, required: bool) -> str | None:
    """The platform an OCI platform object or image config names (`os/architecture[/variant]`); None when it
    names neither os nor architecture and `required` is false (an image config's may name none). NotCanonical
    when readers of images could read it apart (module docstring)."""
    os, architecture, variant = (named.get(k) for k in ("os", "architecture", "variant"))
    fields = {"os": os, "architecture": architecture, "variant": variant}
    for name, value in fields.items():
        if value is not None and not isinstance(value, str):
            msg = f"its {name} is {type(value).__name__} {value!r}, not a string: Go's readers refuse it"
            raise NotCanonical(msg)
    if not os and not architecture and not required:
        return None
    if not os or not architecture:
        msg = (f"it names {'an architecture but no os' if architecture else 'no architecture'}: containerd fills "
               f"an empty os in with its own ({DEFAULT_OS}), other readers take it for no platform")
        raise NotCanonical(msg)
    assert isinstance(os, str) and isinstance(architecture, str)   # narrowed above: strings, not empty
    why = spelling_problem(os, architecture, variant if isinstance(variant, str) else "")
    if why is None:
        why = _matched_apart(named, os)
    if why is not None:
        raise NotCanonical(why)
    return "/".join(filter(None, (os, architecture, variant if isinstance(variant, str) else "")))


def _matched_apart(named: Mapping[str, object], os: str) -> str | None:
    """Fields that containerd versions match on differently: os.features (containerd 2 picks such an entry only
    on a host that has them, 1.x ignores them) and os.version off Windows (matched on Windows alone)."""
    for name in ("os.features", "features"):
        if named.get(name):
            return f"it names {name} {named[name]!r}: containerd 1.x ignores them, containerd 2 matches on them"
    if named.get("os.version") and os != "windows":
        return f"it names os.version {named['os.version']!r} for {os}: containerd reads it on Windows only"
    return None


def of_entry(entry: Mapping[str, object]) -> str | None:
    """The platform an index entry names (`os/architecture[/variant]`), None when it names none (containerd then
    reads the platform of its image config); NotCanonical when readers of images could read it apart."""
    named = entry.get("platform")
    if named is None:
        return None
    if not isinstance(named, Mapping):
        msg = f"its platform is {type(named).__name__} {named!r}, not an object: Go's readers refuse the index"
        raise NotCanonical(msg)
    return read(named, required=True)


def listed(entries: object) -> list[tuple[str | None, dict[str, object]]]:
    """Each entry of an index's `manifests` with the platform it names: NotCanonical, naming the entry, when any
    of them could be read apart (an index is taken whole or not at all: which entry an engine picks depends on
    every entry)."""
    found: list[tuple[str | None, dict[str, object]]] = []
    for number, entry in enumerate(entries if isinstance(entries, list) else [], 1):
        if not isinstance(entry, dict):
            msg = f"entry {number} of the index is {type(entry).__name__}, not an object"
            raise NotCanonical(msg)
        try:
            found.append((of_entry(entry), entry))
        except NotCanonical as exc:
            msg = f"entry {number} ({entry.get('digest')}): {exc}"
            raise NotCanonical(msg) from None
    return found
