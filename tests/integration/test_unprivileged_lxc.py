"""Unprivileged LXC with real parts, on a machine without a GPU: a real unprivileged container (idmap u/g 0
100000 65536, its own network namespace) made by LXC, the preflight's checks against it through lxc-info and
lxc-attach, and the probe's own code run inside it by the container's root. Character devices of another
driver stand in for the GPU's nodes (mknod with /dev/zero's and /dev/null's numbers): what is checked is who
may open them, which depends on their mode, owner and the idmap, not on the driver behind them."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from buildscripts.lxc import gpu_checks
from buildscripts.lxc.gpu_checks import HostView
from buildscripts.lxc.preflight_check import Check
from buildscripts.lxc.target import Target
from tests import needs
from tests.lxc_container import attach, unprivileged

ROOT = Path(__file__).resolve().parents[2]
# The stand-ins: their numbers tell the preflight which host node each one is (recognised by device number).
FAKE = {"/dev/nvidia0": (1, 5), "/dev/nvidiactl": (1, 3)}
NETWORK = r"""
import fcntl, json, os, socket, struct
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    flags = struct.unpack("16sH14s", fcntl.ioctl(sock, 0x8913, struct.pack("16sH14s", b"lo", 0, b"")))[1]
print("@@json " + json.dumps({"rank": int(os.environ["PROBE_RANK"]), "netns": os.stat("/proc/self/ns/net").st_ino,
                              "lo_up": bool(flags & 1)}))
"""


@pytest.fixture(autouse=True)
def _lxc() -> None:
    needs.tools("lxc-start", "lxc-attach", "lxc-info", "mknod", hint="apt-get install lxc")
    if os.geteuid() != 0:
        needs.unavailable("root (LXC containers with an idmap are started by root here)", "run the tests as root")


def checks(name: str) -> dict[str, Check]:
    view = gpu_checks.container_view(Target.named(name))
    found = [gpu_checks.container_config(view, FAKE), *gpu_checks.user_namespace(view, HostView(), FAKE)]
    return {c.name: c for c in found}


def test_preflight_names_a_loopback_that_is_down_and_a_gpu_node_its_root_cannot_open() -> None:
    with unprivileged({"nvidia0": (1, 5, 0o660), "nvidiactl": (1, 3, 0o666)}) as (name, _):
        assert Target.named(name).unprivileged()
        found = checks(name)
        print({k: (c.status, c.detail) for k, c in found.items()})
        assert found["container config"].detail.startswith("unprivileged;")
        assert found["idmap"].detail == "unprivileged: its root is uid 100000, gid 100000 on the host"
        nodes = found["GPU nodes as its root opens them"]
        assert nodes.status == "fail"
        assert f"/dev/nvidia0 bound from /tmp/{name}/nodes/nvidia0 (mode 0660, host 0:0, nobody:nobody inside)" \
            in nodes.detail
        assert "inside: /dev/nvidia0: Permission denied" in nodes.detail     # opened by the container's root
        assert "/dev/nvidiactl" not in nodes.detail                            # 0666: open to it
        assert any("NVreg_DeviceFileMode=0666" in line for line in nodes.fix)
        loopback = found["loopback in its network namespace"]
        assert loopback.status == "fail" and "lxc.net.0.flags = up" in loopback.fix


def test_with_loopback_up_and_nodes_open_to_all_the_same_checks_pass() -> None:
    nodes = {"nvidia0": (1, 5, 0o666), "nvidiactl": (1, 3, 0o666)}
    with unprivileged(nodes, ("lxc.net.0.flags = up",)) as (name, _):
        found = checks(name)
        print({k: (c.status, c.detail) for k, c in found.items()})
        assert found["loopback in its network namespace"].status == "pass"
        assert found["GPU nodes as its root opens them"].status == "pass"
        assert found["GPU nodes as its root opens them"].detail.startswith("unprivileged; its root may open them "
                                                                           "(opened inside)")


def test_the_probe_inside_gives_its_ranks_a_loopback_and_names_the_node_it_cannot_open() -> None:
    """The container's own loopback is down; the all-reduce's ranks still get one that is up (a network namespace
    of their own, made by the container's root), and the probe sees /dev/nvidia0 as a node it may not open."""
    with unprivileged({"nvidia0": (1, 5, 0o660), "nvidiactl": (1, 3, 0o666)}) as (name, home):
        probe = home / "rootfs" / "tmp" / "p" / "probe"
        shutil.copytree(ROOT / "buildscripts" / "probe", probe, ignore=shutil.ignore_patterns("__pycache__"))
        os.chown(probe.parent, 100000, 100000)
        (probe.parent / "program.py").write_text(NETWORK)
        script = ("import json; from probe import allreduce, devnodes, netcut\n"
                  "ranks, network = allreduce.run_ranks(2, '/tmp/p/work', 60, {}, program=open('program.py').read())\n"
                  "print(json.dumps({'lo_here': netcut.loopback_up(), 'network': network, 'nodes': devnodes.observe(),"
                  " 'ranks': [r['result'] for r in ranks]}))")
        out = attach(name, "sh", "-c", f"cd /tmp/p && /usr/bin/python3 -c {shlex.quote(script)}")
        seen = json.loads(out.strip().splitlines()[-1])
        assert seen["lo_here"] is False                                       # the container's own: down
        assert seen["network"] == {"own_namespace": True, "loopback_up": True}
        assert all(r["lo_up"] for r in seen["ranks"]) and len({r["netns"] for r in seen["ranks"]}) == 1
        by_path = {n["path"]: n for n in seen["nodes"]}
        assert by_path["/dev/nvidia0"] == {"path": "/dev/nvidia0", "mode": "0660", "uid": 65534, "gid": 65534,
                                           "rw": False}
        assert by_path["/dev/nvidiactl"]["rw"] is True
