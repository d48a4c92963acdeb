"""Linear transforms on slots by baby-step giant-step: the accumulation shared by bootstrapping's
CoeffToSlot/SlotToCoeff and the encrypted-inference server's diagonal matrix products."""
from __future__ import annotations

from hezk.threads import parallel


def bsgs_sum(ev, babies: dict, groups, rotate=None):
    """Sum over giant steps m of rot_m(sum over (i, pt) of babies[i] * pt), no rescale: the accumulation of a
    diagonal linear transform by baby-step giant-step (Halevi-Shoup 2014). ``ev``: any evaluator with mul, add
    and rotate; ``groups``: (m, pairs) items, each pairs an iterable of (baby step i, plaintext); ``rotate``
    (default ``ev.rotate``) applies the giant steps.  An evaluator with ``mul_plain_sum`` (the CPU one) sums each
    group's products in one accumulator (the same ciphertext); one with ``rotate_sum`` (the CPU one, when no
    ``rotate`` is given) sums the rotated groups with one ModDown for all giant steps (hoisted ModDown).  With an
    evaluator that declares ``thread_safe`` (the CPU one), the groups of the plain path run on the threads of
    ``hezk.threads`` (bit for bit the result of one thread; ``rotate`` must be safe to call from several threads)."""
    fused = getattr(ev, "mul_plain_sum", None)      # one fused multiply-add pass per term where offered

    def inner(pairs):
        if fused is not None:
            return fused((babies[i], plaintext) for i, plaintext in pairs)
        out = None
        for i, plaintext in pairs:
            product = ev.mul(babies[i], plaintext)
            out = product if out is None else ev.add(out, product)
        return out

    hoisted = getattr(ev, "rotate_sum", None) if rotate is None else None
    if hoisted is not None:     # one ModDown for every giant step (``rotate_sum``), groups drawn one at a time
        return hoisted((inner(pairs), m) for m, pairs in groups)
    rotate = ev.rotate if rotate is None else rotate

    def partial(items):
        total = None
        for m, pairs in items:
            term = inner(pairs)
            if m:
                term = rotate(term, m)
            total = term if total is None else ev.add(total, term)
        return total

    if not getattr(ev, "thread_safe", False):
        return partial(groups)
    # the giant steps are independent: contiguous runs of groups on the threads of hezk.threads (each draws its own
    # lazily encoded plaintexts, kernels inside run in that thread), their partial sums added in group order (exact
    # modular additions: the same residues as one thread's running sum)
    groups = list(groups)
    totals = parallel(lambda start, stop: partial(groups[start:stop]), len(groups))
    total = totals[0]
    for other in totals[1:]:
        total = ev.add(total, other)
    return total
