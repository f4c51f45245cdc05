"""Promotion by digest against a real registry on loopback, skopeo and cosign, with tiny images.

The staging build is real (`staging.stage` pushes from this engine and reads the digest back); the GPU jobs'
records carry fixture GPU stages (no GPU here: tests/digest_records.py), sealed like every verifier's record.
Every test checks the registry itself (`skopeo inspect`) for where each good tag points.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from buildscripts import matrix, results
from buildscripts.attest import signed
from buildscripts.commands import check as check_command
from buildscripts.commands import promote as promote_command
from buildscripts.errors import NotVerified, RegistryError
from buildscripts.publish import staging
from buildscripts.registry import failures, manifests, writer_lock
from buildscripts.results import CellResult
from buildscripts.trust import attached, cosign, described, keys, snapshot, verdicts
from buildscripts.workspace import Workspace
from tests import needs
from tests.commands import call
from tests.digest_records import arch_runners_matrix, built, cell_of, gpu_job, save
from tests.registry_server import RegistryServer
from tests.registry_writer import RegistryWriter

pytestmark = pytest.mark.registry
ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ)
ARCH_TAG, FREE_TAG = "0.5.16-torch2.11.0-cu130-pip-verified-{}", "0.5.16-torch2.11.0-cu130-pip"
STAGING = "sglang-images-staging"


class Staged:
    """A staging build of the 0.5.16 pip cell (a tiny image under its name) and where promotion goes."""

    def __init__(self, client: docker.DockerClient, server: RegistryServer, tmp: Path, image_id: str) -> None:
        self.matrix_path = arch_runners_matrix(tmp / "project")
        self.loaded = matrix.load(self.matrix_path)
        self.cell = cell_of(self.loaded)
        self.tmp = tmp
        self.url = server.url
        self.source = f"{server.url}/{STAGING}"
        self.dest = f"{server.url}/{self.loaded.spec.tags.repository}"
        image = staging.stage(client, built(self.cell, image_id), self.source, ENV)
        self.build = built(self.cell, image_id).model_copy(update={"image": image})
        self.digest = str(image.digest)
        save(self.build, tmp / "collected" / "build" / "results.json", self.loaded)

    def job(self, arch: str, *, sign: bool = True, record: CellResult | None = None) -> Path:
        """The results of the GPU job of `arch` (and its signed verdict, as the verify side writes it)."""
        found = record or gpu_job(self.build, arch)
        path = save(found, self.tmp / "collected" / f"verify-{arch}" / "results.json", self.loaded)
        if sign:
            verdicts.sign_verdicts(found, path.parent, image=str(found.image.subject), matrix=self.matrix_path,
                                   probe="0" * 64, env=ENV)
        return path

    def argv(self, *extra: str, results_glob: str = "collected/*/results.json") -> list[str]:
        return ["--matrix", str(self.matrix_path), "--registry", self.url, "--results", str(self.tmp / results_glob),
                *extra]

    def promote(self, *extra: str, results_glob: str = "collected/*/results.json") -> int:
        ws = Workspace.at(ROOT, matrix=self.matrix_path, runs=self.tmp / "runs")
        return call(promote_command, self.argv(*extra, results_glob=results_glob), ws,
                            {**ENV, writer_lock.LOCK_DIR_ENV: str(self.tmp / "locks")})

    def release_in(self, server: RegistryServer) -> None:
        """Promote into another registry than the staging one from now on."""
        self.url = server.url
        self.dest = f"{server.url}/{self.loaded.spec.tags.repository}"

    def served(self, tag: str) -> str | None:
        found = manifests.lookup(f"{self.dest}:{tag}", ENV)
        return found.digest if found else None


@pytest.fixture
def staged(client: docker.DockerClient, server: RegistryServer, tmp_path: Path,
           tiny: Callable[[], str]) -> Staged:
    needs.tool("skopeo")
    return Staged(client, server, tmp_path, tiny())


def skopeo_digest(ref: str) -> str:
    """`skopeo inspect`'s own answer, independent of the code under test."""
    done = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{ref}"],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_good_tags_point_at_the_tested_digest_per_arch_then_arch_free(staged: Staged) -> None:
    staged.job("sm_100")
    assert staged.promote() == 0   # the build and sm_100 only
    assert staged.served(ARCH_TAG.format("sm100")) == staged.digest
    assert staged.served(FREE_TAG) is None            # sm_120 is not verified yet: no arch-free tag
    staged.job("sm_120")
    assert staged.promote() == 0
    for tag in (ARCH_TAG.format("sm100"), ARCH_TAG.format("sm120"), FREE_TAG):
        assert skopeo_digest(f"{staged.dest}:{tag}") == staged.digest
    # no child image, no new index: the release repository holds the tested manifest itself
    assert manifests.served(f"{staged.dest}@{staged.digest}", ENV).digest == staged.digest
    saved = results.load(staged.tmp / "collected" / "verify-sm_120" / "results.json").cells[0]
    assert saved.promoted[f"{staged.dest}:{FREE_TAG}"] == staged.digest


