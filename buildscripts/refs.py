"""Image references as Docker spells them: the grammar of distribution/reference, checked before any use.

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [ domain "/" ] component ( "/" component )*     (at most 255 characters)
    domain     := host [ ":" port ]                                 (a port is 1-65535)
    component  := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
    tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest     := algorithm ":" hex                                 (sha256: 64 hex digits)

What the engine would refuse is refused here with the reason, so that a typo reads as a bad reference and
not as an engine failure ("check the engine"), and nothing malformed reaches a URL (`127.0.0.1:abc/cache`
crashed the cache's reachability check inside http.client).
"""

from __future__ import annotations

import re

MAX_NAME = 255
MAX_PORT = 65535
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"  # one part of a repository path
_LABEL = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]+))?"
_NAME = rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?{COMPONENT}(?:/{COMPONENT})*)"
_TAG = r"(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})"
_DIGEST = r"(?P<digest>sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}|[a-z][a-z0-9]*(?:[+._-][a-z][a-z0-9]*)*:[0-9a-f]{32,})"
REFERENCE = re.compile(rf"{_NAME}(?::{_TAG})?(?:@{_DIGEST})?")
REPOSITORY = re.compile(_NAME)
FORMS = "[HOST[:PORT]/]NAME[:TAG][@sha256:DIGEST] (lower case; e.g. ghcr.io/org/sglang-images:0.5.16)"


def _why(text: str) -> str:
    """The likeliest reason a text is no reference, in words."""
    if not text.strip():
        return "it is empty"
    if "://" in text:
        return "a reference has no scheme (drop the http:// or https://)"
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        return "it holds a space, line break or control character"
    if not text.isascii():
        return "it holds characters other than ASCII"
    if "@" in text and not re.search(r"@[a-z0-9+._-]+:[0-9a-f]{32,}$", text):
        return "a digest is sha256: and 64 hex digits"
    port = re.match(r"[^/]*:([^/]*)/", text)
    if port and not port[1].isdigit():
        return f"the port {port[1]!r} is not a number"
    name = text.partition("@")[0]
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "it has an empty, '.' or '..' path component"
    if REFERENCE.fullmatch(text.lower()):
        return "a repository name is lower case"
    return "it does not follow the reference grammar"


def _problem(text: str, pattern: re.Pattern[str], what: str) -> str | None:
    match = pattern.fullmatch(text)
    if match is None:
        return f"{text[:80]!r} is not {what}: {_why(text)}"
    if len(match["name"]) > MAX_NAME:
        return f"{text[:40]!r}… is not {what}: the name is longer than {MAX_NAME} characters"
    port = match["port"]
    if port is not None and not 0 < int(port) <= MAX_PORT:
        return f"{text[:80]!r} is not {what}: port {port} is not 1-{MAX_PORT}"
    return None


def reference_problem(text: str) -> str | None:
    """Why `text` is no image reference or image id the engine takes, or None."""
    return _problem(text, REFERENCE, "an image reference")


def repository_problem(text: str) -> str | None:
    """Why `text` is no repository (a name without tag or digest, e.g. a cache's `REF`), or None."""
    return _problem(text, REPOSITORY, "a repository ([HOST[:PORT]/]NAME, no tag)")
