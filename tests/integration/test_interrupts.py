"""SIGINT and SIGKILL sent to a real `python -m buildscripts build` in the middle of a BuildKit build and of a
verification (container running), and to a real `promote` in the middle of its pushes to a real registry.

After each: no good tag was created or moved, results.json is valid JSON (written by temp file + rename)
and never half a file, no container of the run is left running -- at once after SIGINT; after SIGKILL,
which nothing in the process can clean up after, the next run on this host removes the orphan
(verify.container.reap_orphans) -- and the next run with the same arguments finishes.

Each test builds a copy of the project whose one cell takes seconds (tests/integration/tinyproject.py).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from buildscripts import matrix, results
from buildscripts.matrix.schema import Tags
from buildscripts.publish import tags
from buildscripts.results import RunResults, Status, Verdict
from buildscripts.verify import container
from tests.integration import tinyimages, tinyproject
from tests.registry_server import RegistryServer
from tests.results_factory import make_cell, of_cell, passed_gate, sealed

RUN_ID = "interrupted"
SIGNALS = [pytest.param(signal.SIGINT, id="SIGINT"), pytest.param(signal.SIGKILL, id="SIGKILL")]


@dataclass
class Started:
    proc: subprocess.Popen[bytes]
    output: Path   # stdout and stderr

    def text(self) -> str:
        return self.output.read_text(errors="replace")


def start(argv: list[str], cwd: Path, logs: Path) -> Started:
    logs.mkdir(parents=True, exist_ok=True)
    output = logs / f"output-{uuid.uuid4().hex[:6]}.txt"
    with output.open("wb") as out:
        # SIGINT as a terminal delivers it: a runner that started this session in the background
        # (`cmd &`, nohup) hands its children SIGINT ignored, and Ctrl-C would then never arrive.
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509
    return Started(proc, output)


def wait_for(condition: Callable[[], bool], what: str, started: Started, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if started.proc.poll() is not None:
            pytest.fail(f"the command ended (exit {started.proc.returncode}) before {what}: {started.text()[-3000:]}")
        if time.monotonic() > deadline:
            started.proc.kill()
            pytest.fail(f"no {what} within {timeout}s")
        time.sleep(0.2)


def interrupt(started: Started, sig: signal.Signals) -> None:
    """Send `sig` to the CLI process itself (as Ctrl-C does to the foreground process) and wait for its end."""
    os.kill(started.proc.pid, sig)
    code = started.proc.wait(timeout=120)
    if sig is signal.SIGINT:
        assert code == 130, started.text()[-3000:]
        assert "interrupted" in started.text() and "Traceback" not in started.text()
    else:
        assert code == -signal.SIGKILL


def processes_naming(text: str) -> list[int]:
    """Pids of this machine's processes whose command line contains `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue   # it ended meanwhile
    return found


def not_half_written(path: Path) -> RunResults | None:
    """results.json, if any, is complete and valid; no temp file of it is left."""
    assert not path.with_suffix(".tmp").exists()
    return results.load(path) if path.exists() else None


def good_tags(client: docker.DockerClient, repository: str) -> list[str]:
    """Local tags in `repository` that are not candidate tags (those start with the cell id). One listing call:
    tests beside this one remove images meanwhile, and a listing that then inspects each image can miss one."""
    return sorted(t for i in client.api.images() for t in i.get("RepoTags") or []
                  if t.startswith(repository + ":") and not t.split(":")[-1].startswith(tinyproject.CELL))


def running(client: docker.DockerClient) -> list[str]:
    return [c.name or "" for c in client.containers.list(filters={"label": f"{container.LABEL_RUN}={RUN_ID}"})]


def build_again(project: tinyproject.TinyProject, logs: Path) -> RunResults:
    """The same command once more: it finishes, and its results say what the cell earned."""
    done = subprocess.run(project.argv(*build_args(project)), cwd=project.root, capture_output=True, text=True,
                          timeout=600)
    (logs / "again.txt").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    again = not_half_written(project.results(RUN_ID))
    assert again is not None and again.finished is not None
    (cell,) = again.cells
    assert cell.build is not None and cell.build.status is Status.PASSED
    assert [(s.name, s.status) for s in cell.stages] == [("facts", Status.PASSED), ("import", Status.FAILED)]
    assert cell.verdict is Verdict.EXPECTED_FAILURE and cell.tags == []
    return again


