"""How long `nox -s check` takes for one image: from a registry, of an index, and from an OCI archive.

    python benchmarks/check_time.py [--mib 256] [--runs 5] [--out benchmarks/check-results.md]

A loopback registry (tests/registry_server.py), one throw-away verifier key, and two images made here: a
tiny one, and one with a layer of --mib MiB of random bytes (gzip cannot shrink it, so the archive holds
that much), pushed as OCI manifests. Each gets one signed sm_100a verdict, attached by the promote side's
own function. Timed, as a user runs them (`python -m buildscripts check …`, a new process each time): the
check of a tag (the registry serves the digest, cosign downloads the verdicts), of a digest, of an index of
the tiny image and an arm64 arm (each platform's verdicts read), and of the exported archive (read as the
tools read it, every blob hashed again); `cosign verify-attestation` of the same digest beside them, without
and with the policy. A registry check reads the manifest and the attestations only, so its time does not grow
with the image; an archive check reads the whole archive. Everything made here is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from buildscripts.registry import manifests, through_engine  # noqa: E402
from buildscripts.trust import keys, policy, statement, verdicts  # noqa: E402
from buildscripts.verify.reuse import probe_digest  # noqa: E402
from tests.registry_server import RegistryServer  # noqa: E402
from tests.registry_writer import RegistryWriter  # noqa: E402
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell  # noqa: E402


def image(client: docker.DockerClient, size: int) -> str:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        payload = os.urandom(size) if size else uuid.uuid4().hex.encode()
        info = tarfile.TarInfo("data.bin")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    tag = uuid.uuid4().hex[:10]
    client.api.import_image_from_data(data.getvalue(), repository="sglang-images-bench-check", tag=tag,
                                      changes=['LABEL "io.sglang-images.owner"="benchmark-check"'])
    return str(client.images.get(f"sglang-images-bench-check:{tag}").id)


def timed(argv: list[str], bench: Bench) -> tuple[float, float]:
    """(median, best) seconds of `runs` runs of `argv`, each a new process; any failure ends the benchmark."""
    seconds = []
    for _ in range(bench.runs):
        started = time.monotonic()
        done = subprocess.run(argv, cwd=ROOT, env=bench.user, capture_output=True, text=True)
        seconds.append(time.monotonic() - started)
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return statistics.median(seconds), min(seconds)


@dataclass(frozen=True)
class Bench:
    client: docker.DockerClient
    repository: str
    scratch: Path
    signer: dict[str, str]      # the verifier's key
    user: dict[str, str]        # a user's environment: trusts only --key
    pub: Path
    runs: int


def push_oci(bench: Bench, image_id: str, tag: str, made: list[str]) -> str:
    """`image_id` pushed as an OCI manifest with gzip layers (what an archive carries byte for byte), pulled
    back by digest and tagged `tag` here (a local image whose RepoDigests name it); its digest."""
    subprocess.run(["skopeo", "copy", "--quiet", "--format", "oci", "--dest-tls-verify=false",
                    f"docker-daemon:{image_id}", f"docker://{tag}"], check=True, capture_output=True)
    digest = manifests.served(tag, {}).digest
    made.append(through_engine.pull(bench.client, f"{bench.repository}@{digest}"))
    repository, name = through_engine.split_ref(tag)
    bench.client.api.tag(made[-1], repository, name)
    return digest


def attach(bench: Bench, ref: str, run: int) -> None:
    cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA B200", "sm_100"))
    files = verdicts.sign_verdicts(cell, bench.scratch / f"run-{run}", image=ref, matrix=ROOT / "matrix.yaml",
                                   probe=probe_digest(), env=bench.signer)
    verdicts.attach_verdicts(files, ref, trusted=[keys.read_public(bench.pub)])


def measure(bench: Bench, name: str, size: int, made: list[str]) -> list[tuple[str, float, float]]:
    """One image of `size` random bytes, its verdict attached; the checks of it, timed."""
    made.append(image(bench.client, size))
    tag = f"{bench.repository}:{'tiny' if not size else 'big'}"
    digest = push_oci(bench, made[-1], tag, made)
    ref = f"{bench.repository}@{digest}"
    attach(bench, ref, len(made))
    check = [sys.executable, "-m", "buildscripts", "check", "--key", str(bench.pub)]
    cosign = ["cosign", "verify-attestation", "--key", str(bench.pub), "--insecure-ignore-tlog", "--type",
              statement.TEST_RESULT]
    rows = [(f"{name}: `check IMAGE` (a local engine image: its RepoDigests)", *timed([*check, tag], bench)),
            (f"{name}: `check REPO@DIGEST`", *timed([*check, ref], bench)),
            (f"{name}: `cosign verify-attestation REPO@DIGEST`", *timed([*cosign, ref], bench)),
            (f"{name}: `cosign verify-attestation --policy {policy.file_name('sm_100a')} REPO@DIGEST`",
             *timed([*cosign, "--policy", str(ROOT / policy.FOLDER / policy.file_name("sm_100a")), ref], bench))]
    out = bench.scratch / f"export-{len(made)}"
    subprocess.run([sys.executable, "-m", "buildscripts", "export", ref, "--out", str(out), "--name", "bench",
                    "--force", "--trust-key", str(bench.pub)], cwd=ROOT, env=bench.user, check=True,
                   capture_output=True)
    archive = out / "bench.oci.tar"
    rows.append((f"{name}: `check oci-archive:PATH` ({archive.stat().st_size / 2**20:.0f} MiB archive)",
                 *timed([*check, f"oci-archive:{archive}"], bench)))
    shutil.rmtree(out)
    through_engine.untag(bench.client, tag)   # from here the tag is read from the registry
    rows.append((f"{name}: `check REPO:TAG` (the registry serves the digest)", *timed([*check, tag], bench)))
    if not size:   # an index of it and an arm64 arm that never ran: each platform's verdicts are read
        writer = RegistryWriter(tag.split("/", 1)[0])
        repo = bench.repository.split("/", 1)[1]
        arm64 = writer.rewrite_config(repo, digest, "tiny-arm64", architecture="arm64", variant="v8")
        writer.index(repo, "tiny-index", {"linux/amd64": digest, "linux/arm64/v8": arm64})
        rows.append((f"{name}: `check REPO:TAG` of an index of 2 platforms (linux/amd64 verified)",
                     *timed([*check, f"{bench.repository}:tiny-index", "--platform", "linux/amd64"], bench)))
    return rows


def report(rows: list[tuple[str, float, float]], mib: int, runs: int) -> list[str]:
    lines = ["# The check's time for an image, an index and an archive (`benchmarks/check_time.py`)", "",
             f"Measured {time.strftime('%Y-%m-%d')} on a CPU machine ({os.cpu_count()} cores, {platform.machine()}, "
             f"shared with other work), a loopback registry (Debian's docker-registry 2.8), cosign 2.5, skopeo "
             f"1.9; each a new process as a user runs it, {runs} runs, one signed verdict attached.", "",
             "| what | median s | best s |", "| --- | ---: | ---: |"]
    lines += [f"| {what} | {median:.2f} | {best:.2f} |" for what, median, best in rows]
    lines += ["", "A registry check reads one manifest and the attached verdicts: its time is the same for a "
                  "10 GB SGLang image as for the tiny one (the Python start, one skopeo and one cosign call; "
                  "`cosign verify-attestation` alone is the Go binary and one registry read). An archive check "
                  "hashes every blob of the archive again: its time grows with the archive.", ""]
    archives = [median for what, median, _ in rows if "oci-archive" in what]
    if len(archives) == 2:
        rate = (mib / 1024) / max(archives[1] - archives[0], 1e-3)
        lines += [f"Hashing rate of the archive check here: about {rate:.2f} GB/s beyond the fixed cost, so an "
                  f"archive of a 7.4 GB image (the 0.5.16 pip cell, docs/sizes.md) would take about "
                  f"{archives[0] + 7.4 / rate:.0f} s.", ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="size of the larger image's random layer")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "check-results.md")
    a = ap.parse_args()
    client = docker.from_env()
    scratch = Path(tempfile.mkdtemp(prefix="sglang-images-bench-check-"))
    server = RegistryServer(scratch / "registry")
    server.folder.mkdir()
    server.start()
    signer = {"SGLANG_IMAGES_KEY_DIR": str(scratch / "verifier"), "SGLANG_IMAGES_SIGNING_KEY": "",
              "SGLANG_IMAGES_SIGNING_KEY_FILE": ""}
    pub = scratch / "verifier.pub"
    pub.write_bytes(keys.signing_key(signer).public.pem)
    bench = Bench(client, f"{server.url}/sglang-images-bench-check", scratch, signer,
                  {**os.environ, "SGLANG_IMAGES_KEY_DIR": str(scratch / "user")}, pub, a.runs)
    made: list[str] = []
    try:
        rows = measure(bench, "tiny", 0, made) + measure(bench, f"{a.mib} MiB", a.mib << 20, made)
    finally:
        server.stop()
        for image_id in dict.fromkeys(made):
            with contextlib.suppress(docker.errors.NotFound):
                client.images.remove(image_id, force=True)
        shutil.rmtree(scratch, ignore_errors=True)
        client.close()
    lines = report(rows, a.mib, a.runs)
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
