"""Student's t quantile the report's intervals use: t(0.975, df), from a table up to 30 degrees
of freedom and a series beyond (no SciPy in the report's dependencies)."""

from __future__ import annotations

import math

# Student's t, 0.975 quantile, by degrees of freedom 1..30, to 6 decimals (no scipy in the sweep
# extra): 3 decimals moved a printed half-width by 0.01 (4.303 for 4.302653 at 2 degrees)
_T975 = [
    12.706205,
    4.302653,
    3.182446,
    2.776445,
    2.570582,
    2.446912,
    2.364624,
    2.306004,
    2.262157,
    2.228139,
    2.200985,
    2.178813,
    2.160369,
    2.144787,
    2.131450,
    2.119905,
    2.109816,
    2.100922,
    2.093024,
    2.085963,
    2.079614,
    2.073873,
    2.068658,
    2.063899,
    2.059539,
    2.055529,
    2.051831,
    2.048407,
    2.045230,
    2.042272,
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
