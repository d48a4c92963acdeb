"""Which commitment scheme a proof of inference uses when none is named: one rule for every command and API.

The default is the smallest proof that meets the soundness floor (every scheme here is set for >= 100 bits, the
verifiers' floor) where its commitment stays affordable, measured on one CPU core (batch 1):

- a **hiding ReLU MLP** proven by the MLP proof (:mod:`proofs.layers.network`): hiding Basefold, whose proofs are
  2.7x smaller than hiding Ligero's (16->16->4: 92 kB against 250 kB) and verify in half the time (24 against 46
  ms), for about the same prover time (93 against 85 ms) -- up to :data:`AUTO_BASEFOLD_MAX_PARAMETER_COPIES`
  parameters x hiding copies: Basefold's hiding commitment and prover state grow ~40x faster than Ligero's
  (784->64->10 with 16 copies: 46 s, a 58 MB commitment and a 1.1 GB state against 1.7 s, 3.9 MB and 31 MB), so
  a larger MLP stays on Ligero;
- a **graph model** (convolutions, pools, residual adds, lookups; and a ReLU MLP whose input is hidden, which only
  the graph proof proves): hiding Ligero, the smaller proof there (a small CNN: 436 kB against Basefold's 3.7 MB,
  proved 25x faster; a 30->16->1 MLP by the graph proof: 273 kB against 316 kB; those Basefold figures are the
  slot layout's). ``--scheme basefold`` on a graph takes :func:`proofs.layers.graph_zk.graph_basefold_params`
  (the tail layout for large stores, lookups included, with a 12-bit proof of work before the folds): transformer
  proofs 2-4x smaller for 1.7-3.7x the prove CPU (one core, issue 34: the 16 x 32 layer 0.92 -> 0.42 MB, BERT-tiny
  1.46 -> 0.50 MB, the GPT-2-small block 3.15 MB in 4.8-5.8 s -> 0.88 MB in 11.0-12.2 s, the stores committing
  their tensors' real boxes), and each hiding copy of its weights costs ~40x Ligero's to
  commit and hold (16 copies of the GPT-2-small block would need ~21 GiB at once), so Ligero stays the default;
- **public weights**: Ligero (plain Basefold pays off only for large MLPs at large batches: 784->1024->256->10 at
  batch 64, 267 against 1747 kB, for 2.4x the prover time).

The prover-time trade: the default never costs more than ~1.1x Ligero's prover time; ``scheme="basefold"``
(``--scheme basefold``) buys smaller proofs of large public-weights MLPs for 1.4-2.4x the prover time, and
``scheme="ligero"`` the fastest prover and commitment. :func:`choose_scheme` is the rule; ``hezk commit``
(``proofs.cli``), :func:`hezk.commit`, :class:`proofs.Network` and
:class:`proofs.layers.graph_zk.HidingGraphNetwork` all call it. Bottom module: imports nothing of proofs but
its error type.
"""
from __future__ import annotations

from ..errors import ModelError

__all__ = ["AUTO", "SCHEMES", "STRATEGIES", "AUTO_BASEFOLD_MAX_PARAMETER_COPIES", "choose_scheme"]

AUTO = "auto"  #: the scheme name that asks for :func:`choose_scheme`'s default
SCHEMES = ("ligero", "basefold")  #: the schemes a caller may name
STRATEGIES = ("mlp", "graph")  #: the proof of inference: the MLP proof of a ReLU MLP, or the graph proof
#: the auto rule takes hiding Basefold for an MLP proof of at most this many parameters x hiding copies (a prover
#: state of ~180 MB); beyond, Ligero
AUTO_BASEFOLD_MAX_PARAMETER_COPIES = 1 << 17


def choose_scheme(scheme: str | None = AUTO, *, strategy: str, hiding: bool, parameter_copies: int = 0) -> str:
    """The commitment scheme, "ligero" or "basefold": ``scheme`` itself when it names one, else (None or "auto")
    the smallest proof at the soundness floor (module docstring): "basefold" for a hiding ``strategy="mlp"``
    commitment of at most :data:`AUTO_BASEFOLD_MAX_PARAMETER_COPIES` ``parameter_copies`` (parameters x
    hiding copies), "ligero" otherwise. ModelError naming ``scheme`` or ``strategy`` for any other value."""
    if strategy not in STRATEGIES:
        raise ModelError(f"strategy={strategy!r} must be one of {STRATEGIES}")
    if scheme is None or scheme == AUTO:
        small = parameter_copies <= AUTO_BASEFOLD_MAX_PARAMETER_COPIES
        return "basefold" if hiding and strategy == "mlp" and small else "ligero"
    if scheme not in SCHEMES:
        raise ModelError(f"scheme={scheme!r} must be 'auto', 'ligero' or 'basefold'")
    return scheme
