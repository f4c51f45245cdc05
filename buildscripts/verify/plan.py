"""Planning a verification: which stages run, for which target archs and torch lane, with which server
profile, and how long the host waits for each stage. The same plan drives every runner (container,
host) and becomes the probe's command line."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..matrix.schema import LABEL_PREFIX, Profile, TinyModelName
from ..matrix.spellings import flavour_version
from ..probe import __main__ as probe_main  # registers every stage, as in the image
from ..probe import core

del probe_main
DEFAULT_ARCHS = ("sm_90a", "sm_100a", "sm_120a")
MIN_STAGE_TIMEOUT = 900.0


def stages_argument(text: str | None, flag: str = "--stages") -> list[str] | None:
    """The one check of a comma-separated stage list a user gives (`verify`, `build`): None (all) when not
    given; an empty or unknown name is a ConfigError before anything runs."""
    if text is None:
        return None
    names = text.split(",")
    if not all(name.strip() for name in names):
        msg = f"{flag} {text!r} names an empty stage"
        raise ConfigError(msg, hint=f"give comma-separated stage names, e.g. {flag} facts,import; or leave "
                                    f"{flag} out for the whole ladder")
    planned_stages(names)  # raises ConfigError naming the unknown ones
    return names


def stage_timeout(profile: Profile, given: float | None = None) -> float:
    """The one stage-timeout rule: `given` (--stage-timeout), else 900 s, or the server profile's timeout
    when that is longer (a server stage must not be cut short by the deadline of the stages around it)."""
    return float(given) if given else max(MIN_STAGE_TIMEOUT, float(profile.timeout_s))


def planned_stages(stages: Sequence[str] | None) -> list[str]:
    """The stages that will run, in ladder order (all registered ones by default)."""
    wanted = list(stages) if stages else list(core.ORDER)
    unknown = [s for s in wanted if s not in core.REGISTRY]
    if unknown:
        msg = f"unknown stage(s): {', '.join(unknown)}"
        raise ConfigError(msg, hint="known stages, in order: " + ", ".join(n for n in core.ORDER if n in core.REGISTRY))
    return [s for s in core.ORDER if s in wanted]


def grace(stage_timeout: float) -> float:
    """Extra time the host waits beyond a stage's own timeout before it declares the probe hung."""
    return min(60.0, 10.0 + stage_timeout * 0.1)


@dataclass(frozen=True, kw_only=True)
class Plan:
    archs: tuple[str, ...]
    also_archs: tuple[str, ...] = ()        # audited and compiled for, never failing (matrix.yaml also_audit)
    lane_cuda: str | None                   # CUDA major.minor the torch lane promises, e.g. "13.0"
    stages: tuple[str, ...]                 # planned, in ladder order
    stage_timeout: float = MIN_STAGE_TIMEOUT
    server_args: tuple[str, ...] = ()
    server_env: Mapping[str, str] = field(default_factory=dict)
    server_profile: str = "default"         # its name: an image's baked caches are per profile
    server_skip: str | None = None          # why the server stage is skipped by the host's decision (tp.py)
    server_model: TinyModelName = "llama"   # the tiny model the host makes for the server (the profile's)

    @classmethod
    def make(cls, *, archs: Sequence[str], lane_cuda: str | None, stages: Sequence[str] | None = None,
             stage_timeout: float = MIN_STAGE_TIMEOUT, profile: Profile | None = None,
             profile_name: str = "default", also_archs: Sequence[str] = ()) -> Plan:
        profile = profile or Profile()
        also = tuple(a for a in dict.fromkeys(also_archs) if a not in archs)
        return cls(archs=tuple(archs), also_archs=also, lane_cuda=lane_cuda, stages=tuple(planned_stages(stages)),
                   stage_timeout=stage_timeout, server_args=tuple(profile.args), server_env=dict(profile.env),
                   server_profile=profile_name, server_model=profile.model)

    @property
    def deadline(self) -> float:
        """Seconds the host waits for one stage's result."""
        return self.stage_timeout + grace(self.stage_timeout)

    def probe_args(self, mode: str) -> list[str]:
        args = ["--archs", ",".join(self.archs), "--stages", ",".join(self.stages),
                "--stage-timeout", str(self.stage_timeout), "--mode", mode,
                "--server-args", json.dumps(list(self.server_args)), "--server-env", json.dumps(dict(self.server_env)),
                "--server-profile", self.server_profile]
        args += ["--also-archs", ",".join(self.also_archs)] if self.also_archs else []
        args += ["--server-skip", self.server_skip] if self.server_skip else []
        return args + (["--lane-cuda", self.lane_cuda] if self.lane_cuda else [])


def lane_from_labels(labels: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """(lane CUDA, archs) from the labels this project's builds put on an image."""
    flavour = labels.get(f"{LABEL_PREFIX}.cuda")
    return flavour_version(flavour or ""), labels.get(f"{LABEL_PREFIX}.archs", "").split()
