"""`nox -s export -- CELL_OR_IMAGE [--out DIR] [--force]`: an OCI archive that Proxmox VE's `pct create`
(and LXC's `oci` template) accepts, its sha256, and an install note with the exact commands.

The archive is `NAME.oci.tar`: an OCI layout (oci-layout, index.json, blobs/) with gzip layers, written
by skopeo, with the cell's facts as annotations (cell id, lock hashes, verdict, verified archs). An image
whose signed verdicts are attached in its registry is copied from there, its platform manifest byte for byte
(`--preserve-digests`: the archive's manifest digest is the one the verdicts name; the annotations go on
index.json's descriptor, outside the manifest), and its verdicts travel beside the archive
(NAME.oci.tar.verdicts.json, trust/carried.py: what `nox -s check -- oci-archive:PATH` reads). Any other
image is copied from the local engine, its annotations in a manifest written here, and carries none. Only an
image a sealed results record vouches for (the gate of `tag` and `promote`, publish/trusted.py) is
exported, unless `--force`, and then the annotations say so.
Everything is made in a hidden folder next to the target and moved into place at the end: an
interrupted or failed export leaves no partial archive.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import shutil
import tarfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import arguments, disk, log, proc, results
from ..errors import (
    ConfigError,
    DiskSpaceError,
    ExportError,
    FatalError,
    NotVerified,
    RegistryError,
    ToolMissingError,
)
from ..lxc import pct
from ..matrix.schema import LABEL_PREFIX
from ..refs import FORMS, reference_problem
from ..registry import manifests
from ..results import RunResults
from ..trust import carried, sources
from ..trust.keys import PublicKey
from ..trust.seen import History
from ..verify.reuse import saved_runs
from ..workspace import SAFE_NAME, Workspace
from . import trusted

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

# The longest name made from an archive name, `.NAME.partial-12345678`, must fit the file system's 255 bytes.
MAX_NAME = disk.NAME_MAX - len(".partial-12345678") - 1
REF_NAME = "latest"       # the tag inside the archive: `oci-archive:NAME.oci.tar:latest`
GZIP_MAGIC = b"\x1f\x8b"
FORCED = f"{LABEL_PREFIX}.export.forced"
ANNOTATED = ("cell", "verdict", "verified.archs", "verified.gpus", "results.digest", "tested-image", "sglang",
             "lane", "toolkit", "archs")


@dataclass(frozen=True, kw_only=True)
class Archive:
    """What an export writes of an image: its name (NAME.oci.tar), the annotations made of `labels` (the record's
    words where a record vouches for it, else the image's own), why it is exported although not verified
    (`forced`), the CUDA its install note names, and the signed verdicts it carries (`tested`: copied from the
    registry that holds them)."""

    name: str
    forced: str | None = None
    cuda: str | None = None
    labels: Mapping[str, str] | None = None
    tested: carried.Tested | None = None


@dataclass(frozen=True)
class Exported:
    archive: Path
    sha256: str
    size_bytes: int
    image_size_bytes: int
    seconds: float
    note: Path


def resolve(client: docker.DockerClient, what: str, vouched: Sequence[trusted.Trusted] = ()) -> Image:
    """An image reference or id, else a cell id: the image of its newest record that earned a good tag,
    else its newest local image."""
    import docker.errors  # the SDK where the engine is reached, not when the CLI starts (cli.py)

    problem = reference_problem(what)
    if problem and not SAFE_NAME.fullmatch(what):  # neither: said as such, not as an engine failure
        msg = f"CELL_OR_IMAGE {problem}, nor a cell id"
        raise ConfigError(msg, hint=f"give a cell id (`nox -s matrix` lists them) or an image as {FORMS}")
    try:
        return client.images.get(what)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as exc:  # e.g. a name that is no valid reference
        if "invalid reference" not in str(exc).lower():
            raise
    for good in (t for t in vouched if t.cell_id == what):
        try:
            return client.images.get(good.image_id)
        except docker.errors.ImageNotFound:
            continue
    found = client.images.list(filters={"label": f"{LABEL_PREFIX}.cell={what}"})
    if not found:
        msg = f"{what!r} is neither a local image nor a cell with a built image"
        raise ConfigError(msg, hint=f"build it first (`nox -s build -- --only {what}`), or give an image reference")
    return max(found, key=lambda i: i.attrs.get("Created", ""))


def vouching(image_id: str, vouched: Sequence[trusted.Trusted]) -> trusted.Trusted | None:
    """The newest record the gate let through that earned good tags for exactly this image."""
    return next((t for t in vouched if t.image_id == image_id), None)


CLAIMS = tuple(f"{LABEL_PREFIX}.{k}" for k in ("verdict", "verified.", "tested-image", "results.digest"))


def record_labels(labels: Mapping[str, str], record: trusted.Trusted | None) -> dict[str, str]:
    """The image's own labels less any that claim a verdict (labels are never evidence), with what the
    record that vouches for it says."""
    found = {k: v for k, v in labels.items() if not k.startswith(CLAIMS)}
    if record is not None:
        found.update({f"{LABEL_PREFIX}.cell": record.cell_id, f"{LABEL_PREFIX}.verdict": record.judged.verdict.value,
                      f"{LABEL_PREFIX}.verified.archs": " ".join(record.archs),
                      f"{LABEL_PREFIX}.verified.gpus": ", ".join(record.gpus),
                      f"{LABEL_PREFIX}.tested-image": record.image_id})
    return found


def vouched_runs(patterns: Sequence[str], ws: Workspace) -> list[RunResults]:
    """The results files named, else the saved runs under runs/, newest first: the gate weighs each record
    (its cell's definition included), whatever matrix.yaml its file was made from."""
    if not patterns:
        return saved_runs(ws.runs)
    return [results.load(path) for path in arguments.results_files(patterns)]


def manifest_annotations(labels: Mapping[str, str], *, forced: str | None) -> dict[str, str]:
    found = {f"{LABEL_PREFIX}.{k}": labels[f"{LABEL_PREFIX}.{k}"] for k in ANNOTATED
             if labels.get(f"{LABEL_PREFIX}.{k}")}
    found.update({k: v for k, v in labels.items() if k.startswith((f"{LABEL_PREFIX}.lock.", "org.opencontainers."))})
    if forced:
        found[FORCED] = f"true: {forced}"
    return dict(sorted(found.items()))


def annotate(layout: Path, extra: Mapping[str, str]) -> str:
    """Add `extra` to the annotations of the layout's one manifest; return the new manifest digest.
    Config and layer blobs are untouched (the image id stays the tested one)."""
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    (entry,) = index["manifests"]
    old = layout / "blobs" / Path(*entry["digest"].split(":", 1))
    manifest = json.loads(old.read_bytes())
    manifest["annotations"] = {**manifest.get("annotations", {}), **extra}
    data = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest.split(":", 1)[1]).write_bytes(data)
    if old.name != digest.split(":", 1)[1]:
        old.unlink()
    entry.update(digest=digest, size=len(data))
    index_path.write_text(json.dumps(index, separators=(",", ":"), sort_keys=True))
    return digest


def annotate_index(layout: Path, extra: Mapping[str, str]) -> None:
    """Add `extra` to the annotations of index.json's one descriptor: the manifest, and its digest, stay."""
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    (entry,) = index["manifests"]
    entry["annotations"] = {**entry.get("annotations", {}), **extra}
    index_path.write_text(json.dumps(index, separators=(",", ":"), sort_keys=True))


def layer_problems(layout: Path) -> list[str]:
    """Layers that are not gzip (Proxmox unpacks gzip; mediaTypes alone are not to be trusted)."""
    index = json.loads((layout / "index.json").read_text())
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":", 1)[1]).read_bytes())
    problems = []
    for layer in manifest["layers"]:
        with (blobs / layer["digest"].split(":", 1)[1]).open("rb") as fh:
            magic = fh.read(2)
        if not layer["mediaType"].endswith("+gzip") or magic != GZIP_MAGIC:
            problems.append(f"{layer['digest'][:19]} ({layer['mediaType']})")
    return problems


