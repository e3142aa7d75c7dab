r"""Compiled kernels of the grouping (numba). Private: they trust their inputs.

Vocabulary (all arrays int-encoded, see :mod:`stream_release.core.table`):

``qid`` (n, d) int32, ``sens`` (n,) int32 local value codes, ``protected`` (V,) bool,
``base`` the ratio required of a pair with no history, ``ex_ptr/ex_val/ex_req`` a CSR over rows
of the pairs (row, value) whose required ratio exceeds ``base`` (``inf`` = may never share a
group with that value), ``min_size`` the k-anonymity floor.

A group G is *valid* iff ``|G| >= min_size`` and, for every protected value t present,
``|G| >= n(G,t) * R(G,t)`` with ``R(G,t) = max(base, max_{o in G} req(o,t))`` (the ratios
carry the margin on the safe side where they are Theorem 1's own bound:
:mod:`stream_release.core.privacy.strategy`)
(Wong et al. 2010, Theorem 1 and §6, in the engineering form of the research digest §4).

Algorithm (three passes, each QID-local):

1. ``mondrian_leaves``: top-down median splits on the widest normalised attribute, relaxed by
   moving the excess rows of an over-represented value across the cut (``_balance``), taken only
   when both halves are valid as whole groups (a set can be cut into valid groups only if it is
   valid as one group: the per-value counts add up) under ``m = ceil(max(base, min_size))``
   where the rows meet it, else under ``base`` (``_split_ratio``: groups of ``m`` rows absorb a
   top share of ``1/m``, so a leaf cut down to ``1/base`` left its excess over; on a million
   rows of the scale benchmark that was 0.36-0.72 % of each release before any history).
   A leaf of at least :data:`STRATIFIED_FROM` rows that no such cut splits is cut value by
   value (``_stratified``: each value's lower half by the widest attribute to the left, the
   sizes set so that a leaf whose top share is exactly ``1/m`` splits into halves that are):
   without it, at a million rows, leaves of up to 282k rows held 69 % of the rows.
   Leaves are QID boxes (a value-balanced cut's halves may overlap on its attribute); their
   rows are laid out in k-d order in ``perm``.
2. ``bucketize``: inside each leaf, Anatomy-style (Xiao & Tao 2006): sweep the leaf in k-d
   order; a group starts at the next protected row and adds the compatible row (a new value for
   protected ones) that grows its QID box least, critical values first, until it is valid. A
   group that cannot be completed goes to the leftovers; unprotected rows left over form
   groups of ``min_size``.
3. ``insert_leftovers``: leftovers are bucketized together, then each row still left is inserted
   into the nearest group (in k-d order) that stays valid with it and within the cap; a row
   that fits nowhere is suppressed (``-1``). No pass grows a group past ``cap``.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _extent(a, lo, hi, height, span_lo, span_hi):
    """Codes covered by the published value of code range ``[lo, hi]``, minus one.

    Numeric and set attributes (``height[a] == 0``) publish the range itself; a hierarchy
    attribute publishes the lowest common ancestor, whose leaves form the code range
    ``span_lo[a, h, c] .. span_hi[a, h, c]`` at its level ``h`` (depth-first leaf order).
    (A precomputed (leaves x leaves) table was measured 3x slower: cache misses.)
    """
    if height[a] == 0:
        return hi - lo
    for h in range(height[a]):
        if span_lo[a, h, lo] == span_lo[a, h, hi]:
            return span_hi[a, h, lo] - span_lo[a, h, lo]
    return span_hi[a, height[a] - 1, lo] - span_lo[a, height[a] - 1, lo]


@njit(cache=True)
def _hierarchy_cut(a, lo, hi, vals, height, span_lo, span_hi):
    """Threshold at a child boundary of the range's lowest common ancestor, nearest the median.

    ``vals`` are the node's sorted codes on attribute ``a``; returns -1 if no boundary splits
    them. Cutting there gives both halves a lower common ancestor (a smaller NCP).
    """
    size = vals.shape[0]
    level = height[a] - 1
    for h in range(height[a]):
        if span_lo[a, h, lo] == span_lo[a, h, hi]:
            level = h
            break
    if level == 0:
        return -1
    best = -1
    best_gap = size
    c = lo
    while c < hi:
        end = span_hi[a, level - 1, c]  # last leaf of c's child node
        if end >= hi:
            break
        n_left = np.searchsorted(vals, end, side="right")
        if 0 < n_left < size:
            gap = abs(2 * n_left - size)
            if gap < best_gap:
                best_gap = gap
                best = end
        c = end + 1
    return best


@njit(cache=True)
def _sorted_codes(perm, lo, hi, qid, a, c_min, c_max):
    """Attribute ``a``'s codes of rows ``perm[lo:hi]``, ascending (counting sort when the code
    range is small, else a comparison sort)."""
    size = hi - lo
    out = np.empty(size, np.int64)
    span = c_max - c_min + 1
    if span <= 4 * size:
        counts = np.zeros(span, np.int64)
        for i in range(lo, hi):
            counts[qid[perm[i], a] - c_min] += 1
        k = 0
        for c in range(span):
            for _ in range(counts[c]):
                out[k] = c_min + c
                k += 1
        return out
    for i in range(size):
        out[i] = qid[perm[lo + i], a]
    out.sort()
    return out


@njit(cache=True)
def _allowed(n, base):
    """Largest count of one protected value a group of ``n`` rows may hold."""
    return int(np.floor(n / base))


@njit(cache=True)
def _balance(perm, lo, mid, hi, qid, a, sens, protected, base, min_size, cnt_l, cnt_r):
    """Relaxed cut: move the excess rows of over-represented protected values across ``mid``.

    After a median cut on attribute ``a`` one half may hold more of a value than any valid
    grouping of it allows (``n_s > n / base``). Rows of that value nearest the cut (largest
    code on the left, smallest on the right) are moved to the other half until both halves are
    within their allowance or no move helps. Returns the new ``mid`` and whether both halves
    are valid as whole groups (at least ``min_size`` rows, every protected count allowed).
    """
    for i in range(lo, hi):
        v = sens[perm[i]]
        if protected[v]:
            if i < mid:
                cnt_l[v] += 1
            else:
                cnt_r[v] += 1
    for _ in range(8):
        moved = False
        # left -> right
        cap = _allowed(mid - lo, base)
        i = mid - 1
        while i >= lo:
            v = sens[perm[i]]
            if protected[v] and cnt_l[v] > cap:
                r = perm[i]
                perm[i] = perm[mid - 1]
                perm[mid - 1] = r
                mid -= 1
                cnt_l[v] -= 1
                cnt_r[v] += 1
                cap = _allowed(mid - lo, base)
                moved = True
            i -= 1
            if i >= mid:
                i = mid - 1
        # right -> left
        cap = _allowed(hi - mid, base)
        j = mid
        while j < hi:
            v = sens[perm[j]]
            if protected[v] and cnt_r[v] > cap:
                r = perm[j]
                perm[j] = perm[mid]
                perm[mid] = r
                mid += 1
                cnt_r[v] -= 1
                cnt_l[v] += 1
                cap = _allowed(hi - mid, base)
                moved = True
            j += 1
            if j < mid:
                j = mid
        if not moved:
            break
    n_l = mid - lo
    n_r = hi - mid
    ok = n_l >= max(min_size, 1) and n_r >= max(min_size, 1)
    for i in range(lo, hi):
        v = sens[perm[i]]
        if ok and protected[v] and (n_l < cnt_l[v] * base or n_r < cnt_r[v] * base):
            ok = False
        cnt_l[v] = 0
        cnt_r[v] = 0
    return mid, ok


@njit(cache=True)
def _split_ratio(perm, lo, hi, sens, protected, base, min_size, cnt):
    """The ratio both halves of a cut of ``perm[lo:hi]`` must meet: ``m = ceil(max(base, k))``
    when the rows meet it (groups of ``m`` rows, one of each protected value, absorb a share
    of ``1/m``; a leaf whose top share lies between ``1/m`` and ``1/base`` leaves the excess
    over), else ``base``. ``cnt`` is a zeroed scratch array of size V, zeroed again."""
    m = np.ceil(max(base, float(min_size)))
    top = 0
    for i in range(lo, hi):
        v = sens[perm[i]]
        if protected[v]:
            cnt[v] += 1
            if cnt[v] > top:
                top = cnt[v]
    for i in range(lo, hi):
        cnt[sens[perm[i]]] = 0
    return m if top * m <= hi - lo else base


STRATIFIED_FROM = 1024
"""Leaves of at least this many rows that no cut at one code can split are cut value by value
(:func:`_stratified`): on the first release of the scale benchmark at a million rows, leaves
above 10k rows held 69 % of the rows (up to 282k rows each), each stopped where its top value's
share made every median cut infeasible."""


@njit(cache=True)
def _stratified(perm, lo, hi, qid, a, sens, protected, ratio, min_size, cnt, take, tmp):
    """Value-balanced cut of ``perm[lo:hi]`` on attribute ``a``: each value's rows go half to
    each side, the lower codes of the value to the left, so both halves keep the leaf's
    proportions (within one row per value) where no cut at one code does. An odd value's
    extra row goes to the side with more room for it (tightest values first). Reorders
    ``perm[lo:hi]`` (left half first) and returns ``(mid, ok)``: ``ok`` when both halves
    have ``min_size`` rows and every protected count within ``floor(n / ratio)``; ``perm`` is
    left as it was otherwise. ``cnt`` and ``take`` are zeroed scratch arrays of size V,
    zeroed again; ``tmp`` scratch of at least ``hi - lo`` rows."""
    size = hi - lo
    codes = np.empty(size, np.int64)
    for i in range(size):
        codes[i] = qid[perm[lo + i], a]
    order = np.argsort(codes, kind="mergesort")
    for i in range(size):
        cnt[sens[perm[lo + i]]] += 1
    n_left = 0
    n_values = cnt.shape[0]
    for v in range(n_values):
        take[v] = cnt[v] // 2
        n_left += take[v]
    # odd values: the extra row to the side with more room, the tightest values first
    odd = np.empty(n_values, np.int64)
    n_odd = 0
    for v in range(n_values):
        if cnt[v] % 2 == 1:
            odd[n_odd] = v
            n_odd += 1
    weight = np.empty(n_odd, np.float64)
    for k in range(n_odd):
        weight[k] = -cnt[odd[k]]
    ranked = np.argsort(weight, kind="mergesort")
    n_right = size - n_left  # every extra row on the right for now
    for k in range(n_odd):
        v = odd[ranked[k]]
        if not protected[v]:
            continue
        room_l = (n_left + 1) / ratio - (take[v] + 1)
        room_r = n_right / ratio - (cnt[v] - take[v])
        if room_l > room_r:
            take[v] += 1
            n_left += 1
            n_right -= 1
    # the sizes every protected value allows the left half, given its rows there: a tight
    # leaf (top share exactly 1/ratio) needs them exact
    low = max(min_size, 1)
    high = size - max(min_size, 1)
    for v in range(n_values):
        if protected[v] and cnt[v] > 0:
            low = max(low, int(np.ceil(take[v] * ratio - 1e-9)))
            high = min(high, int(np.floor(size - (cnt[v] - take[v]) * ratio + 1e-9)))
    ok = low <= high
    if ok:
        target = min(max(n_left, low), high)
        # move rows of the values with most room (unprotected, then the rarest) across
        key = np.empty(n_values, np.float64)
        for w in range(n_values):
            key[w] = cnt[w] if protected[w] else -1.0
        for v in np.argsort(key, kind="mergesort"):
            if n_left == target:
                break
            if target > n_left:
                m = min(target - n_left, cnt[v] - take[v])
                if protected[v]:
                    m = min(m, int(np.floor(target / ratio + 1e-9)) - take[v])
            else:
                m = min(n_left - target, take[v])
                if protected[v]:
                    m = min(m, int(np.floor((size - target) / ratio + 1e-9)) - cnt[v] + take[v])
                m = -m
            if m * (target - n_left) > 0:
                take[v] += m
                n_left += m
        n_right = size - n_left
        ok = n_left == target
    for v in range(n_values):
        if (
            ok
            and protected[v]
            and cnt[v] > 0
            and (take[v] * ratio > n_left or (cnt[v] - take[v]) * ratio > n_right)
        ):
            ok = False
    if ok:
        li = 0
        ri = 0
        for k in range(size):
            r = perm[lo + order[k]]
            v = sens[r]
            if take[v] > 0:
                take[v] -= 1
                tmp[li] = r
                li += 1
            else:
                codes[ri] = r
                ri += 1
        for i in range(li):
            perm[lo + i] = tmp[i]
        for i in range(ri):
            perm[lo + li + i] = codes[i]
    for v in range(n_values):
        cnt[v] = 0
        take[v] = 0
    return lo + n_left, ok


@njit(cache=True)
def mondrian_leaves(qid, sens, protected, base, min_size, norm, height, span_lo, span_hi, perm):
    """Split ``perm`` (rows to group, reordered in place) into leaves; returns (L+1,) bounds."""
    n_rows, d = qid.shape
    cnt_l = np.zeros(protected.shape[0], np.int64)
    cnt_r = np.zeros(protected.shape[0], np.int64)
    stack_lo = np.empty(64 + 2 * n_rows // max(min_size, 1) + 64, np.int64)
    stack_hi = np.empty_like(stack_lo)
    bounds = np.empty(perm.shape[0] + 1, np.int64)
    n_leaves = 0
    top = 0
    if perm.shape[0] > 0:
        stack_lo[0] = 0
        stack_hi[0] = perm.shape[0]
        top = 1
    width = np.empty(d, np.float64)
    lo_code = np.empty(d, np.int64)
    hi_code = np.empty(d, np.int64)
    tmp = np.empty(perm.shape[0], perm.dtype)
    while top > 0:
        top -= 1
        lo = stack_lo[top]
        hi = stack_hi[top]
        size = hi - lo
        split = False
        mid = lo
        if size >= 2 * min_size and size >= 2:
            for a in range(d):
                lo_code[a] = qid[perm[lo], a]
                hi_code[a] = lo_code[a]
            for i in range(lo + 1, hi):
                r = perm[i]
                for a in range(d):
                    c = qid[r, a]
                    if c < lo_code[a]:
                        lo_code[a] = c
                    elif c > hi_code[a]:
                        hi_code[a] = c
            for a in range(d):
                width[a] = _extent(a, lo_code[a], hi_code[a], height, span_lo, span_hi) * norm[a]
            order = np.argsort(-width)
            ratio = _split_ratio(perm, lo, hi, sens, protected, base, min_size, cnt_l)
            for oi in range(d):
                a = order[oi]
                if width[a] <= 0.0:
                    break
                vals = _sorted_codes(perm, lo, hi, qid, a, lo_code[a], hi_code[a])
                threshold = -1
                if height[a] > 0:
                    threshold = _hierarchy_cut(
                        a, lo_code[a], hi_code[a], vals, height, span_lo, span_hi
                    )
                if threshold < 0:
                    threshold = vals[(size - 1) // 2]
                    if threshold >= vals[size - 1]:  # everything <= median: cut below it
                        threshold = threshold - 1
                n_left = np.searchsorted(vals, threshold, side="right")
                if n_left == 0 or n_left == size:
                    continue
                # stable partition of perm[lo:hi] by code <= threshold
                li = lo
                ri = 0
                for i in range(lo, hi):
                    r = perm[i]
                    if qid[r, a] <= threshold:
                        perm[li] = r
                        li += 1
                    else:
                        tmp[ri] = r
                        ri += 1
                for i in range(ri):
                    perm[li + i] = tmp[i]
                mid, ok = _balance(
                    perm,
                    lo,
                    lo + n_left,
                    hi,
                    qid,
                    a,
                    sens,
                    protected,
                    ratio,
                    min_size,
                    cnt_l,
                    cnt_r,
                )
                if ok:
                    split = True
                    break
            if not split and size >= STRATIFIED_FROM and width[order[0]] > 0.0:
                # no cut at one code keeps both halves feasible: cut each value in half
                mid, split = _stratified(
                    perm, lo, hi, qid, order[0], sens, protected, ratio, min_size, cnt_l,
                    cnt_r, tmp,
                )  # fmt: skip
        if split:
            stack_lo[top] = mid
            stack_hi[top] = hi
            stack_lo[top + 1] = lo
            stack_hi[top + 1] = mid
            top += 2
        else:
            bounds[n_leaves] = lo
            n_leaves += 1
    bounds[n_leaves] = perm.shape[0]
    return bounds[: n_leaves + 1]


@njit(cache=True)
def _add(row, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched):
    """Add ``row``'s value count and requirements to the group scratch; returns n_touched."""
    v = sens[row]
    if cnt[v] == 0 and req[v] == 0.0:
        touched[n_touched] = v
        n_touched += 1
    cnt[v] += 1
    if protected[v] and req[v] < base:
        req[v] = base
    for e in range(ex_ptr[row], ex_ptr[row + 1]):
        t = ex_val[e]
        if cnt[t] == 0 and req[t] == 0.0:
            touched[n_touched] = t
            n_touched += 1
        if req[t] < ex_req[e]:
            req[t] = ex_req[e]
    return n_touched


