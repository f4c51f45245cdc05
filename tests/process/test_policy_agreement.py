"""`check` and the real cosign policy, fed the same signed verdicts (tests/verdict_cases.py): they agree on each.

A loopback registry (Debian's docker-registry), real cosign 2.5 and no engine: each verdict is signed by a
verifier key, attached to an image of its own with `cosign attach attestation`, then judged by `check`'s reader
(what `cosign.download` returns, as `nox -s check` reads it) and by `cosign verify-attestation --policy
policies/test-result-sm_90a.cue`, the committed policy. HIDDEN verdicts are the ones cosign's own reader changes
before its policy sees them: `check` refuses them, and this test pins what cosign does, so that the documented
difference (docs/checking-an-image.md) is checked, not assumed.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildscripts.trust import cosign, dsse, keys, policy, statement, verdicts
from tests import needs
from tests.attest_world import key_env
from tests.cli import cli
from tests.integration.tinyimages import one_file_tar
from tests.registry_server import RegistryServer
from tests.registry_writer import MANIFEST, RegistryWriter, digest_of
from tests.verdict_cases import ARCH, CASES, HIDDEN, Case

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / policy.FOLDER / policy.file_name(ARCH)
pytestmark = pytest.mark.registry


@dataclass
class Registry:
    server: RegistryServer
    writer: RegistryWriter
    folder: Path
    key: keys.SigningKey
    pub: Path
    name: str = "agreement/verdicts"

    @property
    def repository(self) -> str:
        return f"{self.server.url}/{self.name}"

    def image(self) -> str:
        """A new one-file image of unique content; its manifest digest."""
        layer = one_file_tar(uuid.uuid4().hex.encode(), "who")
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "rootfs": {"type": "layers", "diff_ids": [digest_of(layer)]}}).encode()
        body = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": self.writer.put_blob(self.name, config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                       "digest": self.writer.put_blob(self.name, layer), "size": len(layer)}]})
        return self.writer.put_manifest(self.name, uuid.uuid4().hex[:12], body.encode(), MANIFEST)

    def attach(self, digest: str, *payloads: bytes) -> str:
        """Each payload signed by the verifier and attached to `digest`; the reference."""
        ref = f"{self.repository}@{digest}"
        for payload in payloads:
            path = self.folder / f"envelope-{uuid.uuid4().hex[:8]}.json"
            path.write_text(json.dumps(dsse.sign(payload, dsse.IN_TOTO, self.key)))
            cosign.attach(path, ref)
        return ref

    def check(self, ref: str, digest: str) -> verdicts.Judgement:
        """`check --arch sm_90a`'s judgement of what the registry holds for `digest`."""
        return verdicts.judge(cosign.download(ref), digest, [self.key.public], [ARCH])

    def cosign(self, ref: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([needs.tool("cosign"), "verify-attestation", "--key", str(self.pub),
                               "--insecure-ignore-tlog", "--type", statement.TEST_RESULT, "--policy", str(POLICY),
                               ref], capture_output=True, text=True, timeout=120)


def serving(folder: Path, **named: str) -> Iterator[Registry]:
    """A loopback registry in `folder` and a verifier key beside it, while the caller's fixture lasts."""
    needs.tools("cosign")
    server = RegistryServer(folder / "registry")
    server.folder.mkdir()
    server.start()
    try:
        key = keys.signing_key(key_env(folder / "verifier"))
        pub = folder / "verifier.pub"
        pub.write_bytes(key.public.pem)
        yield Registry(server, RegistryWriter(server.url), folder, key, pub, **named)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    yield from serving(tmp_path_factory.mktemp("agreement"))


def judged_by_both(registry: Registry, *cases: Case) -> tuple[bool, subprocess.CompletedProcess[str], str]:
    digest = registry.image()
    ref = registry.attach(digest, *(c.payload(registry.repository, digest) for c in cases))
    judged = registry.check(ref, digest)
    return judged.verified, registry.cosign(ref), "; ".join([*(f.detail for f in judged.archs), *judged.ignored])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_check_and_the_cosign_policy_agree(registry: Registry, case: Case) -> None:
    checked, signed, why = judged_by_both(registry, case)
    assert checked == case.accepted, f"check: {why}"
    assert (signed.returncode == 0) == case.accepted, f"cosign: {signed.stderr[-1500:]}"


@pytest.mark.parametrize("case", HIDDEN, ids=lambda c: c.name)
def test_what_cosigns_reader_hides_from_its_policy_check_refuses(registry: Registry, case: Case) -> None:
    """Go's encoding/json keeps the last of a key twice and folds a Statement field's case before the policy sees
    the Statement; the policy passes what Go made of it (a good verdict). `check` refuses the payload itself."""
    checked, signed, why = judged_by_both(registry, case)
    assert not checked and "malformed verdict" in why, why
    assert signed.returncode == 0, f"cosign now refuses {case.name}: say so in docs/checking-an-image.md " \
                                   f"and move it to CASES ({signed.stderr[-800:]})"


def test_a_good_verdict_beside_a_malformed_one_passes_neither(registry: Registry) -> None:
    """cosign's policy must hold for every attestation; `check` cannot place a malformed one among the others."""
    malformed = next(c for c in CASES if c.name == "arch SM_90A")
    checked, signed, why = judged_by_both(registry, CASES[0], malformed)
    assert not checked and "so no arch of this digest is verified" in why, why
    assert signed.returncode != 0 and 'conflicting values "SM_90A" and "sm_90a"' in signed.stderr


def test_a_warned_verdict_passes_check_as_a_user_runs_it(registry: Registry) -> None:
    """docs/checking-an-image.md: WARNED passes `nox -s check` and `cosign verify-attestation --policy`."""
    warned = next(c for c in CASES if c.name == "WARNED")
    digest = registry.image()
    ref = registry.attach(digest, warned.payload(registry.repository, digest))
    done = cli("check", ref, "--arch", ARCH, "--key", str(registry.pub), "--json",
               env=key_env(registry.folder / "user"), timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)[0]["archs"][ARCH]
    assert found["verified"] and found["results"] == ["WARNED"], found
    assert registry.cosign(ref).returncode == 0
