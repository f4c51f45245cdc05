"""What locks and builds borrow from the host: its CA bundle, its pip index settings, and the 0/1 switches
of the project's own environment variables (`switch`).

Both reach builds only as BuildKit secrets (never an image layer): TLS to package indexes may be
intercepted here, so containers need the host's CA bundle, and the host may use a private index.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

PYPI = "https://pypi.org/simple"  # uv's (and pip's) default index
CA_CANDIDATES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
PIP_CONFIGS = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf", "~/.config/pip/pip.conf", "~/.pip/pip.conf")


@dataclass(frozen=True)
class IndexSettings:
    index_url: str | None
    extra_index_urls: tuple[str, ...]

    def uv_env(self) -> dict[str, str]:
        """The same settings for uv, which does not read pip.conf."""
        env: dict[str, str] = {}
        if self.index_url:
            env["UV_DEFAULT_INDEX"] = self.index_url
        if self.extra_index_urls:
            env["UV_INDEX"] = " ".join(self.extra_index_urls)
        return env

    def build_env(self) -> dict[str, str]:
        """The settings for pip and uv inside a build (only network indexes reach this object)."""
        env = self.uv_env()
        if self.index_url:
            env["PIP_INDEX_URL"] = self.index_url
        if self.extra_index_urls:
            env["PIP_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        return env


def ca_bundle(env: Mapping[str, str]) -> Path | None:
    for candidate in (env.get("SSL_CERT_FILE"), env.get("PIP_CERT"), *CA_CANDIDATES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def index_settings(env: Mapping[str, str]) -> IndexSettings:
    """Index URLs from PIP_INDEX_URL/PIP_EXTRA_INDEX_URL, else pip.conf files; network URLs only."""
    parser = configparser.ConfigParser()
    parser.read([os.path.expanduser(p) for p in PIP_CONFIGS])
    index = env.get("PIP_INDEX_URL") or parser.get("global", "index-url", fallback=None)
    extra = env.get("PIP_EXTRA_INDEX_URL") or parser.get("global", "extra-index-url", fallback="") or ""
    usable = [u for u in extra.split() if u.startswith(("http://", "https://"))]
    if index and not index.startswith(("http://", "https://")):
        index = None
    return IndexSettings(index, tuple(usable))


def uv_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The environment uv resolves with: the host's pip index settings, then any UV_* the caller set (which win)."""
    return {**index_settings(env).uv_env(), **{k: v for k, v in env.items() if k.startswith("UV_")}}


def index_urls(env: Mapping[str, str]) -> list[str]:
    """The indexes uv asks with these settings, in its order: UV_INDEX's first, the default index last.

    A UV_INDEX entry may be `name=URL`; local paths and file:// URLs are left out (as for builds)."""
    settings = uv_settings(env)
    extra = [entry.split("=", 1)[1] if "=" in entry.split("://", 1)[0] else entry
             for entry in settings.get("UV_INDEX", "").split()]
    urls = [*extra, settings.get("UV_DEFAULT_INDEX") or PYPI]
    return [u for u in urls if u.startswith(("http://", "https://"))]


def switch(env: Mapping[str, str], name: str) -> bool:
    """A 0/1 variable of the environment (unset is 0); anything else is a ConfigError naming it."""
    value = env.get(name, "")
    if value not in ("", "0", "1"):
        msg = f"{name}={value!r} is neither 0 nor 1"
        raise ConfigError(msg, hint=f"set {name}=1 to turn it on, or unset it")
    return value == "1"
