"""Signed verdicts (trust/verdicts.py): what the verify side signs, what a reader accepts, and the promote
side's refusals; cosign itself is replaced by a list here (tests/integration/test_check.py runs the real one)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from buildscripts.errors import ConfigError, NotVerified
from buildscripts.registry import manifests
from buildscripts.results import GPU_STAGES, ImageInfo, StageResult, Status
from buildscripts.trust import cosign, dsse, keys, verdicts
from tests.results_factory import cpu_passed, finish, gpu_passed, make_cell

DIGEST = "sha256:" + "d" * 64
IMAGE = f"127.0.0.1:5000/sglang@{DIGEST}"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"SGLANG_IMAGES_KEY_DIR": str(tmp_path / "keys")}


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text("cells: []\n")
    return path


def sign(cell: Any, tmp_path: Path, matrix: Path, env: dict[str, str], image: str = IMAGE) -> list[Path]:
    return verdicts.sign_verdicts(cell, tmp_path / "run", image=image, matrix=matrix, probe="p" * 64, env=env)


def test_one_verdict_per_arch_the_gpu_stages_ran_on(tmp_path: Path, matrix: Path, env: dict[str, str]) -> None:
    cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA B200", "sm_100"),
                  locks={"lockfiles/lane.lock": "a" * 64})
    files = sign(cell, tmp_path, matrix, {**env, "GITHUB_SERVER_URL": "https://github.com",
                                          "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "7"})
    assert [p.name for p in files] == ["sm_100a.json"]
    assert files == verdicts.verdict_files(tmp_path / "run", cell.cell_id)
    trusted = keys.trusted(tmp_path, env)
    verdict = verdicts.open_verdict(json.loads(files[0].read_text()), trusted)
    assert verdict.arch == "sm_100a" and verdict.result == "PASSED" and verdict.digests == (DIGEST,)
    assert verdict.why_not() is None and verdict.names_arch("sm_100") and not verdict.names_arch("sm_120a")
    assert verdict.url == "https://github.com/o/r/actions/runs/7"
    statement = json.loads(base64.b64decode(json.loads(files[0].read_text())["payload"]))
    names = {c["name"] for c in statement["predicate"]["configuration"]}
    assert names == {"matrix.yaml", "lockfiles/lane.lock", "buildscripts/probe"}


def test_a_cpu_only_record_signs_nothing(tmp_path: Path, matrix: Path, env: dict[str, str]) -> None:
    assert sign(make_cell("cpu-checked"), tmp_path, matrix, env) == []


def test_a_tag_is_no_subject(tmp_path: Path, matrix: Path, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="not REPOSITORY@sha256:DIGEST"):
        sign(make_cell("verified"), tmp_path, matrix, env, image="127.0.0.1:5000/sglang:good")


def test_a_failed_gpu_stage_is_signed_as_failed_and_never_verifies(tmp_path: Path, matrix: Path,
                                                                    env: dict[str, str]) -> None:
    stages = [s.model_copy(update={"status": Status.FAILED}) if s.name == "server" else s
              for s in cpu_passed() + gpu_passed("NVIDIA RTX PRO 6000", "sm_120")]
    (path,) = sign(finish(make_cell("verified"), stages=stages), tmp_path, matrix, env)
    verdict = verdicts.open_verdict(json.loads(path.read_text()), keys.trusted(tmp_path, env))
    assert verdict.result == "FAILED" and "server@sm_120a" in verdict.failed
    assert "FAILED" in str(verdict.why_not())


def test_gpu_stages_left_out_do_not_verify(tmp_path: Path, matrix: Path, env: dict[str, str]) -> None:
    only = [s for s in gpu_passed("NVIDIA B200", "sm_100") if s.name == "gpu-visible"]
    (path,) = sign(finish(make_cell("verified"), stages=cpu_passed() + only), tmp_path, matrix, env)
    verdict = verdicts.open_verdict(json.loads(path.read_text()), keys.trusted(tmp_path, env))
    assert verdict.result == "PASSED"   # what ran passed, as signed ...
    assert "did not pass on sm_100a: kernel-smoke, server, first-generation" in str(verdict.why_not())  # ... not all


def test_a_gpu_only_run_signs_nothing_and_a_verdict_without_a_cpu_stage_verifies_no_arch(
        tmp_path: Path, matrix: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """`verify --stages` of the GPU stages alone, no CPU record carried: the judge claims nothing for that cell, so
    no verdict is signed (one would be attached and read); and a verdict that lacks a CPU stage anyway (a verifier
    before this rule) shows no arch verified: the reader, like the cosign policy, wants every CPU stage on cpu."""
    assert sign(finish(make_cell("verified"), stages=gpu_passed("NVIDIA H100 80GB HBM3", "sm_90")),
                tmp_path, matrix, env) == []
    said = " ".join(capsys.readouterr().err.split())
    assert "no verdict signed: stages did not run: facts, import, flavour, arch-audit, toolchain, jit-compile" in said
    (path,) = sign(finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA B200", "sm_100")),
                   tmp_path, matrix, env)
    envelope = json.loads(path.read_text())
    document = json.loads(base64.b64decode(envelope["payload"]))
    document["predicate"]["passedTests"].remove("arch-audit@cpu")
    payload = json.dumps(document).encode()
    forged_old = dsse.sign(payload, dsse.IN_TOTO, keys.signing_key(env))   # signed as an older verifier would
    verdict = verdicts.open_verdict(forged_old, keys.trusted(tmp_path, env))
    assert verdict.result == "PASSED"
    assert verdict.why_not() == "CPU stages did not pass, here or carried: arch-audit"


def test_an_edited_verdict_and_another_key_are_refused(tmp_path: Path, matrix: Path, env: dict[str, str]) -> None:
    stages = cpu_passed() + [StageResult(name=n, status=Status.FAILED, gpu="NVIDIA B200", arch="sm_100")
                             for n in GPU_STAGES]
    (path,) = sign(finish(make_cell("verified"), stages=stages), tmp_path, matrix, env)
    envelope = json.loads(path.read_text())
    document = json.loads(base64.b64decode(envelope["payload"]))
    document["predicate"].update(result="PASSED", failedTests=[],
                                 passedTests=[f"{n}@sm_100a" for n in GPU_STAGES])
    forged = {**envelope, "payload": base64.b64encode(json.dumps(document).encode()).decode()}
    with pytest.raises(NotVerified, match="no valid signature by a trusted key"):
        verdicts.open_verdict(forged, keys.trusted(tmp_path, env))
    stranger = [keys.SigningKey("stranger", keys.generate()).public]
    with pytest.raises(NotVerified, match="no valid signature"):
        verdicts.open_verdict(envelope, stranger)
    with pytest.raises(NotVerified, match="no valid signature"):
        verdicts.open_verdict({**envelope, "signatures": []}, keys.trusted(tmp_path, env))


class FakeRegistry:
    """cosign's download and attach, on a list per reference; the registry's manifests, as `index` says."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, index: dict[str, list[str]] | None = None) -> None:
        self.by_ref: dict[str, list[Any]] = {}
        monkeypatch.setattr(cosign, "download", lambda ref, env=None, log_file=None: list(self.by_ref.get(ref, [])))
        monkeypatch.setattr(cosign, "attach", lambda path, ref, env=None, log_file=None: self.by_ref.setdefault(
            ref, []).append(json.loads(path.read_text())))

        def lookup(ref: str, env: object, log: object = None) -> manifests.Manifest | None:
            children = (index or {}).get(ref)
            return manifests.Manifest(ref, ref.split("@")[1], {
                "mediaType": next(iter(manifests.INDEX_TYPES)),
                "manifests": [{"digest": c} for c in children]}) if children else None
        monkeypatch.setattr(manifests, "lookup", lookup)

    @property
    def stored(self) -> list[Any]:
        return [e for found in self.by_ref.values() for e in found]


