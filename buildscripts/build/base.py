"""The OS base image: debootstrap against the host's own Debian mirror, then `docker import`.

No registry is needed. The image is tagged by a hash of its inputs (suite, variant, packages,
mirror), so it is reused while they are unchanged; its id is recorded in every cell's labels.
A base declared as `image: REF` is taken from a registry instead. With a shared build cache, a
debootstrapped base is shared beside it (see `ensure`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import log, proc
from ..errors import BaseBuildError, ConfigError, ToolMissingError
from ..matrix.schema import Base
from . import emulation

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

BASE_REPOSITORY = "sglang-images/base"
# What every debootstrapped base carries: Python for the venv and the probe; libnuma1 (the runtime library
# alone, 71 kB) because sgl_kernel's common_ops links libnuma.so.1 (SGLang 0.5.10's sgl_kernel 0.3.x) and a
# minbase Debian lacks it, so without it sgl_kernel cannot load on a GPU or not (`shared-library-missing`).
BASE_PACKAGES = ("python3", "python3-venv", "libnuma1")
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
# Documentation, manuals and translations no server reads (what Debian's and Ubuntu's minimal container
# images leave out), kept out of the base and, through dpkg's own filter, out of every package a later
# layer installs (the toolkit's g++). Copyright files stay: the licences travel with the image.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*", "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/lintian/*", "path-exclude=/usr/share/locale/*/LC_MESSAGES/*.mo",
)
DPKG_EXCLUDES_FILE = "etc/dpkg/dpkg.cfg.d/sglang-images-excludes"
# Whoever builds (a test session, a CI job) may name itself: every image it builds then carries
# OWNER_LABEL=that name, so that it can remove exactly what it made and nothing of anyone else's.
OWNER_ENV = "SGLANG_IMAGES_OWNER"
OWNER_LABEL = "io.sglang-images.owner"
BASE_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BaseImage:
    ref: str
    id: str
    inputs_hash: str
    built: bool  # False when an existing image was reused


def host_mirror(sources: tuple[Path, ...] = APT_SOURCES) -> str:
    """The Debian mirror URI the host's apt uses (the first non-security `.../debian` entry)."""
    files: list[Path] = []
    for src in sources:
        if src.is_dir():
            files += sorted(src.glob("*.sources")) + sorted(src.glob("*.list"))
        elif src.is_file():
            files.append(src)
    for path in files:
        for uri in _uris(path.read_text(errors="replace")):
            if re.search(r"/debian/?$", uri) and "security" not in uri:
                return uri.rstrip("/")
    searched = ", ".join(str(p) for p in files) or "none found"
    msg = f"no Debian mirror found in the host's apt sources ({searched})"
    raise ConfigError(msg, hint="configure apt, or declare the base as `image: REF` in matrix.yaml")


def _uris(text: str) -> list[str]:
    uris = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("URIs:"):
            uris += line.removeprefix("URIs:").split()
        elif line.startswith("deb "):
            parts = re.sub(r"\[[^]]*\]", "", line).split()
            if len(parts) > 1:
                uris.append(parts[1])
    return uris


def owner_labels(env: Mapping[str, str]) -> dict[str, str]:
    """{OWNER_LABEL: name} when the environment names an owner (not part of any inputs hash)."""
    owner = env.get(OWNER_ENV, "")
    return {OWNER_LABEL: owner} if owner else {}


