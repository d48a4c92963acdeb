"""Linear transforms on slots by baby-step giant-step: the accumulation shared by bootstrapping's
CoeffToSlot/SlotToCoeff and the encrypted-inference server's diagonal matrix products."""
from __future__ import annotations


def bsgs_sum(ev, babies: dict, groups, rotate=None):
    """Sum over giant steps m of rot_m(sum over (i, pt) of babies[i] * pt), no rescale: the accumulation of a
    diagonal linear transform by baby-step giant-step (Halevi-Shoup 2014). ``ev``: any evaluator with mul, add
    and rotate; ``groups``: (m, pairs) items, each pairs an iterable of (baby step i, plaintext); ``rotate``
    (default ``ev.rotate``) applies the giant steps."""
    rotate = ev.rotate if rotate is None else rotate
    total = None
    for m, pairs in groups:
        inner = None
        for i, plaintext in pairs:
            product = ev.mul(babies[i], plaintext)
            inner = product if inner is None else ev.add(inner, product)
        if m:
            inner = rotate(inner, m)
        total = inner if total is None else ev.add(total, inner)
    return total