def test_the_copy_to_another_registry_keeps_the_digest_and_its_attachments(staged: Staged, tmp_path: Path) -> None:
    needs.tool("cosign")
    release = RegistryServer(tmp_path / "release")
    release.folder.mkdir()
    release.start()
    try:
        _copy_keeps_digest_and_attachments(staged, release)
    finally:
        release.stop()


def _copy_keeps_digest_and_attachments(staged: Staged, release: RegistryServer) -> None:
    staged.release_in(release)
    trusted = [keys.signing_key(ENV).public]
    files = verdicts.verdict_files(staged.job("sm_100").parent, staged.cell.id)
    verdicts.attach_verdicts(files, f"{staged.source}@{staged.digest}", trusted=trusted)   # attached in staging
    for path in files:   # from now on only the registry has it: in the release it can only have been carried
        path.unlink()
    attachment = staged.digest.replace(":", "-") + ".att"
    before = skopeo_digest(f"{staged.source}:{attachment}")
    staged.job("sm_120")
    assert staged.promote() == 0
    assert skopeo_digest(f"{staged.dest}@{staged.digest}") == staged.digest
    found = cosign.download(f"{staged.dest}@{staged.digest}")
    archs = {verdicts.open_verdict(e, trusted).arch for e in found if not snapshot.is_snapshot(e)}
    assert archs == {"sm_100a", "sm_120a"}   # the carried one, and the one attached at promotion
    [listing] = attached.read(found, staged.digest, trusted).snapshots   # and the snapshot of both, signed after
    assert {v.arch for v in listing.verdicts} == {"sm_100a", "sm_120a"}
    assert skopeo_digest(f"{staged.dest}:{ARCH_TAG.format('sm120')}") == staged.digest
    assert skopeo_digest(f"{staged.source}:{attachment}") == before   # staging's attachment left as it was


def test_check_refuses_the_verdicts_rolled_back_after_a_promotion(staged: Staged) -> None:
    """The promote job signs a snapshot of the verdicts it attached; `check` keeps the newest it saw and refuses a
    registry whose attestation tag is pointed back at what an earlier promotion left. Promoting again numbers a
    snapshot past the hidden one, and the verdicts are all there again."""
    needs.tool("cosign")
    ws = Workspace.at(ROOT, matrix=staged.matrix_path, runs=staged.tmp / "runs")
    state = staged.tmp / "state"
    tag = f"{staged.dest}:{ARCH_TAG.format('sm100')}"

    def checked() -> int:
        return call(check_command, [tag, "--arch", "sm_100a", "--state-dir", str(state)], ws, ENV)

    staged.job("sm_100")
    assert staged.promote() == 0
    writer, name = RegistryWriter(staged.url), staged.loaded.spec.tags.repository
    attestations = staged.digest.replace(":", "-") + ".att"
    older = writer.manifest(name, attestations)
    assert checked() == 0
    staged.job("sm_120")
    assert staged.promote() == 0
    assert checked() == 0
    writer.put_manifest(name, attestations, *older)   # the registry's writer hides the sm_120 verdict
    with pytest.raises(NotVerified, match=r"rollback: the registry serves snapshot .* older than snapshot"):
        checked()
    assert staged.promote() == 0   # re-attaches the sm_120 verdict from its results, and a newer snapshot
    assert checked() == 0
    kept = json.loads((state / "seen" / f"{staged.digest.replace(':', '-')}.json").read_text())
    assert len(kept["verdicts"]) == 2 and len(kept["snapshot"]["verdicts"]) == 2


