"""Student's t quantile the report's intervals use: t(0.975, df), from a table up to 30 degrees
of freedom and a series beyond (no SciPy in the report's dependencies)."""

from __future__ import annotations

import math

# Student's t, 0.975 quantile, by degrees of freedom 1..30 (no scipy in the sweep extra)
_T975 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]

#: the normal distribution's 0.975 quantile, the limit of t(0.975, df) as df grows
_Z975 = 1.959963984540054


def t975(df: int) -> float:
    """t(0.975, ``df``): the table's value up to 30 degrees of freedom; beyond, the Cornish-Fisher
    expansion of t in powers of 1/df around the normal quantile (Abramowitz & Stegun 26.7.5),
    within 1e-5 of the exact quantile there. NaN for fewer than 1 degree of freedom."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4
