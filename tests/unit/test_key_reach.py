"""Keys another user could plant, swap or read are refused; runs with no boundary to the keys vouch for nothing
(trust/keys.py, verify/identity.py, lxc/privileged.py, results/provenance.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildscripts import handed_env, matrix
from buildscripts.errors import ConfigError
from buildscripts.lxc import privileged
from buildscripts.trust import keys
from buildscripts.verify import identity, places
from buildscripts.verify.asked import Asked, Place
from buildscripts.workspace import Workspace
from tests import needs


def planted(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / keys.LOCAL_KEY
    path.write_bytes(keys.private_pem(keys.generate()))
    path.chmod(0o600)
    return path


def test_a_sound_machine_key_is_used(tmp_path: Path) -> None:
    path = planted(tmp_path / "k")
    assert keys.key_problem(path) is None
    assert keys.signing_key({keys.KEY_DIR_ENV: str(tmp_path / "k")}).name == str(path)


@pytest.mark.parametrize("spoil", ["link", "dangling link", "mode 644", "other owner", "folder writable by others"])
def test_unsafe_machine_keys_are_refused_with_the_fix(tmp_path: Path, spoil: str) -> None:
    folder = tmp_path / "k"
    path = planted(folder)
    if spoil == "link":
        real = planted(tmp_path / "elsewhere")
        path.unlink()
        path.symlink_to(real)
    elif spoil == "dangling link":
        path.unlink()
        path.symlink_to(tmp_path / "nothing-here")
    elif spoil == "mode 644":
        path.chmod(0o644)
    elif spoil == "other owner":
        if os.geteuid() != 0:
            needs.unavailable("root (to change a file's owner)", "run the tests as root, as CI does")
        os.chown(path, 65534, 65534)
    else:
        folder.chmod(0o777)
    for use in (keys.signing_key, lambda env: keys.trusted(tmp_path, env)):
        with pytest.raises(ConfigError) as refused:
            use({keys.KEY_DIR_ENV: str(folder)})
        assert "is not used" in refused.value.message or "link" in refused.value.message
        assert refused.value.hint


def test_a_configured_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = planted(tmp_path / "ci")
    path.chmod(0o640)
    with pytest.raises(ConfigError, match="lets others read or write it"):
        keys.signing_key({keys.KEY_FILE_ENV: str(path)})


def test_host_mode_not_as_root_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No other identity can be given: the code under test could read this user's keys, or plant one."""
    monkeypatch.setattr(identity, "is_root", lambda: False)
    with pytest.raises(ConfigError, match="can read this user's keys") as refused:
        ws = Workspace.at()
        asked = Asked(ws=ws, matrix=matrix.load(ws.matrix), env={keys.KEY_DIR_ENV: str(tmp_path / "none-yet")})
        places.verifier(Place(host=True, python="/usr/bin/python3")).request(
            asked, places.Named(cell_id=None, out=tmp_path / "results.json"))
    assert "as root" in (refused.value.hint or "")


def test_the_environment_handed_to_the_code_under_test_holds_no_secret() -> None:
    env = {"PATH": "/bin", "CUDA_HOME": "/usr/local/cuda", keys.KEY_ENV: "pem", keys.KEY_FILE_ENV: "/k",
           "GITHUB_TOKEN": "t", "REGISTRY_PASSWORD": "p", "AWS_SECRET_ACCESS_KEY": "s", "SGLANG_IMAGES_KEY_DIR": "/d",
           "SGLANG_IMAGES_WARM_REPORT": "1", "NCCL_DEBUG": "INFO", "MYSQL_PWD": "p", "REGISTRY_PASS": "p",
           "GPG_PASSPHRASE": "p", "CI_JOB_JWT_V2": "j", "GH_PAT": "t", "SENTRY_DSN": "d", "HTTPS_PROXY": "http://u:p@h",
           "PIP_INDEX_URL": "https://u:p@h/simple", "DATABASE_URL": "pg://u:p@h", "HF_TOKEN": "t",
           "SGLANG_HF_TOKEN": "t", "CUDA_VISIBLE_DEVICES": "0", "LD_LIBRARY_PATH": "/l", "LC_ALL": "C.UTF-8"}
    assert handed_env.handed_environment(env) == {
        "PATH": "/bin", "CUDA_HOME": "/usr/local/cuda", "SGLANG_IMAGES_WARM_REPORT": "1", "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0", "LD_LIBRARY_PATH": "/l", "LC_ALL": "C.UTF-8"}


@pytest.mark.parametrize(("id_map", "root_inside_is_root"), [
    (["0 100000 65536"], False),
    (["0 100000 1000", "1000 101000 64536"], False),
    (["0 0 4294967295"], True),                      # a privileged container's
    (["0 100000 1000", "1000 0 1"], True),           # its uid 1000 is this machine's root
    ([], True), (["garbage"], True),                 # an id map that cannot be read proves nothing
])
def test_only_a_container_whose_running_id_map_keeps_this_machines_root_out_is_a_boundary(
        id_map: list[str], root_inside_is_root: bool) -> None:
    assert privileged.maps_root(id_map) is root_inside_is_root