def test_results_naming_a_digest_the_registry_does_not_serve_move_no_tag(
        staged: Staged, client: docker.DockerClient, tiny: Callable[[], str]) -> None:
    absent = "sha256:" + "0" * 64
    image = staged.build.image.model_copy(update={"digest": absent})
    staged.job("sm_100", sign=False, record=gpu_job(staged.build.model_copy(update={"image": image}), "sm_100"))
    with pytest.raises(RegistryError, match="does not serve: the digest in the results is not the registry's"):
        staged.promote()
    assert manifests.tags(staged.dest, ENV) == []
    # A digest the registry does serve, but of another image than the one the record says it tested.
    other = staging.stage(client, built(staged.cell, tiny(), "fedcba987654"), staged.source, ENV)
    image = staged.build.image.model_copy(update={"digest": other.digest})
    staged.job("sm_100", sign=False, record=gpu_job(staged.build.model_copy(update={"image": image}), "sm_100"))
    with pytest.raises(RegistryError, match="is another image: the digest in the results is not the registry's"):
        staged.promote(results_glob="collected/verify-*/results.json")
    assert manifests.tags(staged.dest, ENV) == []


def test_a_tag_moved_after_promotion_is_refused_then_repaired_on_request(
        staged: Staged, client: docker.DockerClient, tiny: Callable[[], str]) -> None:
    staged.job("sm_100")
    staged.job("sm_120")
    assert staged.promote() == 0
    other = staging.stage(client, built(staged.cell, tiny(), "fedcba987654"), staged.source, ENV)
    manifests.copy(f"{staged.source}@{other.digest}", f"{staged.dest}:{FREE_TAG}", ENV)   # the tamper
    with pytest.raises(RegistryError, match="carries no verdict of a trusted key: someone other than a promotion "
                                            "moved it; nothing was moved back") as refused:
        staged.promote()
    assert "--repair" in str(refused.value)
    assert staged.served(FREE_TAG) == other.digest    # refused: nothing written
    # What was promoted is read from the registry: results whose (unsealed) `promoted` was emptied change nothing.
    for path in (staged.tmp / "collected").glob("*/results.json"):
        run = results.load(path)
        results.save(run.model_copy(update={"cells": [c.model_copy(update={"promoted": {}}) for c in run.cells]}),
                     path)
    with pytest.raises(RegistryError, match="nothing was moved back"):
        staged.promote()
    assert staged.served(FREE_TAG) == other.digest
    assert staged.promote("--repair") == 0
    assert skopeo_digest(f"{staged.dest}:{FREE_TAG}") == staged.digest


SHIM = """#!/bin/bash
# skopeo, paused before its Nth copy to a tag: where a promotion is killed
if [ "$1" = copy ]; then
  case "${@: -1}" in *@sha256:*|*:sha256-*) ;; *)
    n=$(( $(cat "$SHIM_DIR/count" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$SHIM_DIR/count"
    if [ "$n" -ge "$SHIM_STOP_AT" ]; then touch "$SHIM_DIR/paused"; sleep 600; fi;;
  esac
fi
exec REAL "$@"
"""


