"""matrix.yaml: strict validation with messages that say where and how to fix; cells and selection."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from buildscripts import matrix, results
from buildscripts.errors import ConfigError, SelectionError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = (ROOT / "matrix.yaml").read_text()


def parse(text: str) -> matrix.Matrix:
    return matrix.parse(text, Path("matrix.yaml"))


def edited(change: dict[str, object], drop: tuple[str, ...] = ()) -> str:
    """The project's matrix.yaml with top-level keys replaced (`change`) or removed (`drop`)."""
    data = yaml.safe_load(DEFAULT)
    data.update(change)
    for key in drop:
        data.pop(key)
    return yaml.safe_dump(data, sort_keys=False)


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        parse(text)
    return str(exc.value)


def test_default_matrix_is_valid_and_has_the_required_cells() -> None:
    m = matrix.load(ROOT / "matrix.yaml", {})
    ids = {c.id for c in m.buildable()}
    for sglang, lane in (("0.5.10", "torch2.9.1-cu128"), ("0.5.16", "torch2.11.0-cu130"),
                         ("0.5.23", "torch2.14.1-cu130")):
        assert f"sglang{sglang}-{lane}-none-bookworm" in ids
        if lane.endswith("cu130"):
            assert f"sglang{sglang}-{lane}-pip-bookworm" in ids
    # PyPI's CUDA 12 nvcc wheels have no nvcc driver: the cu128 pip toolkit is excluded, with why.
    cu128_pip = next(c for c in m.cells if c.id == "sglang0.5.10-torch2.9.1-cu128-pip-bookworm")
    assert cu128_pip.excluded and "no nvcc driver" in cu128_pip.excluded
    assert {"sm_90a", "sm_100a", "sm_120a"} <= set(m.spec.targets("linux/amd64").archs)


def test_cells_whose_sglang_pins_another_torch_are_excluded_with_the_reason() -> None:
    m = parse(DEFAULT)
    cell = next(c for c in m.cells if c.id == "sglang0.5.16-torch2.9.1-cu128-pip-bookworm")
    assert cell.excluded == "sglang 0.5.16 pins torch 2.11.0; lane torch2.9.1-cu128 has torch 2.9.1"
    assert cell not in m.buildable()


def test_ids_are_unique_and_stable() -> None:
    ids = [c.id for c in parse(DEFAULT).cells]
    assert len(ids) == len(set(ids))
    assert ids == [c.id for c in parse(DEFAULT).cells]


def test_layers_are_shared_across_toolkits() -> None:
    cells = [c for c in parse(DEFAULT).buildable() if c.sglang.version == "0.5.16"]
    assert len(cells) == 2
    assert len({c.sglang_layer_id for c in cells}) == 1
    assert len({c.lane_layer_id for c in cells}) == 1


def test_malformed_yaml_names_the_line() -> None:
    message = error_of("schema: 1\nbases: [unclosed\n")
    assert "matrix.yaml:3" in message or "matrix.yaml:2" in message
    assert "malformed YAML" in message


def test_unknown_key_gives_path_line_and_did_you_mean() -> None:
    text = DEFAULT.replace("toolkits:\n", "toolkit_layers: {}\ntoolkits:\n", 1)
    message = error_of(text)
    assert "unknown key 'toolkit_layers'" in message
    assert "did you mean 'toolkits'" in message
    nested = DEFAULT.replace("  - {torch: 2.9.1, cuda: cu128}", "  - {torch: 2.9.1, cuda: cu128, idx: x}")
    message = error_of(nested)
    assert "torch_lanes.0.idx" in message and "did you mean 'index'" in message
    line = DEFAULT.splitlines().index("  - {torch: 2.9.1, cuda: cu128}") + 1
    assert f"line {line}:" in message


def test_wrong_type_and_empty_axis() -> None:
    assert "archs" in error_of(edited({"archs": "sm_90a"}))
    message = error_of(edited({"sglang": []}))
    assert "sglang" in message and "must not be empty" in message


def test_unknown_torch_flavour_lists_the_known_ones() -> None:
    message = error_of(edited({"torch_lanes": [{"torch": "2.11.0", "cuda": "cu999"}]}))
    assert "torch_lanes.0.cuda: unknown CUDA flavour 'cu999'; known: cu128, cu130" in message
    assert 'declare it under `cuda:` as `cu999: {version: "99.9"}`' in message


