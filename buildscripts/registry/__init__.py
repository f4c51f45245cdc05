"""The registry: manifests read back and copied by digest (skopeo), images pushed and pulled through the engine,
references and their hosts, the one registry deadline and the words of a failed request, and the lock a
promotion holds on a repository.

Below trust/ (which reads manifests and their verdicts) and above results/; everything that crosses a registry
is addressed by digest, and every digest is read back from the registry, never taken from a push's output alone.
"""