def test_sigkill_mid_promote_leaves_no_good_tag_on_an_unverified_digest(
        staged: Staged, client: docker.DockerClient, tiny: Callable[[], str]) -> None:
    staged.job("sm_100")
    staged.job("sm_120")
    old = staging.stage(client, built(staged.cell, tiny(), "fedcba987654"), staged.source, ENV)
    manifests.copy(f"{staged.source}@{old.digest}", f"{staged.dest}:{FREE_TAG}", ENV)  # an earlier release,
    for arch in ("sm_100", "sm_120"):                                                     # promoted with its verdicts
        earlier = gpu_job(staged.build.model_copy(update={"image": old}), arch)
        files = verdicts.sign_verdicts(earlier, staged.tmp / f"earlier-{arch}", image=f"{staged.dest}@{old.digest}",
                                       matrix=staged.matrix_path, probe="0" * 64, env=ENV)
        verdicts.attach_verdicts(files, f"{staged.dest}@{old.digest}", trusted=[keys.signing_key(ENV).public],
                                 env=ENV)
    shim = staged.tmp / "shim"
    shim.mkdir()
    (shim / "skopeo").write_text(SHIM.replace("REAL", str(shutil.which("skopeo"))))
    (shim / "skopeo").chmod(0o755)
    env = {**ENV, "PATH": f"{shim}:{ENV['PATH']}", "SHIM_DIR": str(shim), "SHIM_STOP_AT": "2",
           writer_lock.LOCK_DIR_ENV: str(staged.tmp / "locks")}
    proc = subprocess.Popen([sys.executable, "-m", "buildscripts", "promote", *staged.argv()], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (shim / "paused").exists():
            assert proc.poll() is None, "the promotion ended before it was paused"
            assert time.monotonic() < deadline, "the promotion never reached its second tag"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    tags = {t: staged.served(t) for t in (ARCH_TAG.format("sm100"), ARCH_TAG.format("sm120"), FREE_TAG)}
    assert tags == {ARCH_TAG.format("sm100"): staged.digest, ARCH_TAG.format("sm120"): None, FREE_TAG: old.digest}
    assert all(not c.promoted for p in (staged.tmp / "collected").glob("*/results.json") for c in results.load(p).cells)
    assert staged.promote() == 0   # the lock went with the killed process: the next promotion just runs
    assert {t: staged.served(t) for t in tags} == dict.fromkeys(tags, staged.digest)


def test_two_promotions_at_once_lose_no_attachment(staged: Staged) -> None:
    """Each promotion attaches the verdict of one arch to the same digest (cosign's `.att` tag is read, extended
    and written back): run side by side, one waits for the other's lock, and both verdicts stay."""
    needs.tool("cosign")
    staged.job("sm_100")
    staged.job("sm_120")
    env = {**ENV, writer_lock.LOCK_DIR_ENV: str(staged.tmp / "locks")}
    procs = [subprocess.Popen([sys.executable, "-m", "buildscripts", "promote",
                               *staged.argv(results_glob=f"collected/*{arch}/results.json")],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for arch in ("sm_100", "sm_120")]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    trusted = [keys.signing_key(ENV).public]
    found = attached.read(cosign.download(f"{staged.dest}@{staged.digest}"), staged.digest, trusted)
    assert sorted(str(v.arch) for v in found.verdicts.values()) == ["sm_100a", "sm_120a"]
    # each signed a snapshot of what it found attached; the later one lists both
    assert [len(s.verdicts) for s in found.snapshots] == [1, 2]


def test_a_second_promotion_waits_for_the_first_and_writes_nothing_meanwhile(staged: Staged) -> None:
    staged.job("sm_100")
    env = {**ENV, writer_lock.LOCK_DIR_ENV: str(staged.tmp / "locks"), "PYTHONUNBUFFERED": "1"}
    with writer_lock.sole_writer(staged.dest, env):
        proc = subprocess.Popen([sys.executable, "-m", "buildscripts", "promote", *staged.argv()], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        waiting = ""
        for line in proc.stdout:
            waiting += line
            if "waiting for the promotion" in line:
                break
        assert "waiting for the promotion" in waiting, waiting
        assert manifests.tags(staged.dest, ENV) == []    # nothing written while the other holds the lock
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, waiting + out
    assert staged.served(ARCH_TAG.format("sm100")) == staged.digest
    with (pytest.raises(RegistryError, match=r"another promotion of \S+ holds"),
          writer_lock.sole_writer(staged.dest, env), writer_lock.sole_writer(staged.dest, env, wait_s=0.5)):
        pass


def test_a_release_registry_that_never_answers_is_named_within_the_deadline(staged: Staged) -> None:
    staged.job("sm_100")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)   # takes connections (the kernel does), never answers
        host = f"127.0.0.1:{silent.getsockname()[1]}"
        staged.url = host
        ws = Workspace.at(ROOT, matrix=staged.matrix_path, runs=staged.tmp / "runs")
        env = {**ENV, writer_lock.LOCK_DIR_ENV: str(staged.tmp / "locks"), failures.DEADLINE_ENV: "2"}
        with pytest.raises(RegistryError, match=f"the registry {host} did not answer within 2 s"):
            call(promote_command, staged.argv(), ws, env)


def test_promotion_attaches_the_builds_signed_sbom_and_provenance(staged: Staged) -> None:
    """The build job's run folder holds the staged digest's SBOM and provenance (attest/signed.py); the promote job,
    which collects it, attaches both to the released digest, checked as `check` reads them."""
    needs.tool("cosign")
    key = keys.signing_key(ENV)
    made = {"buildDefinition": {"externalParameters": {"cell": staged.cell.id}}}
    for kind, predicate in ((described.SBOM, {"components": []}), (described.PROVENANCE, made)):
        signed.write(staged.tmp / "collected" / "build", staged.cell.id,
                     signed.statement(kind, predicate, staged.source, staged.digest), key)
    staged.job("sm_100")
    staged.job("sm_120")
    assert staged.promote() == 0
    found = cosign.download(f"{staged.dest}@{staged.digest}")
    for kind in (described.SBOM, described.PROVENANCE):
        assert described.find(found, kind, staged.digest, [key.public]).used is not None, kind
    judged = verdicts.judge([e for e in found if not described.is_described(e) and not snapshot.is_snapshot(e)],
                            staged.digest, [key.public])
    assert judged.verified and not judged.ignored   # the verdicts are weighed as before
