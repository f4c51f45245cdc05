"""Who vouches for a result: signed records and signed verdicts (DSSE envelopes, ECDSA P-256).

- `dsse`: sign and verify one envelope (the format cosign reads and writes).
- `keys`: the signing key of this verifier and the public keys a command trusts.
- `seal`: a cell's results record sealed by the verifier that made it, and checked before any use.
- `statement`: the in-toto test-result Statement per cell and arch, attached to the image digest.
- `verdicts`: those Statements signed on the verify side, attached by the promote job, opened by `check`.
- `cosign`: the registry client for them (attach, download).
"""
