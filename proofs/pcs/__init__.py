"""Polynomial commitments: the shared parts (Merkle trees, Reed–Solomon encoding) and one interface.

- :mod:`proofs.pcs.merkle`: BLAKE2b-256 leaf/node hashing, Merkle levels, multi-proofs, the root from a path.
- :mod:`proofs.pcs.reed_solomon`: the radix-2 NTT over F_p and the RS encodings Ligero and Basefold share.
- :mod:`proofs.pcs.scheme`: the :class:`~proofs.pcs.scheme.CommitmentScheme` protocol, one object per scheme
  (Ligero, hiding Ligero, Basefold, hiding Basefold) and :func:`~proofs.pcs.scheme.scheme_of`.

The schemes themselves stay in :mod:`proofs.commit`, :mod:`proofs.zk`, :mod:`proofs.basefold` and
:mod:`proofs.basefold_zk`, which import the shared parts from here (this package imports nothing at import
time, so those modules can import its submodules without a cycle).
"""
