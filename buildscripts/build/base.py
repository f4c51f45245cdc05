"""The OS base image: mmdebstrap against the host's own Debian mirror, then loaded as an image of fixed bytes.

No registry is needed. The image is tagged by a hash of its inputs (suite, variant, packages,
mirror), so it is reused while they are unchanged; its id is recorded in every cell's labels.
Two builds from the same mirror state give the same image id, here or on another machine
(build/rootfs.py: the same tar; build/imagearchive.py: the same config; docs/reproducible-builds.md).
A base declared as `image: REF` is taken from a registry instead. With a shared build cache, a
bootstrapped base is shared beside it (see `ensure`).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import log, proc
from ..errors import ConfigError, ToolMissingError
from ..matrix.schema import Base
from . import emulation, imagearchive, rootfs

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

BASE_REPOSITORY = "sglang-images/base"
# What every debootstrapped base carries: Python for the venv and the probe; libnuma1 (the runtime library
# alone, 71 kB) because sgl_kernel's common_ops links libnuma.so.1 (SGLang 0.5.10's sgl_kernel 0.3.x) and a
# minbase Debian lacks it, so without it sgl_kernel cannot load on a GPU or not (`shared-library-missing`).
BASE_PACKAGES = ("python3", "python3-venv", "libnuma1")
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
# Whoever builds (a test session, a CI job) may name itself: every image it builds then carries
# OWNER_LABEL=that name, so that it can remove exactly what it made and nothing of anyone else's.
OWNER_ENV = "SGLANG_IMAGES_OWNER"
OWNER_LABEL = "io.sglang-images.owner"
BASE_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# How a base's root file system is made, part of its inputs: a base made another way is another image.
BOOTSTRAP = "mmdebstrap, SOURCE_DATE_EPOCH from the Release file, docker-archive load"


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
            "excludes": rootfs.DPKG_EXCLUDES, "bootstrap": BOOTSTRAP}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def ensure(name: str, base: Base, *, client: docker.DockerClient, logs: Path,
           shared: Callable[[str], str] | None = None, push: bool = False,
           labels: Mapping[str, str] | None = None) -> BaseImage:
    """The base image for `name`, built only when no image with the same inputs exists; a new one also
    carries `labels` (the owner's, see `owner_labels`).

    `shared(digest)` names where runners share bootstrapped bases (beside the build cache): a base
    found there is used (pulled, and named like a local one, which it replaces), and else (`push`) this
    runner's is pushed there. Two runners' bases from the same mirror state are the same image (the cache keys
    of every layer hang on the base's id); sharing it still spares the others the bootstrap, and keeps them on
    one base when the mirror moves between their builds.
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
        found = bootstrap(name, base, client=client, logs=logs, mirror=mirror, digest=digest, ref=ref,
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


def bootstrap(name: str, base: Base, *, client: docker.DockerClient, logs: Path, mirror: str, digest: str,
              ref: str, labels: Mapping[str, str] | None) -> BaseImage:
    """Base `name` built now (whatever exists), tagged `ref`: the same image id from the same mirror state."""
    assert base.debootstrap is not None
    boot = base.debootstrap
    # Another CPU's base is bootstrapped the same way: the packages' own scripts run through QEMU user emulation
    # (a few minutes more). The image's platform is written into its config (imagearchive), not the engine's.
    emulation.require(base.cpu)
    emulated = " under emulation" if emulation.needed(base.cpu) else ""
    if emulated:   # mmdebstrap asks arch-test whether the CPU's binaries run here, and stops without it
        proc.which("arch-test", hint="apt-get install arch-test (`.ci/install-engine` does)")
    log.info(f"building base {ref} with mmdebstrap {boot.suite}/{boot.variant} for {base.cpu.oci}{emulated} "
             "(a few minutes, once)")
    log_file = logs / "base" / f"{name}.log"
    what = rootfs.Bootstrap(suite=boot.suite, variant=boot.variant, packages=(*BASE_PACKAGES, *boot.include),
                            arch=base.cpu.debian, mirror=mirror)
    with tempfile.TemporaryDirectory(prefix="sglang-base-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        epoch = rootfs.build(what, tarball, log=log_file)
        spec = imagearchive.Spec(
            platform=base.cpu.oci, env=(BASE_ENV,), epoch=epoch,
            labels={"io.sglang-images.base": name, "io.sglang-images.base.inputs": digest, **(labels or {})},
            created_by=f"mmdebstrap --variant={boot.variant} {boot.suite} ({', '.join(what.packages)})")
        image_id = imagearchive.load(client, tarball, spec, tag=ref, work=Path(tmp))
    log.info(f"base {ref} = {image_id}")
    return BaseImage(ref, image_id, digest, built=True)


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
