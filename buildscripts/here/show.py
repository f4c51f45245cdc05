"""`here`'s answer for people (a few lines, the answer first: rich, which honours NO_COLOR and a pipe) and for
machines (`--json`: one object on stdout, the words on stderr)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from ..lxc.gpu_checks import printable
from ..verify.gpus import Gpu
from .answer import Answer
from .choosing import Fit
from .reading import Machine, Problem


def shown(text: str) -> str:
    """Text from a registry, an image's labels or nvidia-smi, for a terminal: its markup and control characters
    (terminal escapes) shown, never acted on."""
    return escape(printable(text))


def machine_words(machine: Machine) -> str:
    if machine.gpus:
        names = sorted({f"{sum(g.name == h.name for h in machine.gpus)}× {g.name} ({g.arch})" for g in machine.gpus})
        gpus = f"{', '.join(names)}, driver {machine.gpus[0].driver}"
    else:
        gpus = "no GPU read"
    return f"{machine.platform}, {gpus}; {machine.runtime_words()}"


def headline(answer: Answer) -> str:
    fit = answer.choice.chosen if answer.choice else None
    if answer.error is None and fit is not None:
        return (f"[green]✓[/] {shown(fit.candidate.shown)} fits this machine, was verified on "
                f"{shown(fit.target or '')} and this driver runs it")
    return f"[red]✕[/] no verified image for this machine: {shown(answer.noes[0].said)}"


def _image(fit: Fit) -> str:
    c = fit.candidate
    facts = [c.platform_digest and f"{c.repository}@{c.platform_digest}", c.cell and f"cell {c.cell}",
             c.cuda and f"CUDA {c.cuda}", fit.target and f"target {fit.target}"]
    return "; ".join(f for f in facts if f)


def show(answer: Answer, console: Console) -> None:
    console.print(headline(answer))
    rows = [("machine", machine_words(answer.machine))]
    if answer.gpu is not None and len({g.arch for g in answer.machine.gpus}) > 1:
        rows.append(("gpu", f"answering for GPU {answer.gpu.index}, {answer.gpu.name} ({answer.gpu.arch}); "
                            "--gpu INDEX answers for another"))
    fit = answer.choice.chosen if answer.choice else None
    if fit is not None:
        rows.append(("image", _image(fit)))
        if answer.choice and answer.choice.verification:
            rows.append(("verdict", answer.choice.verification.said))
        if fit.driver:
            rows.append(("driver", fit.driver.said))
    for name, text in rows:
        console.print(f"  [dim]{name:<8}[/]{shown(text)}")
    lines = answer.lines
    if lines is not None:
        for title, body in (("Pull and run it with Docker:", lines.docker),
                            ("On the Proxmox host:", lines.proxmox),
                            (f"In {lines.ct_config_path} (then restart the CT):", lines.ct_config)):
            if body:
                console.print(f"[bold]{shown(title)}[/]")
                for line in body:
                    console.print(f"  {shown(line)}")
    for mark, problem in [*(("[red]✕[/]", p) for p in answer.noes), *(("[yellow]![/]", p) for p in answer.runtime)]:
        console.print(f"{mark} {shown(problem.what)}: {shown(problem.said)}\n  [bold]fix:[/] {shown(problem.fix)}")


def _gpu(gpu: Gpu) -> dict[str, Any]:
    return {"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid, "arch": gpu.arch, "capability": gpu.capability,
            "driver": gpu.driver, "memory_mib": gpu.memory_mib}


def _problem(problem: Problem) -> dict[str, str]:
    return {"what": problem.what, "said": problem.said, "fix": problem.fix}


def _fit(fit: Fit) -> dict[str, Any]:
    c = fit.candidate
    return {"shown": c.shown, "tag": c.tag, "reference": c.reference, "platform_digest": c.platform_digest,
            "platforms": list(c.platforms), "cell": c.cell, "sglang": c.sglang, "cuda": c.cuda,
            "targets": list(c.targets), "target": fit.target, "fits": fit.fits, "why_not": fit.why_not,
            "described_by": c.described_by,
            "driver": None if fit.driver is None else {"driver": fit.driver.driver, "floor": fit.driver.floor.minimum,
                                                       "meets": fit.driver.meets, "said": fit.driver.said}}


def _machine(machine: Machine) -> dict[str, Any]:
    docker = machine.docker
    lxc = machine.lxc
    return {"platform": machine.platform, "gpus": [_gpu(g) for g in machine.gpus], "nodes": list(machine.nodes),
            "docker": None if docker is None else {"gpu_runtime": docker.runtime, "warnings": list(docker.warnings)},
            "lxc": None if lxc is None else {"unprivileged": lxc.unprivileged, "uid_map": lxc.uid_map,
                                             "shm_bytes": lxc.shm_bytes, "loopback_up": lxc.loopback_up},
            "proxmox_host": machine.proxmox_host}


def as_json(answer: Answer) -> dict[str, Any]:
    choice = answer.choice
    verification = choice.verification if choice else None
    lines = answer.lines
    return {
        "exit_code": answer.exit_code, "source": answer.asked.source, "machine": _machine(answer.machine),
        "gpu": None if answer.gpu is None else _gpu(answer.gpu),
        "chosen": None if choice is None or choice.chosen is None else _fit(choice.chosen),
        "verification": None if verification is None else {"verified": verification.verified,
                                                             "said": verification.said},
        "noes": [_problem(p) for p in answer.noes], "runtime": [_problem(p) for p in answer.runtime],
        "lines": None if lines is None else {"docker": list(lines.docker), "proxmox": list(lines.proxmox),
                                             "ct_config": list(lines.ct_config),
                                             "ct_config_path": lines.ct_config_path},
        "considered": [] if choice is None else [_fit(f) for f in choice.considered],
    }