@njit(cache=True)
def _valid(size, min_size, protected, cnt, req, touched, n_touched):
    if size < min_size:
        return False
    for i in range(n_touched):
        t = touched[i]
        if cnt[t] > 0 and protected[t] and size < cnt[t] * req[t]:
            return False
    return True


@njit(cache=True)
def _reset(cnt, req, touched, n_touched):
    for i in range(n_touched):
        cnt[touched[i]] = 0
        req[touched[i]] = 0.0


@njit(cache=True)
def _compatible(row, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, cap, repeat):
    """Can ``row`` join the group and the group still become valid within ``cap`` rows?

    Protected values stay distinct inside a bucketized group unless ``repeat``: then a value
    may come again if the group can still hold it (``(n(G,v) + 1) R(G,v) <= cap``).
    """
    v = sens[row]
    if protected[v]:
        if cnt[v] > 0 and not repeat:
            return False
        r_own = req[v] if req[v] > base else base
        for e in range(ex_ptr[row], ex_ptr[row + 1]):
            if ex_val[e] == v and ex_req[e] > r_own:
                r_own = ex_req[e]
        if (cnt[v] + 1) * r_own > cap:
            return False
    for e in range(ex_ptr[row], ex_ptr[row + 1]):
        t = ex_val[e]
        if cnt[t] > 0 and cnt[t] * ex_req[e] > cap:
            return False
    return True