def pack(layout: Path, archive: Path) -> None:
    """A reproducible tar of the layout (sorted names, no times, no owners); the layout's blobs are consumed."""
    def add(tar: tarfile.TarFile, path: Path) -> None:
        info = tar.gettarinfo(str(path), arcname=str(path.relative_to(layout)))
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        info.mode = 0o755 if info.isdir() else 0o644
        if info.isfile():
            with path.open("rb") as fh:
                tar.addfile(info, fh)
        else:
            tar.addfile(info)

    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in [layout / "oci-layout", layout / "index.json", layout / "blobs", *sorted(
                (layout / "blobs").rglob("*"))]:
            add(tar, path)
            if path.is_file() and path.parent.name == "sha256":
                path.unlink()  # the layout is scratch: the disk holds one copy of each blob, not two


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_target(out: Path, need_bytes: int) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        msg = f"cannot write the archive to {out}: {exc.strerror}"
        raise ConfigError(msg, hint="pass --out DIR with a folder you can write to") from None
    free = shutil.disk_usage(out).free
    if free < need_bytes:
        msg = (f"only {disk.size_text(free)} free in {out}; exporting this image needs about "
               f"{disk.size_text(need_bytes)}")
        raise DiskSpaceError(msg, hint="free space there, or pass --out DIR on a larger disk")


