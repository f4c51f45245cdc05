"""What anyone who can write a registry can do, through the distribution API itself: read and write manifests
and blobs by hand (an index of chosen platforms, a config rewritten with its digests, a tag re-pointed at an
older manifest). Plain HTTP, for the loopback registry of tests/registry_server.py only."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from typing import Any

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ACCEPT = ", ".join([INDEX, MANIFEST, "application/vnd.docker.distribution.manifest.v2+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json"])


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class RegistryWriter:
    def __init__(self, host: str) -> None:
        self.host = host

    def _ask(self, method: str, path: str, data: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[bytes, Any]:
        request = urllib.request.Request(f"http://{self.host}/v2/{path}", data=data, method=method,
                                         headers=headers or {})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.read(), answer.headers

    def manifest(self, name: str, reference: str) -> tuple[bytes, str]:
        """The manifest's bytes and media type, as the registry serves them for a tag or a digest."""
        body, headers = self._ask("GET", f"{name}/manifests/{reference}", headers={"Accept": ACCEPT})
        return body, str(headers.get("Content-Type"))

    def put_manifest(self, name: str, reference: str, data: bytes, media_type: str) -> str:
        self._ask("PUT", f"{name}/manifests/{reference}", data, {"Content-Type": media_type})
        return digest_of(data)

    def blob(self, name: str, digest: str) -> bytes:
        return self._ask("GET", f"{name}/blobs/{digest}")[0]

    def put_blob(self, name: str, data: bytes) -> str:
        """A monolithic upload: POST for a session, PUT with the digest."""
        digest = digest_of(data)
        _, headers = self._ask("POST", f"{name}/blobs/uploads/", b"")
        location = str(headers["Location"])
        location = location.split(f"http://{self.host}/v2/", 1)[-1].removeprefix("/v2/")
        sep = "&" if "?" in location else "?"
        self._ask("PUT", f"{location}{sep}digest={digest}", data, {"Content-Type": "application/octet-stream"})
        return digest

    def rewrite_config(self, name: str, digest: str, tag: str, **changes: Any) -> str:
        """The image `digest` with its config's fields changed (`config` keys merged into the runtime config),
        pushed under `tag` with every digest rewritten to match: another image, consistent in itself."""
        data, media_type = self.manifest(name, digest)
        manifest = json.loads(data)
        config = json.loads(self.blob(name, manifest["config"]["digest"]))
        runtime = changes.pop("config", {})
        config.update(changes)
        config["config"] = {**config.get("config", {}), **runtime}
        raw = json.dumps(config).encode()
        manifest["config"].update(digest=self.put_blob(name, raw), size=len(raw))
        return self.put_manifest(name, tag, json.dumps(manifest).encode(), media_type)

    def index(self, name: str, tag: str, platforms: dict[str, str]) -> str:
        """An OCI index of `platforms` (os/arch[/variant] -> manifest digest, all in `name`; "" for an entry that
        names no platform), pushed as `tag`."""
        entries = []
        for platform, digest in platforms.items():
            data, media_type = self.manifest(name, digest)
            entry = {"mediaType": media_type, "digest": digest, "size": len(data)}
            if platform:
                entry["platform"] = dict(zip(("os", "architecture", "variant"), platform.split("/"), strict=False))
            entries.append(entry)
        body = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}).encode()
        return self.put_manifest(name, tag, body, INDEX)