@njit(cache=True)
def _need(size, protected, cnt, req, touched, n_touched):
    """Rows the group needs: ``max(size, max_t n(G,t) R(G,t))`` over its protected values."""
    need = float(size)
    for i in range(n_touched):
        t = touched[i]
        if cnt[t] > 0 and protected[t] and cnt[t] * req[t] > need:
            need = cnt[t] * req[t]
    return need


@njit(cache=True)
def _extra_rows(row, need, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req):
    """How many more rows the group would need if ``row`` joined it (its history can raise the
    ratio a present value requires, and its own value adds one to a count)."""
    after = need
    v = sens[row]
    if protected[v]:
        r = max(req[v], base)
        for e in range(ex_ptr[row], ex_ptr[row + 1]):
            if ex_val[e] == v and ex_req[e] > r:
                r = ex_req[e]
        after = max(after, (cnt[v] + 1) * r)
    for e in range(ex_ptr[row], ex_ptr[row + 1]):
        t = ex_val[e]
        if cnt[t] > 0:
            after = max(after, cnt[t] * max(req[t], ex_req[e]))
    return int(np.ceil(after)) - int(np.ceil(need))


@njit(cache=True)
def _growth(row, qid, norm, height, span_lo, span_hi, lo, hi, extent):
    """Growth of the group's NCP (sum over attributes) if ``row`` joins it.

    ``extent[a]`` is the group's current ``_extent`` on attribute a (cached by the caller).
    """
    g = 0.0
    for a in range(qid.shape[1]):
        c = qid[row, a]
        if c < lo[a]:
            g += (_extent(a, c, hi[a], height, span_lo, span_hi) - extent[a]) * norm[a]
        elif c > hi[a]:
            g += (_extent(a, lo[a], c, height, span_lo, span_hi) - extent[a]) * norm[a]
    return g