def export(client: docker.DockerClient, image: Image, out: Path, archive: Archive,
           env: Mapping[str, str] | None = None) -> Exported:
    size = int(image.attrs.get("Size", 0))
    # skopeo first copies the image out of the engine uncompressed (into TMPDIR: the work folder here), then
    # writes the gzip layout (about half); packing consumes the layout blob by blob.
    check_target(out, int(size * 1.6))
    skopeo = proc.which("skopeo", hint="apt-get install skopeo (`.ci/install-engine` does)")
    if archive.labels is None:
        archive = replace(archive, labels=dict(image.labels or {}))   # `record_labels` when vouched for
    work = out / f".{archive.name}.partial-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    try:
        with _writing(out):
            digest = _made(skopeo, image, work, out, archive, env or {})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    made, note = out / f"{archive.name}.oci.tar", out / f"{archive.name}.proxmox.md"
    return Exported(made, digest, made.stat().st_size, size, round(time.monotonic() - started, 1), note)


@contextlib.contextmanager
def _writing(out: Path) -> Iterator[None]:
    """A write that fails half-way (the disk filled after the space check, the folder vanished) is an
    ExportError: the work folder goes, nothing partial is left, the old archive of that name stays."""
    try:
        yield
    except OSError as exc:
        msg = f"writing the archive into {out} failed: {exc.strerror} ({exc.filename or out})"
        hint = ("free space there, or pass --out DIR on a larger disk" if exc.errno == errno.ENOSPC
                else "pass --out DIR of a folder you can write")
        raise ExportError(msg, hint=hint) from None


