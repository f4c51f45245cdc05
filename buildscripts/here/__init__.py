"""`sglang-images here`: on the machine that will run an image, which image fits it, whether that very digest was
verified on this GPU's arch, whether this driver runs it, and the lines to pull and run it here.

- `facts`: the one way this machine is read (a root folder and a command runner; recorded machines in tests);
- `reading`: the machine: CPU platform, GPUs and driver (nvidia-smi), Docker's GPU runtime, LXC, Proxmox;
- `candidates`: the images to choose among, from a registry (tags, index, labels) or a results file;
- `checked`: whether one was verified, asked as `check` asks it (trust/sources.py);
- `choosing`: which one fits this platform and GPU arch, verified, with a driver that meets its floor;
- `runlines`: the `docker run` and Proxmox lines; `readiness`: what the runtime lacks, with fixes;
- `answer`: the questions in order, each "no" with its fix, and the exit code; `show`: console and JSON.
The driver floors are data (data/driver-floors.yaml, driver_floors.py), shared with the preflight and the ladder.
"""