def build_args(project: tinyproject.TinyProject) -> list[str]:
    return ["build", "--runs", str(project.runs), "--run-id", RUN_ID, "--stages", "facts,import"]


@pytest.fixture
def base(client: docker.DockerClient) -> str:
    return tinyimages.python_image(client)   # the project's base, which the tiny project builds on


@pytest.mark.parametrize("sig", SIGNALS)
def test_interrupted_in_the_middle_of_a_buildkit_build(client: docker.DockerClient, base: str, tmp_path: Path,
                                                       sig: signal.Signals) -> None:
    nonce = uuid.uuid4().hex[:10]
    project = tinyproject.make(tmp_path / "project", nonce=nonce, build_s=20, import_s=1)
    repository = f"sglang-images-test-{nonce}"
    started = start(project.argv(*build_args(project)), project.root, tmp_path)
    build_log = project.runs / RUN_ID / tinyproject.CELL / "build.log"
    wait_for(lambda: build_log.exists() and f"echo building {nonce}" in build_log.read_text(),
             "RUN step of the cell in BuildKit", started)
    interrupt(started, sig)
    if sig is signal.SIGKILL:
        # buildx runs in its own session (proc.run), so the kill of the run does not reach it: it finishes the
        # build and may give the image its candidate tag (never a good tag). Wait for it, so that the image it
        # makes is there when the test session removes what it made.
        deadline = time.monotonic() + 300
        while processes_naming(repository) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert processes_naming(repository) == []
    else:
        assert processes_naming(repository) == []   # Ctrl-C reached buildx too (proc.shutdown)
    first = not_half_written(project.results(RUN_ID))
    assert first is not None and first.cells == []         # the run's record, without the unfinished cell
    assert (first.finished is not None) == (sig is signal.SIGINT)   # only SIGINT lets the run close its record
    assert good_tags(client, repository) == [] and running(client) == []
    build_again(project, tmp_path)
    assert good_tags(client, repository) == []


@pytest.mark.parametrize("sig", SIGNALS)
def test_interrupted_in_the_middle_of_a_verification(client: docker.DockerClient, base: str, tmp_path: Path,
                                                     sig: signal.Signals) -> None:
    nonce = uuid.uuid4().hex[:10]
    project = tinyproject.make(tmp_path / "project", nonce=nonce, build_s=0, import_s=15)
    repository = f"sglang-images-test-{nonce}"
    started = start(project.argv(*build_args(project)), project.root, tmp_path)
    probe_log = project.runs / RUN_ID / tinyproject.CELL / "probe.log"
    wait_for(lambda: probe_log.exists() and '"name": "facts"' in probe_log.read_text(),
             "the facts stage's result (the import stage runs next)", started)
    assert len(running(client)) == 1, "the verification container runs"
    interrupt(started, sig)
    first = not_half_written(project.results(RUN_ID))
    assert first is not None and first.cells == []
    if sig is signal.SIGINT:
        assert running(client) == [] and container.leftovers(client, RUN_ID) == []   # removed on the way out
    else:
        assert len(running(client)) == 1   # nothing in a killed process removes it: the next run does
    build_again(project, tmp_path)
    assert container.leftovers(client, RUN_ID) == []
    assert good_tags(client, repository) == []


# ---------------------------------------------------------------- promote