def _made(skopeo: str, image: Image, work: Path, out: Path, wanted: Archive, env: Mapping[str, str]) -> str:
    """Archive, checksum, install note (and the carried verdicts) made in `work`, then moved into `out`; the
    archive's sha256. An image whose signed verdicts are attached in its registry is copied from there, by
    digest, so that the archive's layers are the tested blobs themselves (gzip stays gzip: skopeo reuses
    them); any other from the local engine."""
    name, labels, forced, tested = wanted.name, wanted.labels or {}, wanted.forced, wanted.tested
    work.mkdir()
    # From a registry, byte for byte (skopeo refuses what it could not copy so); from the engine, compressed.
    source = ["--preserve-digests", *manifests.source_access(tested.source, env), f"docker://{tested.source}"] \
        if tested else ["--dest-compress", "--dest-compress-format", "gzip", f"docker-daemon:{image.id}"]
    done = proc.run([skopeo, "copy", "--quiet", *source, f"oci:{work / 'layout'}:{REF_NAME}"], timeout=7200,
                    env={**env, "TMPDIR": str(work)})
    if not done.ok:
        msg = f"skopeo could not export {tested.source if tested else image.id}: {done.tail(5)}"
        raise ExportError(msg, hint="check that skopeo can reach the registry, or the Docker engine (DOCKER_HOST)")
    bad = layer_problems(work / "layout")
    if bad:
        msg = f"skopeo wrote layers that are not gzip: {', '.join(bad)}"
        raise ExportError(msg, hint="Proxmox unpacks gzip layers; upgrade skopeo")
    if tested:
        annotate_index(work / "layout", manifest_annotations(labels, forced=forced))
    else:
        annotate(work / "layout", manifest_annotations(labels, forced=forced))
    archive, note = out / f"{name}.oci.tar", out / f"{name}.proxmox.md"
    pack(work / "layout", work / archive.name)
    digest = sha256_of(work / archive.name)
    sums, visible = [f"{digest}  {archive.name}"], [f"{archive.name}.sha256", note.name]
    if tested:
        side = carried.sidecar(work / archive.name)
        carried.write(side, tested)
        try:
            carried.read(work / archive.name)   # the archive holds the tested manifest, or nothing is moved out
        except NotVerified as exc:
            msg = f"the archive skopeo wrote is not the tested image: {exc.message}"
            raise ExportError(msg, hint="skopeo rewrote what it should have copied; upgrade skopeo") from None
        sums.append(f"{sha256_of(side)}  {side.name}")
        visible.insert(0, side.name)
    (work / f"{archive.name}.sha256").write_text("\n".join(sums) + "\n")
    plan = pct.Plan(archive=archive.name, cuda=wanted.cuda, verdicts=bool(tested))
    (work / note.name).write_text(pct.install_note(
        plan, image=str(image.id), annotations=manifest_annotations(labels, forced=forced), forced=forced))
    # The visible steps: the archive last, so that a checksum beside an archive is always its own.
    for made in (*visible, archive.name):
        (work / made).replace(out / made)
    return digest


def attested(image: Image, keys: Sequence[PublicKey], env: Mapping[str, str], *,
             platform: tuple[str, str] = ("linux", "amd64")) -> carried.Tested | None:
    """The first registry digest of `image` (its RepoDigests; of an index, its manifest for `platform`) whose
    signed verdicts are attached, with them."""
    digests = [str(d) for d in image.attrs.get("RepoDigests") or []]
    for ref in digests:
        try:
            found = carried.gather(ref, keys, env, platform=platform)
        except (RegistryError, ToolMissingError) as exc:
            log.warn(f"{ref}: its verdicts cannot be read ({exc.message})")
            continue
        if found:
            return found
    log.warn(f"{image.id} has no signed verdict in a registry ({', '.join(digests) or 'never pushed'}): "
             "the archive carries none, and `nox -s check` cannot vouch for it")
    return None


def verified_by_signature(tested: carried.Tested, keys: Sequence[PublicKey], env: Mapping[str, str]) -> bool:
    """Whether the verdicts attached to the tested platform manifest verify it on some arch, judged as `check`
    judges them (trust/sources.py), this machine's history of the digest included."""
    try:
        judged = sources.check(tested.source, keys, env, [], history=History.at(env))
        verified, _ = sources.summary(tested.source, judged, tested.platform)
    except FatalError as exc:
        log.warn(f"{tested.source}: its verdicts do not vouch for it ({exc.message})")
        return False
    return verified


def archive_name(image: Image, what: str) -> str:
    return safe_name((image.labels or {}).get(f"{LABEL_PREFIX}.cell") or what)


def safe_name(raw: str) -> str:
    """A file name for the archive: letters, digits, '.', '_' and '-' only (no folder, no way out of --out)."""
    name = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "._-") else "_" for ch in raw).lstrip(".")
    if not name:
        msg = f"{raw!r} gives no usable archive name"
        raise ConfigError(msg, hint="pass --name NAME (letters, digits, '.', '_', '-')")
    if len(name) > MAX_NAME:
        msg = f"the archive name {name[:40]}… is {len(name)} characters; at most {MAX_NAME} fit a file name"
        raise ConfigError(msg, hint=f"pass --name NAME of up to {MAX_NAME} characters")
    return name