def inputs_hash(name: str, base: Base, mirror: str | None) -> str:
    data = {"name": name, "base": base.model_dump(mode="json"), "mirror": mirror, "packages": BASE_PACKAGES,
            "excludes": DPKG_EXCLUDES}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def ensure(name: str, base: Base, *, client: docker.DockerClient, logs: Path,
           shared: Callable[[str], str] | None = None, push: bool = False,
           labels: Mapping[str, str] | None = None) -> BaseImage:
    """The base image for `name`, built only when no image with the same inputs exists; a new one also
    carries `labels` (the owner's, see `owner_labels`).

    `shared(digest)` names where runners share debootstrapped bases (beside the build cache): a base
    found there is used (pulled, and named like a local one, which it replaces), and else (`push`) this
    runner's is pushed there. Two runners' debootstraps never give the same image, and the cache keys
    of every layer hang on the base's id.
    """
    import docker.errors  # the SDK where the engine is reached, not when the CLI starts (cli.py)

    if base.image:
        return _registry_base(base.image, client)
    assert base.debootstrap is not None
    mirror = host_mirror()
    digest = inputs_hash(name, base, mirror)
    ref = f"{BASE_REPOSITORY}:{name}-{digest}"
    remote = shared(digest) if shared else None
    if remote and (pulled := _pull_shared(client, remote, ref)):
        # The shared base wins over a local one of the same inputs: only it gives the shared cache's keys.
        return BaseImage(ref, str(pulled.id), digest, built=False)
    try:
        image = client.images.get(ref)
        found = BaseImage(ref, str(image.id), digest, built=False)
    except docker.errors.ImageNotFound:
        found = _debootstrap(name, base, client=client, logs=logs, mirror=mirror, digest=digest, ref=ref,
                             labels=labels)
    if remote and push:
        _push_shared(client, ref, remote)   # not shared yet: this runner's becomes the one
    return found


def _pull_shared(client: docker.DockerClient, remote: str, ref: str) -> Image | None:
    import docker.errors

    repository, _, tag = remote.rpartition(":")
    try:
        image = client.images.pull(repository, tag=tag)
    except docker.errors.APIError:
        return None   # not shared yet (or not readable): this runner builds it
    image.tag(*ref.rsplit(":", 1))
    client.images.remove(remote, noprune=True)   # keep only the local name
    log.info(f"base {ref} pulled from the build cache ({remote})")
    return image


def _push_shared(client: docker.DockerClient, ref: str, remote: str) -> None:
    import docker.errors

    repository, _, tag = remote.rpartition(":")
    client.images.get(ref).tag(repository, tag)
    try:
        for line in client.images.push(repository, tag=tag, stream=True, decode=True):
            if "error" in line:
                log.warn(f"base {ref} not shared to {remote}: {line['error']}")
                break
        else:
            log.info(f"base {ref} shared as {remote}")
    except docker.errors.APIError as exc:
        log.warn(f"base {ref} not shared to {remote}: {exc.explanation}")
    finally:
        client.images.remove(remote, noprune=True)   # only the extra name goes


def _debootstrap(name: str, base: Base, *, client: docker.DockerClient, logs: Path, mirror: str, digest: str,
                 ref: str, labels: Mapping[str, str] | None) -> BaseImage:
    assert base.debootstrap is not None
    debootstrap = proc.which("debootstrap", hint="apt-get install debootstrap (`.ci/install-engine` does)")
    boot = base.debootstrap
    packages = ",".join((*BASE_PACKAGES, *boot.include))
    # Another CPU's base is bootstrapped the same way: its second stage runs the packages' own scripts, through
    # QEMU user emulation (a few minutes more).
    emulation.require(base.cpu)
    emulated = " under emulation" if emulation.needed(base.cpu) else ""
    log.info(f"building base {ref} with debootstrap {boot.suite}/{boot.variant} for {base.cpu.oci}{emulated} "
             "(a few minutes, once)")
    with tempfile.TemporaryDirectory(prefix="sglang-base-") as tmp:
        root = Path(tmp) / "rootfs"
        done = proc.run(
            [debootstrap, f"--arch={base.cpu.debian}", f"--variant={boot.variant}", f"--include={packages}",
             boot.suite, str(root), mirror],
            log=logs / "base" / f"{name}.log", timeout=1800,
        )
        if not done.ok:
            msg = f"debootstrap of base {name!r} failed (exit {done.returncode})"
            raise BaseBuildError(msg, hint=f"see {logs / 'base' / (name + '.log')}\n{done.tail(15)}")
        _trim(root)
        packed = Path(tmp) / "context" / "rootfs.tar"
        packed.parent.mkdir()
        tar = proc.run(["tar", "-C", str(root), "-cf", str(packed), "."], log=logs / "base" / f"{name}.log",
                       timeout=600)
        if not tar.ok:
            msg = f"packing the base rootfs failed: {tar.tail(5)}"
            raise BaseBuildError(msg)
        image_labels = {"io.sglang-images.base": name, "io.sglang-images.base.inputs": digest, **(labels or {})}
        if emulation.needed(base.cpu):
            _import_as(base.cpu.oci, packed, ref=ref, labels=image_labels, log=logs / "base" / f"{name}.log")
        else:
            with packed.open("rb") as fh:
                changes = [f"LABEL {k}={v}" for k, v in image_labels.items()]
                changes.append(f"ENV {BASE_ENV}")
                # The engine answers with its raw JSON status line: the id is read back from the image instead.
                client.api.import_image_from_data(fh, repository=BASE_REPOSITORY, tag=f"{name}-{digest}",
                                                  changes=changes)
    image = client.images.get(ref)
    log.info(f"base {ref} = {image.id}")
    return BaseImage(ref, str(image.id), digest, built=True)


