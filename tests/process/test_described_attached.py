"""The SBOM and provenance attached to a digest, read back by `check` and by cosign's policy: a loopback registry
(Debian's docker-registry), real cosign, no engine. An edited SBOM and an SBOM of another digest are refused with
a message and exit 18; provenance is shown by `check`; policies/provenance.cue fails an image without it."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts.attest import inventory, provenance, sbom, signed
from buildscripts.errors import NotVerified
from buildscripts.trust import cosign, described, provenance_policy
from tests import needs
from tests.cli import cli
from tests.process.test_policy_agreement import Registry, serving
from tests.sbom_tree import LOCKS, PIP_CELL, make_tree
from tests.verdict_cases import CASES

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    yield from serving(tmp_path_factory.mktemp("described"), name="described/cell")


def signed_files(registry: Registry, digest: str, tree: Path) -> list[Path]:
    """The SBOM and provenance of the fake pip-cell image `tree`, signed for `digest`, in a run folder."""
    subject = sbom.Subject(repository=registry.repository, digest=digest, cell_id=PIP_CELL)
    bom = json.loads(sbom.to_json(sbom.bom(inventory.from_tree(tree), subject, LOCKS)))
    facts = provenance.BuildFacts(cell_id=PIP_CELL, definition_digest="e" * 64, parameters={"platform": "linux/amd64"},
                                  locks=LOCKS, base={"suite": "bookworm", "id": "sha256:" + "b" * 64},
                                  engine="20.10", builder_id=provenance.LOCAL_BUILDER, run_id="run", finished="now")
    made = provenance.make(facts, provenance.ResourceDescriptor(name="images/", digest={"gitTree": "0" * 40}))
    run = registry.folder / uuid.uuid4().hex[:8]
    return [signed.write(run, PIP_CELL, signed.statement(kind, predicate, registry.repository, digest), registry.key)
            for kind, predicate in ((described.SBOM, bom), (described.PROVENANCE, made.predicate()))]


def check(registry: Registry, ref: str, *args: str) -> subprocess.CompletedProcess[str]:
    state = registry.folder / f"state-{uuid.uuid4().hex[:8]}"
    return cli("check", ref, "--trust-key", str(registry.pub), "--state-dir", str(state), "--arch", "sm_90a", *args,
               env={"NO_COLOR": "1", "COLUMNS": "200"})


def verified_image(registry: Registry) -> tuple[str, str]:
    """An image with a good verdict for sm_90a attached: (digest, ref)."""
    digest = registry.image()
    return digest, registry.attach(digest, CASES[0].payload(registry.repository, digest))


def test_check_verifies_the_sbom_and_shows_the_provenance(registry: Registry, tmp_path: Path) -> None:
    digest, ref = verified_image(registry)
    assert signed.attach(signed_files(registry, digest, make_tree(tmp_path)), ref, trusted=[registry.key.public])
    done = check(registry, ref, "--sbom")
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "SBOM: ✓ verified" in out and "1 cuda-toolkit" in out
    assert all(name in out for name in ("torch", "sglang-kernel", "flashinfer-python", "nvidia-cuda-nvcc"))
    assert "provenance: ✓ verified" in out and f"cell {PIP_CELL}" in out
    assert "lockfiles/sglang/sglang0.5.16-torch2.11.0-cu130-bookworm.txt" in out
    assert "ignored" not in out   # set aside from the verdicts, never counted as one
    (shown,) = json.loads(check(registry, ref, "--sbom", "--json").stdout)
    assert shown["provenance"]["verified"] and shown["provenance"]["cell"] == PIP_CELL
    assert shown["sbom"]["counts"]["cuda-toolkit"] == 1 and not shown["ignored"]


def test_an_edited_sbom_is_refused(registry: Registry, tmp_path: Path) -> None:
    digest, ref = verified_image(registry)
    good, _ = signed_files(registry, digest, make_tree(tmp_path))
    envelope = json.loads(good.read_text())
    payload = base64.b64decode(envelope["payload"]).replace(b'"torch"', b'"t0rch"')
    envelope["payload"] = base64.b64encode(payload).decode()
    good.write_text(json.dumps(envelope))
    with pytest.raises(NotVerified, match="the SBOM is refused: no valid signature"):
        signed.attach([good], ref, trusted=[registry.key.public])   # never attached by the builder
    cosign.attach(good, ref)   # by a registry writer
    done = check(registry, ref, "--sbom")
    assert done.returncode == 18, done.stdout + done.stderr
    assert "no verified SBOM for" in done.stderr and "no valid signature by a trusted key" in done.stderr
    assert check(registry, ref).returncode == 0   # the verdict still decides without --sbom
    assert "provenance: ✕ not verified: none is attached" in check(registry, ref).stdout


def test_an_sbom_of_another_digest_is_refused(registry: Registry, tmp_path: Path) -> None:
    digest, ref = verified_image(registry)
    other = registry.image()
    sbom_file, provenance_file = signed_files(registry, other, make_tree(tmp_path))
    with pytest.raises(NotVerified, match=f"signed for {other}, not for {digest}"):
        signed.attach([sbom_file], ref, trusted=[registry.key.public])
    cosign.attach(sbom_file, ref)
    cosign.attach(provenance_file, ref)
    done = check(registry, ref, "--sbom")
    assert done.returncode == 18
    assert f"it is signed for {other}, not for {digest}" in done.stderr
    assert "provenance: ✕ not verified" in done.stdout


def policy(registry: Registry, ref: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([needs.tool("cosign"), "verify-attestation", "--key", str(registry.pub),
                           "--insecure-ignore-tlog", "--type", described.PROVENANCE, "--policy",
                           str(ROOT / "policies" / provenance_policy.FILE), ref],
                          capture_output=True, text=True, timeout=120)


def test_the_policy_requires_the_provenance(registry: Registry, tmp_path: Path) -> None:
    digest, ref = verified_image(registry)
    assert policy(registry, ref).returncode != 0   # a verdict alone is not enough
    signed.attach(signed_files(registry, digest, make_tree(tmp_path)), ref, trusted=[registry.key.public])
    done = policy(registry, ref)
    assert done.returncode == 0, done.stderr[-1500:]
    bare = registry.image()
    other = registry.attach(bare, json.dumps(signed.statement(described.PROVENANCE, {"buildDefinition": {
        "buildType": "urn:someone-else"}, "runDetails": {"builder": {"id": "x"}}}, registry.repository, bare)).encode())
    assert policy(registry, other).returncode != 0   # another build type is not this project's provenance
