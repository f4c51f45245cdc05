"""python -m probe --archs sm_90a,sm_100a [--also-archs sm_103a] --lane-cuda 13.0 [--stages a,b] [--out FILE]
    [--mode host] [--model-dir DIR --stop-file FILE [--cut-network]]   (the host's side of the server stages)"""

from __future__ import annotations

import argparse
import json
import sys

# Importing the stage modules registers their stages.
from . import allreduce, core, cpu_stages, gpu_stages, serving  # noqa: F401


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(prog="probe")
    ap.add_argument("--archs", default="sm_90a,sm_100a,sm_120a")
    ap.add_argument("--also-archs", default="", help="archs audited and compiled for, never failing (sm_103a,...)")
    ap.add_argument("--lane-cuda", default=None, help="CUDA major.minor of the torch lane, e.g. 13.0")
    ap.add_argument("--stages", default=",".join(core.ORDER))
    ap.add_argument("--mode", choices=["container", "host", "lxc"], default="container")
    ap.add_argument("--workdir", default="/tmp/probe")
    ap.add_argument("--stage-timeout", type=float, default=900.0)
    ap.add_argument("--server-args", default="[]", help="JSON list of sglang.launch_server flags")
    ap.add_argument("--server-env", default="{}", help="JSON object of env vars for the server")
    ap.add_argument("--server-profile", default="default", help="the profile's name in matrix.yaml")
    ap.add_argument("--server-skip", default=None, help="the host's reason not to start this profile's server")
    ap.add_argument("--model-path", default=None, help="a model to serve as it is (no reference)")
    ap.add_argument("--model-dir", default=None, help="the host's tiny model; the probe adds the tokenizer")
    ap.add_argument("--stop-file", default=None, help="the host creates it once it has observed the server")
    ap.add_argument("--cut-network", action="store_true", help="start the server with no route out")
    ap.add_argument("--serve-host", default="127.0.0.1", help="the address the server listens on")
    ap.add_argument("--out", default=None, help="also write all results as JSON to this file")
    a = ap.parse_args(argv)
    ctx = core.Context(
        archs=[x for x in a.archs.split(",") if x],
        also_archs=[x for x in a.also_archs.split(",") if x and x not in a.archs.split(",")],
        lane_cuda=a.lane_cuda, mode=a.mode, workdir=a.workdir,
        stage_timeout=a.stage_timeout, server_args=json.loads(a.server_args),
        server_env=json.loads(a.server_env), server_profile=a.server_profile, server_skip=a.server_skip,
        model_path=a.model_path,
        model_dir=a.model_dir, stop_file=a.stop_file, cut_network=a.cut_network, serve_host=a.serve_host,
    )
    unknown = [s for s in a.stages.split(",") if s and s not in core.REGISTRY]
    if unknown:
        sys.stderr.write(f"probe: unknown stage(s) {', '.join(unknown)}; known: {', '.join(core.REGISTRY)}\n")
        return 2
    core.run_all(ctx, [s for s in a.stages.split(",") if s], a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