CANDIDATES_PER_BUCKET = 4
"""Untaken rows per value a group considers when it picks its next member (nearest first)."""


@njit(cache=True)
def bucketize(
    seg,
    qid,
    norm,
    height,
    span_lo,
    span_hi,
    sens,
    protected,
    base,
    min_size,
    cap,
    ex_ptr,
    ex_val,
    ex_req,
    group,
    next_gid,
    cnt,
    req,
    touched,
    leftover,
    n_left,
):
    """Form groups from the rows ``seg`` (in k-d order); returns (next_gid, n_left).

    A group starts at the first untaken protected row (a sweep in k-d order) and grows by the
    compatible candidate that enlarges its QID box least, under one rule from Anatomy (Xiao &
    Tao 2006) that keeps the rest feasible: a protected value whose remaining count exceeds a
    1/m share of the rows left after this group (``c_s m > N - m``, m = ceil(ratio); a
    *critical* value) is taken first.
    Rows of failed groups and unprotected rows that cannot reach ``min_size`` are appended to
    ``leftover``. ``cnt``/``req``/``touched`` are zeroed scratch arrays of size V.
    """
    k = seg.shape[0]
    if k == 0:
        return next_gid, n_left
    d = qid.shape[1]
    vals = np.empty(k, np.int64)
    for i in range(k):
        vals[i] = sens[seg[i]]
    order = np.argsort(vals, kind="mergesort")
    # buckets: runs of equal value in order[], k-d order kept inside; bucket_of[pos]
    b_start = np.empty(k, np.int64)
    b_end = np.empty(k, np.int64)
    b_val = np.empty(k, np.int64)
    bucket_of = np.empty(k, np.int64)
    nb = 0
    for i in range(k):
        v = vals[order[i]]
        if nb == 0 or b_val[nb - 1] != v:
            b_start[nb] = i
            b_val[nb] = v
            nb += 1
        b_end[nb - 1] = i + 1
        bucket_of[order[i]] = nb - 1
    b_ptr = b_start[:nb].copy()
    b_rem = b_end[:nb] - b_start[:nb]
    taken = np.zeros(k, np.bool_)
    has_history = ex_val.shape[0] > 0
    remaining = k
    m = int(np.ceil(max(base, float(min_size))))
    members = np.empty(int(cap) + 2, np.int64)
    lo = np.empty(d, np.int64)
    hi = np.empty(d, np.int64)
    extent = np.zeros(d, np.int64)
    sweep = 0
    while True:
        while sweep < k and (taken[sweep] or not protected[vals[sweep]]):
            sweep += 1
        if sweep >= k:
            break
        pos = sweep
        row = seg[pos]
        size = 0
        n_touched = 0
        members[size] = pos
        size += 1
        taken[pos] = True
        b_rem[bucket_of[pos]] -= 1
        remaining -= 1
        for a in range(d):
            lo[a] = qid[row, a]
            hi[a] = qid[row, a]
            extent[a] = 0
        n_touched = _add(
            row, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched
        )
        while not _valid(size, min_size, protected, cnt, req, touched, n_touched) and size < cap:
            rows_after = remaining - max(m - size, 0)  # untaken rows once this group is done
            # a critical value (Anatomy's invariant would break without it) restricts the choice
            any_critical = False
            for bb in range(nb):
                v = b_val[bb]
                if b_rem[bb] > 0 and protected[v] and cnt[v] == 0 and b_rem[bb] * m > rows_after:
                    any_critical = True
                    break
            need = _need(size + 1, protected, cnt, req, touched, n_touched)
            best_pos = -1
            best_extra = 0
            best_growth = 0.0
            best_rem = 0
            # first distinct protected values (Anatomy); only when none fits, a repeated one: a
            # member whose history needs a ratio above the number of values present could
            # never be grouped otherwise
            for attempt in range(2):
                if best_pos >= 0 or (attempt == 1 and not has_history):
                    break
                repeat = attempt == 1
                for bb in range(nb):
                    if b_rem[bb] == 0:
                        continue
                    v = b_val[bb]
                    if protected[v] and cnt[v] > 0 and not repeat:
                        continue
                    if (
                        not repeat
                        and any_critical
                        and not (protected[v] and b_rem[bb] * m > rows_after)
                    ):
                        continue
                    while b_ptr[bb] < b_end[bb] and taken[order[b_ptr[bb]]]:
                        b_ptr[bb] += 1
                    seen = 0
                    i = b_ptr[bb]
                    while i < b_end[bb] and seen < CANDIDATES_PER_BUCKET:
                        p = order[i]
                        i += 1
                        if taken[p]:
                            continue
                        seen += 1
                        cand = seg[p]
                        extra = 0
                        if has_history:  # without any history every distinct value fits
                            if not _compatible(
                                cand,
                                sens,
                                protected,
                                base,
                                ex_ptr,
                                ex_val,
                                ex_req,
                                cnt,
                                req,
                                cap,
                                repeat,
                            ):
                                continue  # its own history forbids it; bucket-mates may fit
                            extra = _extra_rows(
                                cand, need, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req
                            )
                        grow = _growth(cand, qid, norm, height, span_lo, span_hi, lo, hi, extent)
                        if (
                            best_pos < 0
                            or extra < best_extra
                            or (extra == best_extra and grow < best_growth)
                            or (
                                extra == best_extra and grow == best_growth and b_rem[bb] > best_rem
                            )
                        ):
                            best_pos = p
                            best_extra = extra
                            best_growth = grow
                            best_rem = b_rem[bb]
                        if grow == 0.0 and extra == 0:
                            break  # inside the box, no larger group needed: nothing does better
                    if (
                        best_pos >= 0
                        and best_growth == 0.0
                        and best_extra == 0
                        and not any_critical
                    ):
                        break  # nothing beats a row inside the box
            if best_pos < 0:
                break
            row = seg[best_pos]
            members[size] = best_pos
            size += 1
            taken[best_pos] = True
            b_rem[bucket_of[best_pos]] -= 1
            remaining -= 1
            for a in range(d):
                c = qid[row, a]
                if c < lo[a] or c > hi[a]:
                    lo[a] = min(lo[a], c)
                    hi[a] = max(hi[a], c)
                    extent[a] = _extent(a, lo[a], hi[a], height, span_lo, span_hi)
            n_touched = _add(
                row, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched
            )
        if _valid(size, min_size, protected, cnt, req, touched, n_touched):
            for i in range(size):
                group[seg[members[i]]] = next_gid
            next_gid += 1
        else:
            for i in range(size):
                group[seg[members[i]]] = -2  # marked: sent to the leftovers
                leftover[n_left] = seg[members[i]]
                n_left += 1
        _reset(cnt, req, touched, n_touched)
    # unprotected rows still waiting: chunks of min_size in k-d order; a short tail goes to the
    # leftovers, whose insertion pass checks every member's history requirements
    rest = np.empty(k, np.int64)
    n_rest = 0
    for i in range(k):
        row = seg[order[i]]
        if group[row] == -1 and not protected[sens[row]]:
            rest[n_rest] = order[i]
            n_rest += 1
    rest = np.sort(rest[:n_rest])
    i = 0
    while i < n_rest:
        j = min(i + min_size, n_rest)
        if n_rest - j < min_size:
            j = n_rest  # the tail joins this chunk
        if j - i >= min_size:
            for t in range(i, j):
                group[seg[rest[t]]] = next_gid
            next_gid += 1
        else:
            for t in range(i, j):
                group[seg[rest[t]]] = -2
                leftover[n_left] = seg[rest[t]]
                n_left += 1
        i = j
    return next_gid, n_left


