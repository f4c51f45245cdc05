#!/usr/bin/env python3
"""Push an image made from this machine's root filesystem to a registry, as one zstd layer, and print its
digest. Used on the H200 test machine for the by-digest run (run.sh, phase `push`): that machine has no
package index, so the image is NOT a cell's build but its own root (Python 3.12, torch 2.11.0+cu130, the CUDA
13.0 toolkit) with SGLang 0.5.16 staged in EXTRA and put on PYTHONPATH, as ../../shared engine.sh's `image`
makes it. Streamed: tar -> zstd -> the registry (no copy on disk, no `docker save`), in one pass.

  push_root.py REGISTRY REPO TAG [--root /] [--extra /tmp/gs/site] [--exclude PATTERN]... [--env K=V]... [--out FILE]

Writes an OCI image manifest (config + one application/vnd.oci.image.layer.v1.tar+zstd layer), tagged TAG,
and prints `REGISTRY/REPO@sha256:…`, also to FILE. Standard library only; plain HTTP (a loopback registry).
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

CHUNK = 4 << 20
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
# What engine.sh's `image` leaves out (machine state, the driver, the workplace), plus what the 2026-12-01
# by-digest image left out to stay near 12 GB: profilers, the toolkit's static libraries, JAX, CuPy, ONNX runtime.
EXCLUDES = ["./proc", "./sys", "./dev", "./run", "./tmp", "./var/tmp", "./root", "./usr/local/nvidia", "./home",
            "./work", "./out", "./usr/local/cuda*/nsight*", "./usr/local/cuda*.a", "./opt/nvidia/nsight*",
            "*/site-packages/jax", "*/site-packages/jaxlib", "*/site-packages/jax_cuda13_plugin",
            "*/site-packages/jax_cuda13_pjrt", "*/site-packages/jax_plugins", "*/site-packages/cupy",
            "*/site-packages/cupy_backends", "*/site-packages/cupyx", "*/site-packages/onnxruntime"]


class Registry:
    def __init__(self, host: str) -> None:
        self.host = host

    def call(self, method: str, path: str, body=None, headers=None, ok=(200, 201, 202)):
        conn = http.client.HTTPConnection(self.host, timeout=600)
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if resp.status not in ok:
            raise SystemExit(f"{method} {path}: HTTP {resp.status} {data[:300]!r}")
        return resp, data

    def upload_start(self, repo: str) -> str:
        resp, _ = self.call("POST", f"/v2/{repo}/blobs/uploads/", headers={"Content-Length": "0"})
        return resp.getheader("Location")

    def upload_finish(self, location: str, digest: str, body: bytes = b"") -> None:
        parts = urllib.parse.urlsplit(location)
        query = (parts.query + "&" if parts.query else "") + "digest=" + urllib.parse.quote(digest)
        self.call("PUT", f"{parts.path}?{query}", body=body,
                  headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(body))},
                  ok=(201,))

    def blob(self, repo: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.upload_finish(self.upload_start(repo), digest, data)
        return digest

    def stream_blob(self, repo: str, chunks) -> str:
        """PATCH the whole stream (chunked transfer encoding), then close the upload with its digest."""
        location = self.upload_start(repo)
        parts = urllib.parse.urlsplit(location)
        digest = hashlib.sha256()
        def body():
            for c in chunks:
                digest.update(c)
                yield c
        resp, _ = self.call("PATCH", parts.path + (f"?{parts.query}" if parts.query else ""), body=body(),
                            headers={"Content-Type": "application/octet-stream"})
        self.upload_finish(resp.getheader("Location"), "sha256:" + digest.hexdigest())
        return "sha256:" + digest.hexdigest()


def layer(root: str, extra: str | None, excludes: list[str], zstd: list[str], stats: dict):
    """Yield the zstd stream of `tar` of `root`; stats gets diff_id (sha256 of the tar) and sizes."""
    tar = ["tar", "-C", root, "--one-file-system", "--numeric-owner", "-cf", "-",
           *[f"--exclude={e}" for e in excludes], "."]
    if extra:
        tar.append(extra.lstrip("/"))
    t = subprocess.Popen(tar, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    z = subprocess.Popen(zstd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    diff = hashlib.sha256()
    def feed():
        n = 0
        while True:
            c = t.stdout.read(CHUNK)
            if not c:
                break
            diff.update(c)
            n += len(c)
            z.stdin.write(c)
        z.stdin.close()
        stats["tar_bytes"], stats["tar_rc"] = n, t.wait()
    th = threading.Thread(target=feed, daemon=True)
    th.start()
    n = 0
    while True:
        c = z.stdout.read(CHUNK)
        if not c:
            break
        n += len(c)
        yield c
    th.join()
    stats["zstd_rc"], stats["layer_bytes"], stats["diff_id"] = z.wait(), n, "sha256:" + diff.hexdigest()
    if stats["zstd_rc"] != 0 or stats["tar_rc"] not in (0, 1):  # tar 1: a file changed as it was read
        raise SystemExit(f"tar exit {stats['tar_rc']}, zstd exit {stats['zstd_rc']}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("registry")
    ap.add_argument("repo")
    ap.add_argument("tag")
    ap.add_argument("--root", default="/")
    ap.add_argument("--extra", default="/tmp/gs/site", help="a folder outside the excluded ones, added and put on "
                                                           "PYTHONPATH ('' for none)")
    ap.add_argument("--exclude", action="append", default=None)
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="another variable of the image's config (a warm image's cache folders)")
    ap.add_argument("--path", default=None, help="PATH in the image (default: python3's folder first)")
    ap.add_argument("--zstd", default=shutil.which("zstd") or "zstd")
    ap.add_argument("--out")
    a = ap.parse_args()
    t0 = time.time()
    reg, stats = Registry(a.registry), {}
    zstd = [a.zstd, "-q", "-T0", "-3", "-c"]
    excludes = EXCLUDES if a.exclude is None else a.exclude
    layer_digest = reg.stream_blob(a.repo, layer(a.root, a.extra or None, excludes, zstd, stats))
    python_dir = os.path.dirname(shutil.which("python3") or "/usr/bin/python3")
    path = a.path or f"{python_dir}:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = [f"PATH={path}", "CUDA_HOME=/usr/local/cuda"] + ([f"PYTHONPATH={a.extra}"] if a.extra else []) + a.env
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    config = json.dumps({
        "created": created, "architecture": "amd64", "os": "linux", "config": {"Env": env},
        "rootfs": {"type": "layers", "diff_ids": [stats["diff_id"]]},
        "history": [{"created": created, "created_by": f"tar of this machine's root ({a.root}), {a.extra or 'nothing'} "
                                                      "added; not a build of any cell"}]}).encode()
    config_digest = reg.blob(a.repo, config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": OCI_LAYER_ZSTD, "digest": layer_digest, "size": stats["layer_bytes"]}]}).encode()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    resp, _ = reg.call("PUT", f"/v2/{a.repo}/manifests/{a.tag}", body=manifest,
                       headers={"Content-Type": OCI_MANIFEST, "Content-Length": str(len(manifest))}, ok=(201,))
    served = resp.getheader("Docker-Content-Digest")
    if served and served != digest:
        raise SystemExit(f"the registry says {served} for the manifest whose sha256 is {digest}")
    ref = f"{a.registry}/{a.repo}@{digest}"
    print(json.dumps({"ref": ref, "config": config_digest, "layer": layer_digest, **stats,
                      "seconds": round(time.time() - t0, 1)}), file=sys.stderr)
    print(ref)
    if a.out:
        with open(a.out, "w") as f:
            f.write(ref + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