def verified_results(client: docker.DockerClient, loaded: matrix.Matrix, path: Path) -> results.CellResult:
    """A verified record of the one cell of `loaded` for a fresh image of 256 MB of random bytes (its push takes
    a moment), sealed and tagged as the pipeline does (candidate tag, then good tags on the tested image)."""
    cfg = loaded.spec.tags
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w") as tar:
        data = os.urandom(256 << 20)
        info = tarfile.TarInfo("payload.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (matrix_cell,) = loaded.cells
    cell_id = matrix_cell.id
    client.api.import_image_from_data(payload.getvalue(), repository=cfg.repository, tag="tested",
                                      changes=[tinyimages.owner_change()])
    image_id = str(client.images.get(f"{cfg.repository}:tested").id)
    ref = f"{cfg.repository}:{cell_id}-{image_id[7:19]}"
    repository, tag = ref.rsplit(":", 1)
    client.api.tag(image_id, repository, tag)
    client.images.remove(f"{cfg.repository}:tested")   # only that tag
    cell = make_cell("verified", image_id=image_id)
    cell = sealed(of_cell(cell.model_copy(update={"image": cell.image.model_copy(update={"ref": ref})}), matrix_cell),
                  matrix_digest=results.matrix_digest(loaded.spec))
    cell = cell.model_copy(update={"tags": tags.apply_good_tags(client, passed_gate(cell, loaded), cfg)})
    results.save(RunResults(run_id="t", started=results.now(), host={}, cells=[cell],
                            matrix_digest=results.matrix_digest(loaded.spec)), path)
    return cell


def remote_config(server: RegistryServer, repository: str) -> dict[str, str]:
    """tag -> the image id (config digest) the registry serves for it, for every tag of `repository`."""
    def get(path: str) -> dict[str, object]:
        request = urllib.request.Request(f"http://{server.url}/v2/{repository}/{path}", headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                found: dict[str, object] = json.load(answer)
                return found
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return {}
            raise

    listed = get("tags/list").get("tags") or []
    assert isinstance(listed, list)
    return {str(t): str(get(f"manifests/{t}")["config"]["digest"]) for t in listed}  # type: ignore[index]


@pytest.mark.parametrize("sig", SIGNALS)
def test_interrupted_in_the_middle_of_a_promote(client: docker.DockerClient, server: RegistryServer,
                                                tmp_path: Path, sig: signal.Signals) -> None:
    nonce = uuid.uuid4().hex[:10]
    cfg = Tags(repository=f"sglang-images-test-{nonce}")
    # The tiny cell is expected to fail at import; a cell of another toolkit is not, so it can be verified.
    text = tinyproject.MATRIX.format(nonce=nonce).replace("none: {description: nothing}", "pip: {description: x}")
    (tmp_path / "matrix.yaml").write_text(text)
    path = tmp_path / "runs" / "t" / "results.json"
    cell = verified_results(client, matrix.load(tmp_path / "matrix.yaml"), path)
    children = {ref.rsplit(":", 1)[1]: str(client.images.get(ref).id) for ref in cell.tags}
    allowed = {**children, cell.image.ref.rsplit(":", 1)[1]: str(cell.image.id)}  # type: ignore[union-attr]
    argv = [sys.executable, "-m", "buildscripts", "promote", "--results", str(path), "--registry", server.url,
            "--matrix", str(tmp_path / "matrix.yaml")]
    started = start(argv, tinyproject.ROOT, tmp_path)
    wait_for(lambda: "pushing " in started.text(), "the first push", started)
    interrupt(started, sig)

    saved = not_half_written(path)
    assert saved is not None and saved.cells[0].promoted == {}   # not marked promoted: it did not finish
    remote = remote_config(server, cfg.repository)
    print(f"{sig.name} in the first push: the registry then held {sorted(remote) or 'nothing'}")
    assert {t: remote[t] for t in remote if t not in allowed} == {}
    for tag_name, image_id in remote.items():   # what a tag got is the image it stands for, or nothing
        assert image_id == allowed[tag_name], tag_name

    again = subprocess.run(argv, cwd=tinyproject.ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    promoted = not_half_written(path).cells[0].promoted   # type: ignore[union-attr]
    assert sorted(promoted) == sorted(f"{server.url}/{cfg.repository}:{t}" for t in allowed)
    assert remote_config(server, cfg.repository) == allowed
    # no local push tag left; one list call (the SDK's images.list() inspects each image, and an image another test
    # removes in between fails that inspection)
    assert not any(server.url in t for i in client.api.images() for t in i.get("RepoTags") or [])
    for ref in cell.tags:
        client.images.remove(ref, force=True)