@njit(cache=True)
def _fits(
    g,
    x,
    g_ptr,
    g_rows,
    extra_head,
    extra_next,
    sens,
    protected,
    base,
    min_size,
    ex_ptr,
    ex_val,
    ex_req,
    cnt,
    req,
    touched,
    cap,
):
    """Whether group ``g`` (its members and the rows inserted so far) stays valid with row
    ``x`` and within ``cap`` rows."""
    n_touched = 0
    size = 0
    for i in range(g_ptr[g], g_ptr[g + 1]):
        n_touched = _add(
            g_rows[i], sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched
        )
        size += 1
    r = extra_head[g]
    while r >= 0:
        n_touched = _add(
            r, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched
        )
        size += 1
        r = extra_next[r]
    n_touched = _add(x, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched)
    ok = size + 1 <= cap and _valid(size + 1, min_size, protected, cnt, req, touched, n_touched)
    _reset(cnt, req, touched, n_touched)
    return ok


@njit(cache=True)
def insert_leftovers(
    rows,
    perm,
    pos,
    group,
    n_groups,
    sens,
    protected,
    base,
    min_size,
    ex_ptr,
    ex_val,
    ex_req,
    cap,
    window,
):
    """Insert each of ``rows`` into the nearest group in k-d order that stays valid with it and
    within ``cap`` rows; else leave it -1."""
    n = group.shape[0]
    V = protected.shape[0]
    cnt = np.zeros(V, np.int64)
    req = np.zeros(V, np.float64)
    touched = np.empty(V, np.int64)
    # CSR of current members
    g_count = np.zeros(n_groups + 1, np.int64)
    for r in range(n):
        if group[r] >= 0:
            g_count[group[r] + 1] += 1
    g_ptr = np.cumsum(g_count)
    fill = g_ptr[:-1].copy()
    g_rows = np.empty(g_ptr[-1], np.int64)
    for r in range(n):
        g = group[r]
        if g >= 0:
            g_rows[fill[g]] = r
            fill[g] += 1
    extra_head = np.full(n_groups, -1, np.int64)
    extra_next = np.full(n, -1, np.int64)
    seen = np.full(n_groups, -1, np.int64)
    m = perm.shape[0]
    for xi in range(rows.shape[0]):
        x = rows[xi]
        p = pos[x]
        done = False
        for step in range(1, window + 1):
            for side in range(2):
                q = p - step if side == 0 else p + step
                if q < 0 or q >= m:
                    continue
                g = group[perm[q]]
                if g < 0 or seen[g] == xi:
                    continue
                seen[g] = xi
                if _fits(
                    g,
                    x,
                    g_ptr,
                    g_rows,
                    extra_head,
                    extra_next,
                    sens,
                    protected,
                    base,
                    min_size,
                    ex_ptr,
                    ex_val,
                    ex_req,
                    cnt,
                    req,
                    touched,
                    cap,
                ):
                    group[x] = g
                    extra_next[x] = extra_head[g]
                    extra_head[g] = x
                    done = True
                    break
            if done:
                break


