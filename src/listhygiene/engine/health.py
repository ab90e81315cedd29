"""A run-level health signal: is this machine able to verify at all?

When most domains of a run cannot be reached on port 25 (refused, timed out), the cause is almost
never the domains: outbound port 25 is blocked (most clouds and ISPs do it) or the machine's IP is
on blocklists. A verifier that quietly returns a list of unknowns then wastes a day; this one
says so, loudly, once.
"""

import logging
from dataclasses import dataclass

log = logging.getLogger("listhygiene.health")

__all__ = ["RunHealth"]

#: Domains probed before the signal may fire, and the share that must fail.
MIN_DOMAINS = 5
UNREACHABLE_SHARE = 0.8


@dataclass
class RunHealth:
    """Counts of domains by how their first SMTP session went."""

    domains_probed: int = 0
    domains_reached: int = 0
    domains_unreachable: int = 0
    domains_blocked: int = 0
    warned: bool = False

    def record(self, domain: str, state: str) -> None:
        self.domains_probed += 1
        if state == "ok":
            self.domains_reached += 1
        elif state == "unreachable":
            self.domains_unreachable += 1
        elif state == "blocked":
            self.domains_blocked += 1
        problem = self.problem
        if problem and not self.warned:
            self.warned = True
            log.error("%s", problem)

    @property
    def problem(self) -> str | None:
        """A sentence for people when the run looks unable to verify, else None."""
        if self.domains_probed < MIN_DOMAINS:
            return None
        if self.domains_unreachable / self.domains_probed >= UNREACHABLE_SHARE:
            return (
                f"{self.domains_unreachable} of {self.domains_probed} domains could not be "
                "reached on the SMTP port: outbound port 25 is probably blocked on this network "
                "(`listhygiene doctor` checks this machine; use --socks-proxy, or run from a host "
                "that may send mail); their results are unknown, not invalid"
            )
        if self.domains_blocked / self.domains_probed >= UNREACHABLE_SHARE:
            return (
                f"{self.domains_blocked} of {self.domains_probed} domains refused this machine "
                "by policy: its IP address is probably on blocklists (`listhygiene doctor` "
                "checks this machine); results are unknown"
            )
        return None

    def as_dict(self) -> dict[str, object]:
        return {
            "domains_probed": self.domains_probed,
            "domains_reached": self.domains_reached,
            "domains_unreachable": self.domains_unreachable,
            "domains_blocked": self.domains_blocked,
            "problem": self.problem,
        }
