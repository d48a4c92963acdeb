"""Help texts of the options that the command line and the HTTP server share (``--params``, ``--bootstrap``,
``--memory-budget``): written once, imported by :mod:`tensor_ops.cli_args` and :mod:`tensor_ops.serve`, which
import nothing of each other's."""

PARAMS_HELP = ("CKKS parameters instead of the automatic choice: a preset name (N13, N14, N15, N16, N16_BOOT; "
               "TOY is an insecure test ring) or a JSON file of a parameter literal (log_n, log_q, log_p, log_scale, "
               "dnum, ...) or of CKKSParameters.to_dict, optionally with \"bootstrap\": {BootstrapConfig fields}, "
               "or a parameters record (CKKSParameters.to_bytes); clients and server must use the same")
BOOTSTRAP_HELP = ("bootstrap when the model is deeper than the parameters' levels (--bootstrap: take bootstrappable "
                  "parameters, N16_BOOT unless --params names others; --no-bootstrap: never, refuse a model too "
                  "deep). Default: the smallest secure parameters without bootstrapping, or N16_BOOT with "
                  "bootstraps placed for a model deeper than the deepest secure preset's levels")
MEMORY_HELP = ("peak resident bytes the command may use, e.g. 8GiB (default 80%% of the machine's available memory, "
               "read at run time); a plan whose estimated peak exceeds it is refused before any work, naming the "
               "figure and what to change; local infer trades Galois keys for memory first")
