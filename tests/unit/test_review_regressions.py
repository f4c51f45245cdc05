"""Attacks a security review of issue 32 found open, kept as regressions: each asserts what must hold (it failed
before its mend). Logic only, the registry and cosign faked where named; the index attacks with real parts are in
tests/process/test_ambiguous_indexes.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from buildscripts.errors import RegistryError
from buildscripts.handed_env import handed_environment
from buildscripts.lxc import config_file
from buildscripts.publish import platformtags
from buildscripts.trust import dsse, keys, statement
from tests.results_factory import cpu_passed, finish, gpu_passed, kinds_matrix, make_cell
from tests.unit.test_promotion_vouching import fake_registry


def test_an_emptied_idmap_is_a_privileged_container() -> None:
    """Review: LXC clears its idmap list on an empty `lxc.idmap =` (confile.c set_config_idmaps), so
    this container runs privileged (its root is the host's root), yet its record would be sealed."""
    config = config_file.parse("lxc.idmap = u 0 100000 65536\nlxc.idmap = g 0 100000 65536\nlxc.idmap =\n", "lxc")
    assert not config.unprivileged


@pytest.mark.parametrize("name", ["MYSQL_PWD", "REGISTRY_PASS", "GPG_PASSPHRASE", "CI_JOB_JWT_V2", "GH_PAT",
                                  "DATABASE_URL", "HTTPS_PROXY", "PIP_INDEX_URL", "SENTRY_DSN"])
def test_conventional_secret_variables_are_not_handed_to_the_code_under_test(name: str) -> None:
    """Review: a name-based filter lets common secret carriers through (credentials in URLs, _PASS,
    _PWD, PASSPHRASE, JWT, PAT, DSN); the code under test can print them into its record or log."""
    assert name not in handed_environment({name: "https://user:s3cret@host/x"})


def _verdict_for(digest: str, arch: str, key: keys.SigningKey) -> dict[str, Any]:
    family = arch.rstrip("af")
    cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA H200", family))
    document = statement.statement(cell, arch, subject="r/x", digest=digest, configuration={}, url=None,
                                   signed_at="2026-12-01T10:00:00Z")
    return dsse.sign(json.dumps(document).encode(), dsse.IN_TOTO, key)


def test_a_tag_moved_to_a_digest_verified_for_another_arch_is_not_taken_for_a_promotion(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: a registry writer points `…-verified-sm100` at any digest that carries some trusted
    verdict (another cell's image, one verified on sm_90 only); promotion takes it for an earlier promotion of
    this tag and moves on silently instead of refusing as a tamper (`_not_vouched` asks for any passing arch)."""
    key = keys.SigningKey("verifier", keys.generate())
    other = "sha256:" + "b" * 64
    fake_registry(monkeypatch, {"dest:cell-verified-sm100": other, f"dest@{other}": other},
                  [_verdict_for(other, "sm_90a", key)])
    claim = platformtags.Claim("sglang0.5.10-torch2.9.1-cu128-pip-bookworm", "linux/amd64", "sha256:" + "a" * 64,
                               ("cell-verified-sm100",), {})
    entry = platformtags.Entry("linux/amd64", claim.digest, platformtags.OCI_MANIFEST, 100)
    with pytest.raises(RegistryError):
        platformtags.plan([(claim, entry)], kinds_matrix(), "dest", {}, [key.public], repair=False)


def test_a_re_dated_older_run_does_not_outvote_the_judges_newest_word() -> None:
    """Review: reports order sealed records by the run's `started`/`finished`, which no seal covers. Whoever
    writes results or evidence re-dates an older sealed VERIFIED run past a newer sealed FAILED one of the same
    image, and the README shows ✅ again (a rollback the verdicts' sealed `signedAt` prevents for `check`)."""
    import os

    from buildscripts import results
    from buildscripts.report.weigh import weigh_runs
    from buildscripts.results import RunResults, Status, Verdict
    from tests.results_factory import kinds_matrix, sealed

    the_matrix = kinds_matrix()
    digest, trusted = results.matrix_digest(the_matrix.spec), [keys.signing_key(os.environ).public]
    good = sealed(make_cell("verified"), matrix_digest=digest)
    failed = [s.model_copy(update={"status": Status.FAILED, "reason": "wrong tokens"}) if s.name == "server" else s
              for s in good.stages]
    bad = sealed(finish(make_cell("verified"), stages=failed), matrix_digest=digest)

    def run(run_id: str, when: str, cell: Any) -> RunResults:
        return RunResults(run_id=run_id, started=when, finished=when, cells=[cell], matrix_digest=digest)

    newer = run("new", "2026-12-02T00:00:00+00:00", bad)
    honest = weigh_runs([run("old", "2026-12-01T00:00:00+00:00", good), newer], the_matrix, trusted)
    assert honest.run.cells[0].verdict is not Verdict.VERIFIED
    redated = weigh_runs([run("old", "2026-12-03T00:00:00+00:00", good), newer], the_matrix, trusted)
    assert redated.run.cells[0].verdict is not Verdict.VERIFIED, "an unsealed run time decided the README's ✅"


def test_an_emptied_list_key_drops_what_came_before_it() -> None:
    """LXC empties any list key on an empty value; the preflight reads mount entries as LXC will mount them."""
    config = config_file.parse("lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
                             "lxc.mount.entry =\n"
                             "lxc.mount.entry = /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n", "lxc")
    assert config_file.mount_entries(config) == [("/dev/nvidiactl", "dev/nvidiactl", "bind,optional,create=file")]
