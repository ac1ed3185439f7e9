"""The signed, offline-verifiable report. Cryptography and policy never mix:

- `dsse`: DSSE envelopes over exact bytes (PAE, Ed25519 sign and verify, strict encode/decode).
  It knows nothing about what the payload says.
- `keys`: Ed25519 key generation, loading (file or environment variable), key ids and fingerprints.
- `statement`: the in-toto Statement v1 built from a results document and the run context
  (`RunContext`), serialised with RFC 8785.
- `signing`: results file -> DSSE envelope, the one path `gpuemu-ci sign` and the Action share.
- `verify_policy`: the verification procedure (`verify_report`: signature first), the parsing of
  verified bytes into typed claims, and composable expectations (repo, commit, age, artifact
  digests) checked only after the signature holds.
"""
