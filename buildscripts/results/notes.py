"""What the probe said that does not decide a verdict: warnings from stages that passed (or failed for
another reason), and what it measured where it ran. Renderers and the console show them; `judge` never
reads them, so a warning can neither fail a cell nor stand in for a stage that did not run."""

from __future__ import annotations

from .record import CellResult


def warnings(cell: CellResult) -> list[tuple[str, str]]:
    """(stage, text) of what a passed or failed stage found that does not fail it, e.g. an optional
    extension that cannot load (the probe lists them under its evidence's `warnings`)."""
    found = []
    for stage in cell.stages:
        texts = stage.evidence.get("warnings")
        if isinstance(texts, list):
            found += [(stage.name, text) for text in texts if isinstance(text, str)]
    return list(dict.fromkeys(found))


def arch_code(cell: CellResult) -> list[tuple[str, str]]:
    """(what an arch runs, of which library) as the arch audit found it, one row per target or audited arch:
    ("sm_121a (target) runs", "sm_120 SASS (older minor) in sgl_kernel, torch; compute_90 PTX (JIT at start) in
    flashinfer"). Empty for a record made before the audit said it."""
    rows = []
    for stage in (s for s in cell.stages if s.name == "arch-audit"):
        lines = stage.evidence.get("summary")
        for line in lines if isinstance(lines, list) else []:
            if isinstance(line, str) and ": " in line:
                arch, said = line.split(": ", 1)
                rows.append((f"{arch} runs", said))
    return list(dict.fromkeys(rows))


def measured(cell: CellResult) -> list[tuple[str, str]]:
    """(what, value) the probe measured where it ran: /dev/shm (facts) and the GPU memory free when the GPU
    stages began (gpu-visible, per GPU arch)."""
    rows = []
    for stage in (s for s in cell.stages if s.name == "facts"):
        shm = stage.evidence.get("shm")
        if isinstance(shm, dict) and isinstance(shm.get("total_gib"), int | float):
            rows.append(("/dev/shm", f"{shm['total_gib']} GiB ({shm.get('fstype', 'file system unknown')}), "
                                     f"{shm.get('free_gib')} GiB free"))
        elif isinstance(shm, dict) and shm.get("error"):
            rows.append(("/dev/shm", f"not usable: {shm['error']}"))
    for stage in (s for s in cell.stages if s.name == "gpu-visible"):
        memory = stage.evidence.get("memory")
        if isinstance(memory, dict) and isinstance(memory.get("free_gib"), int | float):
            rows.append((f"GPU memory free at gpu-visible ({stage.gpu or 'GPU'}, {stage.arch or 'arch unknown'})",
                         f"{memory['free_gib']} of {memory.get('total_gib')} GiB"))
    return rows
