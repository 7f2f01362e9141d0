"""Rate limits by the time a sender signed, for what comes through a relay. A relay that holds
a member's genuine messages and releases them at once cannot make them look like a flood: their
signed times stay as they were. A member that signs more than `per_minute` within any minute is
over its rate by its own signature, so the refusal is provably its doing (charged to it).
"""

from __future__ import annotations

from bisect import bisect_left, insort


class SignedWindow:
    """The signed times of one sender's recent messages. keep_s: how far back a signed time can
    still matter (the receiver's age window plus a minute)."""

    def __init__(self, keep_s: float, span_s: float = 60.0) -> None:
        self.keep_s, self.span_s = keep_s, span_s
        self.times: list[float] = []  # sorted

    def admit(self, t: float, now: float, per_minute: int) -> bool:
        """Record signed time `t` unless a minute of signed time around it then holds more
        than `per_minute` (the messages' order of arrival does not matter)."""
        times, span = self.times, self.span_s
        del times[: bisect_left(times, now - self.keep_s)]
        lo, hi = bisect_left(times, t - span), bisect_left(times, t + span)
        near = sorted([*times[lo:hi], t])
        j = 0
        for i, start in enumerate(near):  # every minute [start, start + span) that holds t
            if start > t:
                break
            j = max(j, i)
            while j < len(near) and near[j] < start + span:
                j += 1
            if j - i > per_minute:
                return False
        insort(times, t)
        return True
