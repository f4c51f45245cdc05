"""The CI workflow's jobs, made from the cells and matrix.yaml's `runners:` (`nox -s matrix -- --github`, `--builds`).

- Build jobs: one per build runner. A platform with a build runner of its own (`runners.platforms.P.build`, a
  machine of that CPU) has its cells built there natively; the others' cells are built together on the `build`
  runner, another CPU's under QEMU emulation (docs/platforms.md). Without an arm64 build runner that is one job,
  as before the platform axis.
- Verify jobs: per cell, one per arch its platform gives a GPU runner (`archs`), else one on its platform's
  `default` GPU runners (arch `any`), else, for a platform other than linux/amd64, one CPU-only job on a runner of
  its CPU (arch `cpu`: GitHub's hosted `ubuntu-24.04-arm` unless `cpu:` says otherwise), else none. Each row says
  its cell's `platform` and the `machine` (`uname -m`) its runner must be: the job checks it before pulling.

linux/amd64's GPU runners are the top-level `default` and `archs`, every other platform's are under `platforms:`,
so that an H200 runner (amd64, sm_90a) and a GH200 runner (arm64, sm_90a) are never one key; `labels_cpus` reads
the CPU a label set asks for, which `checks` compares with the platform's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from .. import log, results
from . import definition
from .cells import Cell, Matrix
from .platforms import CPUS, Cpu, by_oci
from .schema import Runners

ANY_ARCH = "any"  # the `arch` of a job that runs on any runner with its platform's default GPU labels
CPU_ONLY = "cpu"  # the `arch` of a CPU-only verify job (no GPU runner for its platform): its GPU stages are skipped
MAIN_BUILD = "build"  # the id of the build job on the `build` runner (its run folder and artifact: results-build)
# GitHub's hosted Linux runners: `ubuntu-latest`, `ubuntu-24.04` (x64), `ubuntu-24.04-arm` (arm64)
HOSTED = re.compile(r"ubuntu-(?:latest|[0-9]+\.[0-9]+)(?P<arm>-arm)?", re.IGNORECASE)


def labels_cpus(labels: Sequence[str]) -> tuple[Cpu, ...]:
    """The CPUs `labels` ask for: a self-hosted runner's architecture label (X64, ARM64: GitHub gives every one its
    own; labels match in any case) or a hosted runner's name (ubuntu-24.04-arm). None: they do not say; two: no
    runner has them all (checks.py refuses both where it matters)."""
    found = {c.oci: c for c in CPUS for label in labels if label.casefold() == c.runner.casefold()}
    for label in labels:
        hosted = HOSTED.fullmatch(label)
        if hosted:
            cpu = by_oci("linux/arm64" if hosted["arm"] else "linux/amd64")
            found[cpu.oci] = cpu
    return tuple(found.values())


def build_jobs(cells: Sequence[Cell], runners: Runners) -> list[dict[str, object]]:
    """One build job per build runner, each with the ids of the cells it builds (`cells`, space-separated: the job
    passes each as `--only ID`) and their platforms; the `build` runner's job first, with the id `build`."""
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        own = runners.of(cell.platform).build is not None
        groups.setdefault(f"build-{cell.base.cpu.debian}" if own else MAIN_BUILD, []).append(cell)
    jobs: list[dict[str, object]] = []
    for job_id in sorted(groups, key=lambda i: (i != MAIN_BUILD, i)):
        group = groups[job_id]
        platforms = list(dict.fromkeys(c.platform for c in group))
        emulated = [p for p in platforms if p != "linux/amd64"] if job_id == MAIN_BUILD else []
        said = ", ".join(f"{p} (emulated)" if p in emulated else p for p in platforms)
        jobs.append({"id": job_id, "name": f"build {said}", "runs-on": list(runners.build_labels(group[0].platform)),
                     "platforms": " ".join(platforms), "cells": " ".join(c.id for c in group)})
    return jobs


def github_jobs(cells: Sequence[Cell], runners: Runners) -> list[dict[str, object]]:
    """The verify jobs of `cells` (the module's docstring says which), in cell order and `archs:` order."""
    jobs: list[dict[str, object]] = []
    quiet: list[str] = []
    for cell in cells:
        mine = runners.of(cell.platform)
        where = {"platform": cell.platform, "machine": cell.base.cpu.machine}
        if mine.archs:
            jobs.extend({"cell": cell.id, "arch": arch, "runs-on": list(mine.archs[arch]), **where,
                         "name": f"{cell.id} on {arch}"} for arch in cell.archs if arch in mine.archs)
        elif mine.default is not None:
            jobs.append({"cell": cell.id, "arch": ANY_ARCH, "runs-on": list(mine.default), **where, "name": cell.id})
        elif (cpu := runners.cpu_labels(cell.platform)) is not None:
            jobs.append({"cell": cell.id, "arch": CPU_ONLY, "runs-on": list(cpu), **where,
                         "name": f"{cell.id} on the CPU only"})
        else:
            quiet.append(cell.id)
    if quiet:
        log.warn(f"no verify job for {len(quiet)} cell(s), their platform has no GPU runner and its CPU-only job is "
                 f"turned off (runners.platforms.PLATFORM.cpu: false): {', '.join(quiet)}")
    return jobs


def staged_jobs(jobs: Sequence[dict[str, object]], paths: Sequence[Path], matrix: Matrix) -> list[dict[str, object]]:
    """The jobs of the cells the results at `paths` staged (one file per build job), each with `image`:
    `REPO@sha256:…` to verify. A cell that was not staged (it failed, or was expected to fail, a CPU stage) gets no
    job; nor does one whose record is stale (its cell's definition changed since: definition.stale), said once."""
    subjects: dict[str, str] = {}
    for path in paths:
        run = results.load(path)
        for record in run.cells:
            cell = matrix.cell(record.cell_id)
            why = definition.stale(record, cell, matrix.digest, run.matrix_digest) if cell else None
            if why:
                log.warn(f"{path}: {record.cell_id} gets no verify job: its staged record is stale: {why}")
            elif record.image.subject:
                subjects[record.cell_id] = record.image.subject
    return [{**job, "image": subjects[str(job["cell"])]} for job in jobs if str(job["cell"]) in subjects]
