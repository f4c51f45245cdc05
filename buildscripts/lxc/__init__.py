"""LXC: one container as this machine reaches it (`pct` on Proxmox, `lxc-attach` elsewhere), its config file,
the fix hints in its words, and the read-only preflight of an LXC host; `pct` command lines for an exported image.

Below verification and publishing, which both use it: the runner that puts the probe in a container is
verification's (verify/lxcrunner.py), and nothing here reaches up into it.
"""
