"""Build and verify SGLang container images (see README.md). Import nothing heavy here: the probe
subpackage must run with a bare Python."""
