"""Every image the e2e tier built holds none of what the host lent its build as BuildKit secrets: the host
CA bundle's private certificates (and the bundle file), the pip index URLs with their host names and
credentials; its config and history hold no credential URL or token either (tests/secretscan.py says
what is looked for and why; tests/unit/test_secretscan.py shows that it finds planted ones).
"""

from __future__ import annotations

import os

import docker

from buildscripts.results import RunResults
from tests import secretscan


def test_no_secret_of_the_host_is_in_any_built_image(run: RunResults) -> None:
    images = sorted({c.image.id for c in run.cells if c.image.id})
    assert images, "the e2e run built no image"
    secrets = secretscan.host_secrets(dict(os.environ))
    # The engine writes a whole export to its tmp/ before the first byte comes back (minutes for a 10 GB
    # image on a busy runner): the SDK's default 60 s read timeout is far too short for that.
    client = docker.from_env(timeout=3600)
    for image in images:
        findings, counts = secretscan.scan_image(client, image, secrets)
        print(f"{image[:19]}: scanned {counts}, {len(findings)} of {len(secrets.needles)} secrets found")
        assert counts["layers"] > 0, counts
        assert findings == [], (image, secretscan.describe(findings))