def _import_as(platform: str, packed: Path, *, ref: str, labels: Mapping[str, str], log: Path) -> None:
    """The rootfs tar as an image of another CPU's `platform`. `docker import` cannot say so: Docker 20.10 records
    the engine's own CPU whatever `--platform` says (only the OS is taken), so BuildKit makes it instead, from
    scratch: ADD unpacks the tar, nothing runs (no emulation needed)."""
    dockerfile = packed.parent / "Dockerfile"
    dockerfile.write_text("FROM scratch\nADD rootfs.tar /\n" + f"ENV {BASE_ENV}\n"
                          + "".join(f"LABEL {k}={json.dumps(v)}\n" for k, v in labels.items()))
    done = proc.run(["docker", "buildx", "build", "--progress=plain", "--platform", platform, "--tag", ref,
                     "--file", str(dockerfile), str(packed.parent)],
                    log=log, timeout=1800, env={"DOCKER_BUILDKIT": "1"})
    if not done.ok:
        msg = f"making the {platform} base image from its rootfs failed (buildx exited {done.returncode})"
        raise BaseBuildError(msg, hint=f"see {log}\n{done.tail(10)}")


def _trim(root: Path) -> None:
    """Drop what only the bootstrap needed (apt's downloaded packages and lists) and what dpkg's
    excludes (DPKG_EXCLUDES) will keep out of every later install."""
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        target = root / sub
        if target.is_dir():
            for entry in target.iterdir():
                if entry.is_file() and entry.name not in ("lock",):
                    entry.unlink()
                elif entry.is_dir() and entry.name != "partial":
                    shutil.rmtree(entry)
    excludes = root / DPKG_EXCLUDES_FILE
    excludes.parent.mkdir(parents=True, exist_ok=True)
    excludes.write_text("# sglang-images: no documentation in the image (copyright files stay)\n"
                        + "\n".join(DPKG_EXCLUDES) + "\n")
    for folder in ("usr/share/man", "usr/share/info", "usr/share/groff", "usr/share/lintian"):
        for entry in (root / folder).glob("*"):
            _remove(entry)
    for translation in (root / "usr/share/locale").glob("*/LC_MESSAGES/*.mo"):
        translation.unlink()
    for entry in (root / "usr/share/doc").glob("*/*"):
        if entry.name != "copyright":
            _remove(entry)


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def _registry_base(ref: str, client: docker.DockerClient) -> BaseImage:
    import docker.errors

    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        try:
            image = client.images.pull(ref)
        except docker.errors.APIError as exc:
            msg = f"base image {ref!r} is not present and cannot be pulled: {exc.explanation}"
            hint = "docker pull it (or docker load it) first, or use `debootstrap:`"
            raise ToolMissingError(msg, hint=hint) from None
    return BaseImage(ref, str(image.id), str(image.id).removeprefix("sha256:")[:16], built=False)
