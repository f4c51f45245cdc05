"""The secrets scanner on saved-image archives made here: it finds each planted secret where it was planted,
leaves a public root and a clean image alone, and finds a secret that straddles two read chunks."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests import secretscan
from tests.secretscan import Finding, Secrets

DATA = Path(__file__).parent / "data" / "secretscan"
PLANTED = (DATA / "planted-ca.pem").read_bytes()     # a throw-away self-signed CA (its key was not kept)
PUBLIC = (DATA / "public-root.pem").read_bytes()     # stands in for one of Debian's public roots
INDEX = "https://scanuser:Sup3rSecret@private-index.test/simple"
EXTRA = "https://extra-index.test/simple"


def tar_of(files: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def saved_image(layers: Sequence[Mapping[str, bytes]], config: Mapping[str, object]) -> io.BytesIO:
    """A docker-archive as `docker save` writes it: layer tars, the config JSON and manifest.json."""
    files = {f"layer{n}/layer.tar": tar_of(layer) for n, layer in enumerate(layers)}
    files["config.json"] = json.dumps(config).encode()
    files["manifest.json"] = json.dumps([{"Config": "config.json", "Layers": list(files)[:-1]}]).encode()
    return io.BytesIO(tar_of(files))


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    bundle = tmp_path / "ca-certificates.crt"
    bundle.write_bytes(PUBLIC + PLANTED)
    env = {"SSL_CERT_FILE": str(bundle), "PIP_INDEX_URL": INDEX, "PIP_EXTRA_INDEX_URL": EXTRA}
    return secretscan.host_secrets(env, public=set(secretscan.pem_certificates(PUBLIC)))


CLEAN_CONFIG = {"config": {"Env": ["PATH=/usr/bin"]}, "history": [{"created_by": "RUN --mount=type=secret,id=ca"}]}
PUBLIC_LAYER = {"etc/ssl/certs/ca-certificates.crt": PUBLIC, "usr/bin/tool": b"\x7fELF" + b"\0" * 100}


def test_what_the_host_lends_becomes_needles(secrets: Secrets) -> None:
    assert sorted(secrets.needles) == [
        "index URL #1", "index URL #1: host name", "index URL #1: password", "index URL #1: user:password",
        "index URL #2", "index URL #2: host name",
        "private CA #1 of the host bundle (DER)", "private CA #1 of the host bundle (PEM)",
        "the host CA bundle file"]
    assert secrets.needles["index URL #1: user:password"] == b"scanuser:Sup3rSecret"
    assert secrets.needles["private CA #1 of the host bundle (PEM)"] in PLANTED   # a line of its body


def test_a_clean_image_with_a_public_root_has_no_finding(secrets: Secrets) -> None:
    findings, counts = secretscan.scan_saved(saved_image([PUBLIC_LAYER], CLEAN_CONFIG), secrets)
    assert findings == []
    assert counts == {"layers": 1, "configs": 2}


def test_each_planted_secret_is_found_where_it_was_planted(secrets: Secrets) -> None:
    layers = [
        PUBLIC_LAYER,
        {"usr/local/share/ca-certificates/host.crt": PLANTED},
        {"opt/venv/pip.conf": f"[global]\nindex-url = {INDEX}\n".encode()},
        {"root/copied-bundle": PUBLIC + PLANTED},
        {"run/secrets/index": b"export X=1\n"},
    ]
    config = {"config": {"Env": [f"PIP_EXTRA_INDEX_URL={EXTRA}"]},
              "history": [{"created_by": "RUN pip install --index-url https://u:tok3n@elsewhere.test/simple x"}]}
    findings, _ = secretscan.scan_saved(saved_image(layers, config), secrets)
    found = {(f.where, f.what) for f in findings}
    pem = "private CA #1 of the host bundle (PEM)"
    assert ("layer layer1/layer.tar: usr/local/share/ca-certificates/host.crt", pem) in found
    pip_conf = "layer layer2/layer.tar: opt/venv/pip.conf"
    assert {(pip_conf, what) for what in ("index URL #1", "index URL #1: host name", "index URL #1: password",
                                          "index URL #1: user:password", "a file where a secret would be copied")
            } <= found
    assert ("layer layer3/layer.tar: root/copied-bundle", "the host CA bundle file") in found
    assert ("layer layer4/layer.tar: run/secrets/index", "a file where a secret would be copied") in found
    assert ("config.json", "index URL #2") in found and ("config.json", "a user:password URL") in found
    assert not any(f.where.startswith("layer layer0/") for f in findings)   # the public root is no finding


def test_a_secret_across_two_chunks_is_found(secrets: Secrets, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secretscan, "CHUNK", 7)
    data = io.BytesIO(b"x" * 5 + INDEX.encode() + b"y" * 9)
    assert "index URL #1" in secretscan.search(data, secrets)


def test_a_saved_image_streamed_in_chunks_reads_whole(secrets: Secrets) -> None:
    archive = saved_image([{"etc/leak": PLANTED}], CLEAN_CONFIG).getvalue()
    chunks = (archive[i:i + 1000] for i in range(0, len(archive), 1000))   # as image.save() yields it
    findings, counts = secretscan.scan_saved(secretscan.ChunkReader(chunks), secrets)
    assert counts["layers"] == 1
    assert Finding("layer layer0/layer.tar: etc/leak", "private CA #1 of the host bundle (PEM)") in findings