@njit(cache=True)
def group_rows(
    qid,
    sens,
    protected,
    base,
    min_size,
    cap,
    norm,
    height,
    span_lo,
    span_hi,
    ex_ptr,
    ex_val,
    ex_req,
    perm,
    window,
):
    """All three passes. ``perm`` (m,) int64: the rows to group (reordered in place).

    Returns ``(group, n_groups)``: (n,) int64 group id per row, ``-1`` = not grouped
    (suppressed, or not in ``perm``).
    """
    n = qid.shape[0]
    V = protected.shape[0]
    group = np.full(n, -1, np.int64)
    bounds = mondrian_leaves(
        qid, sens, protected, base, min_size, norm, height, span_lo, span_hi, perm
    )
    cnt = np.zeros(V, np.int64)
    req = np.zeros(V, np.float64)
    touched = np.empty(V, np.int64)
    leftover = np.empty(perm.shape[0], np.int64)
    n_left = 0
    next_gid = 0

    def run(seg, next_gid, n_left):  # one argument list for both passes
        return bucketize(
            seg,
            qid,
            norm,
            height,
            span_lo,
            span_hi,
            sens,
            protected,
            base,
            min_size,
            cap,
            ex_ptr,
            ex_val,
            ex_req,
            group,
            next_gid,
            cnt,
            req,
            touched,
            leftover,
            n_left,
        )

    for leaf in range(bounds.shape[0] - 1):
        next_gid, n_left = run(perm[bounds[leaf] : bounds[leaf + 1]], next_gid, n_left)
    pos = np.full(n, -1, np.int64)
    for i in range(perm.shape[0]):
        pos[perm[i]] = i
    if n_left > 0:
        rows = leftover[:n_left].copy()
        for i in range(n_left):
            group[rows[i]] = -1
        keys = np.empty(n_left, np.int64)
        for i in range(n_left):
            keys[i] = pos[rows[i]]
        rows = rows[np.argsort(keys)]
        n_left = 0
        next_gid, n_left = run(rows, next_gid, n_left)
        rest = leftover[:n_left].copy()
        for i in range(n_left):
            group[rest[i]] = -1
        insert_leftovers(
            rest,
            perm,
            pos,
            group,
            next_gid,
            sens,
            protected,
            base,
            min_size,
            ex_ptr,
            ex_val,
            ex_req,
            cap,
            window,
        )
    return group, next_gid


@njit(cache=True)
def first_rows(group, n_groups):
    """(n_groups,) the first row of each group id (``n`` for an id without rows)."""
    n = group.shape[0]
    first = np.full(n_groups, n, np.int64)
    for r in range(n - 1, -1, -1):
        g = group[r]
        if g >= 0:
            first[g] = r
    return first