def test_cuda_flavours_are_data_checked_with_path_line_and_did_you_mean() -> None:
    declared = 'cu130: {version: "13.0"}'
    line = DEFAULT.splitlines().index(f"  {declared}") + 1
    lane = error_of(DEFAULT.replace("  - {torch: 2.14.1, cuda: cu130}", "  - {torch: 2.14.1, cuda: cu131}"))
    assert "torch_lanes.2.cuda: unknown CUDA flavour 'cu131'; did you mean 'cu130'?" in lane
    recipe = error_of(DEFAULT.replace('      cu130: ["cuda-toolkit', '      cu13: ["cuda-toolkit'))
    assert "toolkits.pip.pip.cu13: unknown CUDA flavour 'cu13'; did you mean 'cu130'?" in recipe
    assert "e.g. cu130 for CUDA 13.0" in recipe
    name = error_of(DEFAULT.replace(declared, 'cu13: {version: "13.0"}'))
    assert f"line {line}: cuda.cu13: 'cu13' is not a CUDA flavour name" in name
    version = error_of(DEFAULT.replace(declared, 'cu130: {version: "13.1"}'))
    assert f"line {line}: cuda.cu130.version: cu130 is CUDA 13.0, not 13.1" in version
    key = error_of(DEFAULT.replace(declared, 'cu130: {versoin: "13.0"}'))
    assert "cuda.cu130.versoin: unknown key 'versoin'; did you mean 'version'?" in key


def test_a_new_flavour_is_one_entry_and_leaves_the_other_cells_as_they_were() -> None:
    before = parse(DEFAULT)
    declared = '  cu130: {version: "13.0"}\n'
    lane = "  - {torch: 2.14.1, cuda: cu130}\n"
    text = (DEFAULT.replace(declared, declared + '  cu132: {version: "13.2"}\n')
            .replace(lane, lane + "  - {torch: 2.15.0, cuda: cu132}\n")
            .replace("  - {version: 0.5.23, torch: 2.14.1}\n", "  - {version: 0.5.23, torch: 2.14.1}\n"
                                                              "  - {version: 0.5.24, torch: 2.15.0}\n"))
    after = parse(text)
    new = {c.id: c for c in after.cells if c.id not in {old.id for old in before.cells}}
    assert {cid for cid, c in new.items() if c.excluded is None} == {"sglang0.5.24-torch2.15.0-cu132-none-bookworm"}
    assert new["sglang0.5.24-torch2.15.0-cu132-pip-bookworm"].excluded == "toolkit 'pip' has no recipe for cu132"
    assert new["sglang0.5.24-torch2.15.0-cu132-none-bookworm"].lane.cuda_version == "13.2"
    # declaring a flavour changes no cell of the others, nor the matrix digest of results made before it
    assert [c for c in after.cells if c.id in {old.id for old in before.cells}] == list(before.cells)
    declared_only = parse(DEFAULT.replace('  cu130: {version: "13.0"}\n',
                                          '  cu130: {version: "13.0"}\n  cu132: {version: "13.2"}\n'))
    assert results.matrix_digest(declared_only.spec) == results.matrix_digest(before.spec)


@pytest.mark.parametrize("arch", ["sm90", "compute_90", "sm_100x", "hopper"])
def test_arch_names_must_be_gpu_targets(arch: str) -> None:
    message = error_of(edited({"archs": ["sm_90a", arch]}))
    assert f"{arch!r} is not a GPU target" in message


def test_expected_failures_attach_to_matching_cells() -> None:
    cell = next(c for c in parse(DEFAULT).cells if c.id == "sglang0.5.16-torch2.11.0-cu130-none-bookworm")
    assert cell.expected is not None and cell.expected.failure_class == "cuda-home-missing"


def test_selection_globs_and_errors() -> None:
    cells = parse(DEFAULT).cells
    chosen = matrix.select(cells, only=["sglang0.5.16-*"])
    assert [c.toolkit_name for c in chosen] == ["none", "pip"]
    assert [c.id for c in matrix.select(cells, only=["sglang0.5.16-*"], skip=["*-none-*"])] == [
        "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]
    with pytest.raises(SelectionError, match="matches no buildable cell"):
        matrix.select(cells, only=["sglang9.9*"])
    with pytest.raises(SelectionError, match="excluded cell"):
        matrix.select(cells, only=["sglang0.5.16-torch2.9.1-*"])


def test_warm_names_server_profiles_with_did_you_mean() -> None:
    listed = DEFAULT.replace("    warm: true\n", "    warm: [default, flashinfer]\n", 1)
    pip = next(c for c in parse(listed).buildable() if c.toolkit_name == "pip")
    assert pip.toolkit.warm_profiles == ("default", "flashinfer")
    assert next(c for c in parse(DEFAULT).buildable() if c.toolkit_name == "pip").toolkit.warm_profiles == ("default",)
    message = error_of(DEFAULT.replace("    warm: true\n", "    warm: [default, flashinfr]\n", 1))
    assert "toolkits.pip.warm" in message and "unknown server profile 'flashinfr'" in message
    assert "did you mean 'flashinfer'" in message
    line = DEFAULT.splitlines().index("    warm: true") + 1
    assert f"line {line}:" in message
    for wrong in ("flashinfer", "3"):
        message = error_of(DEFAULT.replace("    warm: true\n", f"    warm: {wrong}\n", 1))
        assert "warm takes true, false or a list of server profiles" in message and f"line {line}:" in message
        assert "1 problem" in message
