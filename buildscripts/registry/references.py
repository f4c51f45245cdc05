"""Image references and repositories as a registry and the engine read them: the digest a reference pins, its
repository, the registry host it names (`docker.io` when it names none), and whether that host is loopback."""

from __future__ import annotations

import ipaddress

from ..errors import ConfigError
from ..refs import REFERENCE, repository_problem


def by_digest(ref: str) -> tuple[str, str] | None:
    """`host/repo[:tag]@sha256:…` -> (`host/repo`, `sha256:…`); None when `ref` names no digest."""
    match = REFERENCE.fullmatch(ref)
    if match is None or not match["digest"]:
        return None
    return match["name"], match["digest"]


def repository_of(ref: str) -> str:
    """The repository part of a reference (`host:5000/repo:tag@sha256:…` -> `host:5000/repo`)."""
    match = REFERENCE.fullmatch(ref)
    return match["name"] if match else ref


def host(repository: str) -> str:
    """The registry host of a repository (`docker.io` when its first part names none, as Docker reads it)."""
    first, sep, _ = repository.partition("/")
    return first if sep and ("." in first or ":" in first or first == "localhost") else "docker.io"


def is_loopback(repository: str) -> bool:
    name = host(repository).rsplit(":", 1)[0].strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_repository(repository: str, flag: str) -> str:
    """`repository` as a registry repository of the form `HOST[:PORT]/NAME` (no tag, no digest)."""
    problem = repository_problem(repository)
    if problem or "/" not in repository:
        msg = f"{flag} {problem or repr(repository) + ' names no registry host'}"
        raise ConfigError(msg, hint=f"e.g. {flag} 127.0.0.1:5000/sglang-images-staging or "
                                    f"{flag} ghcr.io/ORG/sglang-images-staging")
    return repository
