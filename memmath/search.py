"""The one search the planners share: the largest whole number at which a monotone test still holds.

Memory grows with the batch, the sequence and the context, and shrinks (or stays) with more GPUs
under ZeRO, so "the largest batch that fits", "the longest context that fits" and "the fewest GPUs
that fit" are each the edge of a test that holds up to some n and fails after it.
"""

from __future__ import annotations


def largest_where(holds, low: int, high: int, *, grow: bool = False) -> int | None:
    """The largest n in [low, high] with holds(n), for a test that holds up to some n and fails after;
    None when holds(low) fails.

    grow=True doubles from low before bisecting (for a wide range whose tests cost more as n grows,
    such as a batch up to 2**20); otherwise it bisects [low, high] at once.
    """
    if high < low or not holds(low):
        return None
    if grow:
        while low < high:
            probe = min(2 * low, high)
            if not holds(probe):
                high = probe - 1
                break
            low = probe
    while low < high:  # low holds; high is the largest that may
        middle = (low + high + 1) // 2
        if holds(middle):
            low = middle
        else:
            high = middle - 1
    return low


def fewest_where(holds, low: int, high: int) -> int | None:
    """The smallest n in [low, high] with holds(n), for a test that fails up to some n and holds after
    (more GPUs, less memory per GPU); None when holds(high) fails."""
    if high < low or not holds(high):
        return None
    if holds(low):
        return low
    return largest_where(lambda n: not holds(n), low, high) + 1
