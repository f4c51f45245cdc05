"""What a user can check besides the verdict: an SBOM made from the built image itself, and the build's SLSA
provenance, each an in-toto Statement for the image's platform manifest, signed with the verifier's key and
attached to that digest beside the verdicts (docs/trust.md, "What the image holds, and how it was built")."""
