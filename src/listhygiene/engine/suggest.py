"""Typo suggestions: ``jane@gmial.com`` -> ``jane@gmail.com`` (docs/engine.md, "Suggestions").

A suggestion is advice, never a correction: the address and its status stay as verified. The
domain is compared with the big mailbox providers and with the most common domains of the list
being cleaned (the pipeline passes those), by optimal string alignment distance (rapidfuzz's
``OSA``: an edit or a swap of two neighbouring letters counts one, so ``gmial`` is one step from
``gmail``). A domain that is itself a known one (a provider, a free-mail domain, one of the
list's common domains) gets no suggestion: ``ymail.com`` is Yahoo's, not a typo of ``gmail.com``.
"""

from collections.abc import Iterable

from listhygiene.engine.lists import Lists, default_lists

__all__ = ["PROVIDER_DOMAINS", "Suggester", "suggest"]

#: Mailbox providers most addresses are at, most used first (the first wins a tie).
PROVIDER_DOMAINS: tuple[str, ...] = (
    "gmail.com",
    "yahoo.com",
    "hotmail.com",
    "outlook.com",
    "icloud.com",
    "aol.com",
    "live.com",
    "msn.com",
    "googlemail.com",
    "me.com",
    "mac.com",
    "protonmail.com",
    "proton.me",
    "comcast.net",
    "verizon.net",
    "att.net",
    "sbcglobal.net",
    "bellsouth.net",
    "cox.net",
    "charter.net",
    "earthlink.net",
    "ymail.com",
    "rocketmail.com",
    "yahoo.co.uk",
    "yahoo.fr",
    "yahoo.de",
    "yahoo.es",
    "yahoo.it",
    "yahoo.co.in",
    "yahoo.com.br",
    "hotmail.co.uk",
    "hotmail.fr",
    "hotmail.de",
    "hotmail.it",
    "hotmail.es",
    "outlook.fr",
    "outlook.de",
    "live.co.uk",
    "live.fr",
    "btinternet.com",
    "gmx.com",
    "gmx.de",
    "gmx.net",
    "web.de",
    "t-online.de",
    "mail.com",
    "orange.fr",
    "wanadoo.fr",
    "free.fr",
    "sfr.fr",
    "laposte.net",
    "libero.it",
    "yandex.ru",
    "yandex.com",
    "mail.ru",
    "zoho.com",
    "fastmail.com",
    "tutanota.com",
    "qq.com",
    "163.com",
    "126.com",
    "naver.com",
    "rediffmail.com",
    "shaw.ca",
    "rogers.com",
    "bigpond.com",
    "optusnet.com.au",
    "uol.com.br",
    "bol.com.br",
)


_CACHE_LIMIT = 100_000


def _max_distance(domain: str) -> int:
    # one slip in a short name, two in a long one: "abc.com" is not a typo of "aol.com"
    return 1 if len(domain) < 12 else 2


class Suggester:
    """Suggests a domain for typos, against the providers and ``common`` (the list's own most
    common domains, most common first). Answers are cached per domain."""

    def __init__(self, common: Iterable[str] = (), *, lists: Lists | None = None) -> None:
        own = [d.lower().strip() for d in common if d]
        self.candidates: tuple[str, ...] = tuple(dict.fromkeys([*PROVIDER_DOMAINS, *own]))
        self._known = frozenset(self.candidates)
        # by length: a domain is compared only with candidates it could be within reach of
        self._by_length: dict[int, list[tuple[int, str]]] = {}
        self._windows: dict[tuple[int, int], list[str]] = {}
        for rank, candidate in enumerate(self.candidates):
            self._by_length.setdefault(len(candidate), []).append((rank, candidate))
        self._lists = lists
        self._cache: dict[str, str | None] = {}

    def domain(self, domain: str) -> str | None:
        """The domain likely meant instead of ``domain``, or None."""
        key = domain.lower().strip().rstrip(".")
        if key in self._cache:
            return self._cache[key]
        if len(self._cache) >= _CACHE_LIMIT:  # a long-lived service meets endless domains
            self._cache.clear()
        found = self._cache[key] = self._find(key)
        return found

    def _find(self, domain: str) -> str | None:
        if not domain or "." not in domain or domain in self._known:
            return None
        lists = self._lists or default_lists()
        if domain in lists.free:
            return None  # a real provider of its own
        from rapidfuzz import process
        from rapidfuzz.distance import OSA

        reach = _max_distance(domain)
        near = self._near(len(domain), reach)
        if not near:
            return None
        best = process.extractOne(domain, near, scorer=OSA.distance, score_cutoff=reach)
        return None if best is None else str(best[0])

    def _near(self, length: int, reach: int) -> list[str]:
        """The candidates within ``reach`` of ``length`` characters, most used first."""
        key = (length, reach)
        found = self._windows.get(key)
        if found is None:
            pairs = sorted(
                pair
                for size in range(length - reach, length + reach + 1)
                for pair in self._by_length.get(size, ())
            )
            found = self._windows[key] = [candidate for _, candidate in pairs]
        return found

    def address(self, email: str) -> str | None:
        """``email`` with its domain replaced by the likely intended one, or None."""
        local, at, domain = email.rpartition("@")
        if not at or not local:
            return None
        better = self.domain(domain)
        return f"{local}@{better}" if better else None


_DEFAULT: Suggester | None = None


def suggest(email: str) -> str | None:
    """The address likely meant instead of ``email`` (against the providers only), or None."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Suggester()
    return _DEFAULT.address(email)
