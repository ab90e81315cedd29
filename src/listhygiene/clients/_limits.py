"""Client-side rate limiting, without I/O: the caller asks how long to wait and does the waiting.

A sliding log of send times per window keeps at most ``limit`` requests in *any* span of the
window's length, hence in every fixed window the service counts (a token bucket would allow twice
the limit across a window boundary). The service's own word comes on top: form B's
``X-RateLimit-Remaining: 0`` pauses every request until ``X-RateLimit-Reset``, since other
clients of the same key count too.
"""

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

__all__ = ["RateLimiter", "SlidingWindow"]


class SlidingWindow:
    """At most ``limit`` sends in any ``seconds`` long span."""

    def __init__(self, limit: int, seconds: float) -> None:
        if limit < 1:
            raise ValueError("a rate limit is at least 1 request")
        self.limit = limit
        self.seconds = seconds
        self._sent: deque[float] = deque()

    def wait(self, now: float) -> float:
        """Seconds until a send is allowed (0: now)."""
        while self._sent and self._sent[0] <= now - self.seconds:
            self._sent.popleft()
        if len(self._sent) < self.limit:
            return 0.0
        return self._sent[0] + self.seconds - now

    def record(self, now: float) -> None:
        self._sent.append(now)


class RateLimiter:
    """Windows per bucket (form A's endpoint types; form B has one bucket) and the service's pause.

    Thread-safe: a sync client may be shared by threads; in an event loop no call blocks.
    """

    def __init__(
        self,
        windows: Mapping[str, Mapping[float, int]],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._windows = {
            bucket: [SlidingWindow(limit, seconds) for seconds, limit in spans.items()]
            for bucket, spans in windows.items()
        }
        self._clock = clock
        self._wall = wall
        self._paused_until = 0.0
        self._lock = threading.Lock()

    def reserve(self, bucket: str) -> float:
        """Take a slot in ``bucket`` and return 0, or return the seconds to wait and take none."""
        with self._lock:
            now = self._clock()
            windows = self._windows.get(bucket, ())
            wait = max([self._paused_until - now, *(w.wait(now) for w in windows)])
            if wait > 0:
                return wait
            for window in windows:
                window.record(now)
            return 0.0

    def observe(self, headers: Mapping[str, str]) -> None:
        """Read ``X-RateLimit-Remaining`` / ``X-RateLimit-Reset`` (a Unix time) of a response."""
        remaining, reset = headers.get("x-ratelimit-remaining"), headers.get("x-ratelimit-reset")
        if remaining is None or reset is None:
            return
        try:
            exhausted, until = int(remaining) <= 0, float(reset)
        except ValueError:
            return
        if exhausted:
            with self._lock:
                now = self._clock()
                self._paused_until = max(self._paused_until, now + until - self._wall())

    def pause(self, seconds: float) -> None:
        """Hold every bucket for ``seconds`` (a 429's ``Retry-After``)."""
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + seconds)
