"""Plain-Python references for the tests, written independently of wbaudit: a format as the sorted list of its
finite values (exact fractions, built from E, M, bias and the largest finite value), nearest rounding with ties to
the even code, and the two stochastic neighbours."""
import bisect
from fractions import Fraction

import numpy as np

# (exponent bits, mantissa bits, bias, largest finite value): docs/formats.md
FORMATS = {
    "bf16": (8, 7, 127, None),
    "fp16": (5, 10, 15, None),
    "e5m2": (5, 2, 15, None),
    "e4m3": (4, 3, 7, Fraction(448)),
    "e3m2": (3, 2, 3, Fraction(28)),
    "e2m3": (2, 3, 1, Fraction(15, 2)),
    "e2m1": (2, 1, 1, Fraction(6)),
}


class Table:
    def __init__(self, name):
        E, M, bias, max_finite = FORMATS[name]
        top = (1 << E) - (2 if max_finite is None else 1)  # IEEE-like: the top exponent holds inf/NaN
        values = []
        for e in range(0, top + 1):
            for m in range(1 << M):
                v = Fraction(m, 1 << M) * Fraction(2) ** (1 - bias) if e == 0 else \
                    (1 + Fraction(m, 1 << M)) * Fraction(2) ** (e - bias)
                if max_finite is not None and v > max_finite:
                    continue
                values.append(v)
        self.values = values  # index = code of the magnitude: even index = even last significand bit
        self.max = values[-1]

    def neighbours(self, x):
        """(lo, hi) magnitudes bracketing |x| (lo == hi when on the grid; beyond max: both max)."""
        a = abs(x)
        if a >= self.max:
            return self.max, self.max
        i = bisect.bisect_right(self.values, a) - 1
        return (self.values[i], self.values[i]) if self.values[i] == a else (self.values[i], self.values[i + 1])

    def nearest(self, x):
        x = Fraction(x)
        a = abs(x)
        if a >= self.max:
            r = self.max
        else:
            i = bisect.bisect_right(self.values, a) - 1
            lo = self.values[i]
            if lo == a:
                r = lo
            else:
                hi = self.values[i + 1]
                r = lo if a - lo < hi - a else hi if hi - a < a - lo else (lo if i % 2 == 0 else hi)
        return -r if x < 0 else r

    def sr_candidates(self, x):
        x = Fraction(x)
        lo, hi = self.neighbours(x)
        s = -1 if x < 0 else 1
        return {s * lo, s * hi}


def f32(values):
    return np.array(values, dtype=np.float32)


def adversarial(table, rng, n=400):
    """Values on the grid, exact midpoints (ties), one float32 ulp either side of midpoints, beyond max, zeros,
    subnormals and binade edges, as float32 where representable."""
    out = []
    vals = table.values
    for i in rng.choice(len(vals) - 1, size=min(n, len(vals) - 1), replace=False):
        lo, hi = vals[i], vals[i + 1]
        mid = (lo + hi) / 2
        for v in (lo, hi, mid):
            f = np.float32(float(v))
            if Fraction(float(f)) == v:
                out += [f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(0))]
    big = [float(table.max) * 1.0001, float(table.max) * 3]
    out += [np.float32(b) for b in big if b < float(np.finfo(np.float32).max)]
    out += [np.float32(0), np.float32(float(vals[1])) / 2]
    out = np.array(out, dtype=np.float32)
    return np.concatenate([out, -out])
