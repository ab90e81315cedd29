"""What ``listhygiene doctor`` found: one :class:`Check` per check, in a :class:`DoctorReport`."""

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from listhygiene.errors import UnreachableError

__all__ = ["ADDRESS_FROM", "TITLES", "Check", "DoctorReport", "Status"]


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"  # could not be checked, or a weakness that does not make verdicts unknown
    FAIL = "fail"


#: The checks, in the order they are reported, with their titles.
TITLES = {
    "port_25": "port 25",
    "resolver": "resolver",
    "reverse_dns": "reverse DNS",
    "helo": "HELO name",
    "dnsbl": "blocklists",
}


#: Where the address the address checks were about came from, in words.
ADDRESS_FROM = {
    "option": "as given",
    "ehlo": "as a mail host saw it",
    "proxy": "the SOCKS proxy's",
    "route": "the local address towards the mail hosts",
}


@dataclass(frozen=True, slots=True)
class Check:
    """One check: what it found (one line) and, unless all is well, what to do."""

    name: str
    status: Status
    diagnosis: str
    advice: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": str(self.status),
            "diagnosis": self.diagnosis,
            "advice": self.advice,
        }

    def line(self) -> str:
        text = f"{self.status.upper():<4}  {TITLES.get(self.name, self.name):<11}  {self.diagnosis}"
        return f"{text} -> {self.advice}" if self.advice else text


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """Every check, the address the address checks were about and where it came from."""

    checks: tuple[Check, ...]
    address: str | None
    #: ``option`` (given), ``ehlo`` (a mail host named it), ``proxy`` (the SOCKS proxy's),
    #: ``route`` (the local address towards the mail hosts), or "" (none found).
    address_from: str
    seconds: float
    #: Mail hosts were tried and none answered (not: none could be found to try).
    port_25_blocked: bool = False

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    @property
    def exit_code(self) -> int:
        """0 all good (warnings allowed), 6 port 25 blocked (``clean``'s code for it), 1 else."""
        if self.port_25_blocked:
            return UnreachableError.exit_code
        return 1 if any(c.status is Status.FAIL for c in self.checks) else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "address": self.address,
            "address_from": self.address_from or None,
            "seconds": round(self.seconds, 3),
            "checks": [c.as_dict() for c in self.checks],
        }

    def lines(self) -> list[str]:
        return [c.line() for c in self.checks]

    def address_line(self) -> str:
        """Which address the address checks were about, and where it came from."""
        if self.address is None:
            return "this machine's address: not found"
        return f"this machine's address: {self.address} ({ADDRESS_FROM[self.address_from]})"