def test_attach_is_once_and_only_for_that_digest(tmp_path: Path, matrix: Path, env: dict[str, str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    registry = FakeRegistry(monkeypatch)
    files = sign(finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA B200", "sm_100")),
                 tmp_path, matrix, env)
    trusted = keys.trusted(tmp_path, env)
    assert verdicts.attach_verdicts(files, IMAGE, trusted=trusted) == files
    assert verdicts.attach_verdicts(files, IMAGE, trusted=trusted) == []   # a second promote adds nothing
    assert len(registry.stored) == 1
    other = f"127.0.0.1:5000/sglang@sha256:{'e' * 64}"
    with pytest.raises(NotVerified, match=r"not for 127\.0\.0\.1:5000/sglang@sha256:eee"):
        verdicts.attach_verdicts(files, other, trusted=trusted)
    with pytest.raises(NotVerified, match="no valid signature"):
        verdicts.attach_verdicts(files, IMAGE, trusted=[keys.SigningKey("x", keys.generate()).public])
    assert len(registry.stored) == 1


def test_a_verdict_names_the_platform_that_ran_and_goes_to_it(tmp_path: Path, matrix: Path, env: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Verified through an index: the Statement's subject is the platform manifest that ran, never the index
    (its other platforms did not run), and promotion attaches it there."""
    platform, index = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    cell = finish(make_cell("verified"), stages=cpu_passed() + gpu_passed("NVIDIA B200", "sm_100"),
                  image=ImageInfo(repository="127.0.0.1:5000/sglang", digest=index, platform_digest=platform))
    (path,) = sign(cell, tmp_path, matrix, env, image=f"127.0.0.1:5000/sglang@{index}")
    verdict = verdicts.open_verdict(json.loads(path.read_text()), keys.trusted(tmp_path, env))
    assert verdict.digests == (platform,) and verdict.index == index and verdict.arch == "sm_100a"
    assert verdict.signed_at is not None and verdict.signed_at.tzinfo is not None
    registry = FakeRegistry(monkeypatch, index={f"127.0.0.1:5000/sglang@{index}": [platform, "sha256:" + "c" * 64]})
    verdicts.attach_verdicts([path], f"127.0.0.1:5000/sglang@{index}", trusted=keys.trusted(tmp_path, env))
    assert list(registry.by_ref) == [f"127.0.0.1:5000/sglang@{platform}"]
    lone = FakeRegistry(monkeypatch)   # the same verdict offered to a digest it does not name: refused
    with pytest.raises(NotVerified, match="nor for a platform of it"):
        verdicts.attach_verdicts([path], f"127.0.0.1:5000/sglang@sha256:{'e' * 64}",
                                 trusted=keys.trusted(tmp_path, env))
    assert lone.stored == []
