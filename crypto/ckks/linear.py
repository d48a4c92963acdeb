"""Linear transforms on slots by baby-step giant-step: the accumulation shared by bootstrapping's
CoeffToSlot/SlotToCoeff and the encrypted-inference server's diagonal matrix products."""
from __future__ import annotations


def bsgs_sum(ev, babies: dict, groups, rotate=None):
    """Sum over giant steps m of rot_m(sum over (i, pt) of babies[i] * pt), no rescale: the accumulation of a
    diagonal linear transform by baby-step giant-step (Halevi-Shoup 2014). ``ev``: any evaluator with mul, add
    and rotate; ``groups``: (m, pairs) items, each pairs an iterable of (baby step i, plaintext); ``rotate``
    (default ``ev.rotate``) applies the giant steps.  An evaluator with ``mul_plain_sum`` (the CPU one) sums each
    group's products in one accumulator (the same ciphertext)."""
    rotate = ev.rotate if rotate is None else rotate
    fused = getattr(ev, "mul_plain_sum", None)      # one fused multiply-add pass per term where offered
    total = None
    for m, pairs in groups:
        inner = None
        if fused is not None:
            inner = fused((babies[i], plaintext) for i, plaintext in pairs)
        else:
            for i, plaintext in pairs:
                product = ev.mul(babies[i], plaintext)
                inner = product if inner is None else ev.add(inner, product)
        if m:
            inner = rotate(inner, m)
        total = inner if total is None else ev.add(total, inner)
    return total
