"""Verifying: planning the ladder, the runners (container, host), GPUs, reading probe output (once) and
classifying failures. The probe itself (standard library only) lives beside this package in `probe/`.

Fourth step of the flow: it reads images (built) and writes stage results.
"""
