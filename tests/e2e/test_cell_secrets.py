"""Every image the e2e tier built holds none of what the host lent its build as BuildKit secrets: the host
CA bundle's private certificates (and the bundle file), the pip index URLs with their host names and
credentials; its config and history hold no credential URL or token either (tests/secretscan.py says
what is looked for and why; tests/unit/test_secretscan.py shows that it finds planted ones).

The layers are read where the engine keeps them (`scan_in_place`; tests/integration/test_secrets.py shows it
finds what the scan of a saved image finds): `docker save` of the two cells had the engine write some 10 GB to
disk first; now the file writes nothing and reserves no disk room (tests/disk_room.py).
"""

from __future__ import annotations

import os
from contextlib import closing

import docker

from buildscripts.results import RunResults
from tests import secretscan


def test_no_secret_of_the_host_is_in_any_built_image(run: RunResults) -> None:
    images = sorted({c.image.id for c in run.cells if c.image.id})
    assert len(images) == 2, "the e2e run holds no image of each cell"
    secrets = secretscan.host_secrets(dict(os.environ))
    # The layers the cells share (all but the toolkit's and the cell's) are scanned once.
    with closing(docker.from_env()) as client:
        findings, counts = secretscan.scan_in_place(client, images, secrets)
    print(f"{', '.join(i[:19] for i in images)}: scanned {counts}, {len(findings)} of {len(secrets.needles)} "
          "secrets found")
    assert counts["layers"] > 0 and counts["configs"] >= len(images), counts
    assert findings == [], (images, secretscan.describe(findings))
