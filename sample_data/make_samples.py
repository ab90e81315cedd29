"""Build the CRM sample files of ``sample_data/`` from the sample mail world.

    .venv/bin/python sample_data/make_samples.py

writes, next to this file and deterministically (a fixed seed, fixed timestamps in the XLSX):

- ``crm_export.csv``: a CRM contact export of 1,000 records, the way HubSpot or Salesforce write
  one, with the mess of a real one (duplicates, blanks, placeholders, typos, bounces, role
  addresses, special domains and four broken records);
- ``crm_export.xlsx``: the same records as an Excel workbook (broken records with their intended
  cells);
- ``mailing_list.txt``: a newsletter list, one address a line.

Every address is built from ``world.json``, so each resolves in the sandbox world as intended. The
script prints what the files hold and the status every record must get with ``check_smtp`` on
(PRODUCT.md, "Statuses"), computed from the world, not by the engine; ``README.md`` quotes it.
"""

import csv
import io
import json
import random
import re
import sys
import unicodedata
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from openpyxl import Workbook
from openpyxl.styles import Font

from listhygiene.engine.lists import is_disposable, is_role
from listhygiene.engine.syntax import parse_address
from listhygiene.sandbox import World, load_world

HERE = Path(__file__).resolve().parent
WORLD_FILE = HERE / "world.json"
CSV_FILE = HERE / "crm_export.csv"
XLSX_FILE = HERE / "crm_export.xlsx"
TXT_FILE = HERE / "mailing_list.txt"

SEED = 20240611
RECORDS = 1000
HEADER = [
    "Contact ID", "First Name", "Last Name", "Company", "Email", "Phone", "Country",
    "Created At", "Notes",
]  # fmt: skip
#: Fixed timestamp for the XLSX package (its parts and properties), so that reruns are identical.
XLSX_TIMESTAMP = datetime(2024, 6, 1, 9, 0, 0)

# -- people -----------------------------------------------------------------------------------
# First and last names by culture. Mailboxes of the CRM companies are ``first.last`` in ASCII
# (see fold()); the CSV gives the names back with their accents.

NAMES: dict[str, tuple[list[str], list[str]]] = {
    "en": (
        ["James", "Olivia", "Liam", "Emma", "Noah", "Ava", "Ethan", "Sophia", "Benjamin",
         "Charlotte", "Henry", "Amelia", "Jack", "Harper", "Owen", "Evelyn", "Daniel", "Abigail",
         "Samuel", "Emily", "Matthew", "Ella", "Ryan", "Grace", "Nathan", "Megan", "Connor",
         "Lauren", "Tyler", "Rachel", "Heather", "Brandon", "Natalie", "Justin", "Victoria",
         "Aaron", "Hannah", "Sean", "Caitlin", "Patrick", "Molly", "Gavin", "Brooke"],
        ["Smith", "Johnson", "Williams", "Brown", "Jones", "Miller", "Davis", "Wilson",
         "Anderson", "Taylor", "Thomas", "Moore", "Jackson", "White", "Harris", "Clark", "Lewis",
         "Robinson", "Walker", "Young", "Allen", "King", "Wright", "Scott", "Green", "Baker",
         "Adams", "Nelson", "Hill", "Campbell", "Mitchell", "Roberts", "Carter", "Phillips",
         "Evans", "Turner", "Parker", "Collins", "Edwards", "Stewart", "Morris", "Murphy", "Cook",
         "Rogers", "Morgan", "Cooper", "Reed", "Bailey", "Bell", "Kelly", "Howard", "Ward",
         "Brooks", "Bennett", "Gray", "Hughes", "Price", "Foster", "Sullivan", "O'Brien",
         "Fitzgerald", "McAllister"],
    ),
    "es": (
        ["José", "María", "Sofía", "Andrés", "Lucía", "Álvaro", "Inés", "Javier", "Carmen",
         "Raúl", "Mónica", "Sergio", "Elena", "Pablo", "Adrián", "Valentina", "Diego", "Camila",
         "Martín", "Jimena"],
        ["García", "Rodríguez", "Martínez", "Hernández", "López", "González", "Pérez", "Sánchez",
         "Ramírez", "Torres", "Flores", "Rivera", "Gómez", "Díaz", "Morales", "Jiménez", "Ruiz",
         "Álvarez", "Muñoz", "Romero", "Navarro", "Castillo", "Ortega", "Núñez", "Vargas"],
    ),
    "de": (
        ["Jürgen", "Lukas", "Katrin", "Stefan", "Sabine", "Matthias", "Felix", "Tobias", "Jana",
         "Maximilian", "Bernd", "Ute", "Dominik", "Franziska", "Günter", "Heike", "Jörg",
         "Annika", "Florian", "Miriam"],
        ["Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker",
         "Schulz", "Hoffmann", "Schäfer", "Koch", "Bauer", "Richter", "Klein", "Wolf", "Schröder",
         "Neumann", "Schwarz", "Zimmermann", "Braun", "Krüger", "Hofmann", "Hartmann", "Lange",
         "Weiß", "Köhler", "Große", "Lehmann", "Krause"],
    ),
    "fr": (
        ["François", "Hélène", "Agnès", "Renée", "Théo", "Noémie", "Céline", "Chloé", "Mathieu",
         "Camille", "Étienne", "Léa", "Julien", "Margaux", "Benoît", "Aurélie", "Jérôme",
         "Élodie", "Nicolas", "Manon"],
        ["Dubois", "Lefèvre", "Moreau", "Laurent", "Simon", "Michel", "Leroy", "Roux", "Fournier",
         "Girard", "Bonnet", "Lambert", "Fontaine", "Rousseau", "Vincent", "Mercier", "Bérubé",
         "Côté", "Gagnon", "Chevalier"],
    ),
    "nordic": (
        ["Björn", "Søren", "Åsa", "Lars", "Ingrid", "Mikael", "Freya", "Sigrid", "Erik", "Astrid",
         "Henrik", "Maja", "Nils", "Linnéa", "Oskar", "Kari", "Jens", "Elin"],
        ["Lindström", "Håkansson", "Bjørnstad", "Nørgaard", "Johansson", "Andersson", "Karlsson",
         "Nilsson", "Eriksson", "Larsen", "Hansen", "Pedersen", "Lund", "Dahl", "Virtanen",
         "Korhonen", "Mäkinen"],
    ),
    "ce": (
        ["Łukasz", "Agnieszka", "Tomasz", "Zoltán", "Katarzyna", "Piotr", "Magdalena", "Jiří",
         "Petra", "Ondřej", "Tereza", "Marek", "Zsófia", "Bence", "Ivana", "Luka", "Mateja"],
        ["Nowak", "Wójcik", "Kowalczyk", "Kowalski", "Lewandowski", "Dvořák", "Novotný",
         "Svoboda", "Horváth", "Nagy", "Szabó", "Kovačić", "Popescu", "Ionescu", "Petrović",
         "Jovanović"],
    ),
    "tr": (
        ["Ömer", "Çağla", "Emre", "Aylin", "Mehmet", "Elif", "Burak", "Zeynep", "Can", "Selin"],
        # Turkish names, with the dotless i (U+0131)
        ["Öztürk", "Yılmaz", "Şahin", "Demir", "Çelik", "Kaya", "Aydın", "Arslan", "Doğan", "Koç"],  # noqa: RUF001
    ),
    "in": (
        ["Priya", "Arjun", "Ananya", "Rohan", "Kavya", "Vikram", "Neha", "Aditya", "Sneha",
         "Rahul", "Pooja", "Sanjay", "Deepa", "Karthik", "Meera"],
        ["Patel", "Sharma", "Iyer", "Reddy", "Nair", "Gupta", "Singh", "Kumar", "Menon", "Rao",
         "Chopra", "Desai", "Joshi", "Banerjee", "Pillai"],
    ),
    "zh": (
        ["Wei", "Mei", "Jun", "Xiu", "Hao", "Yan", "Jing", "Ming", "Fang", "Tao", "Qing"],
        ["Chen", "Wang", "Liu", "Zhang", "Yang", "Huang", "Zhao", "Wu", "Zhou", "Xu", "Sun", "Ma",
         "Zhu", "Hu", "Guo"],
    ),
    "ja": (
        ["Hiroshi", "Haruto", "Sakura", "Kenji", "Aiko", "Takeshi", "Yui", "Daichi", "Emi", "Ren",
         "Haruka"],
        ["Suzuki", "Sato", "Takahashi", "Watanabe", "Ito", "Yamamoto", "Nakamura", "Kobayashi",
         "Kato", "Yoshida", "Yamada"],
    ),
    "ko": (
        ["Min-jun", "Ji-woo", "Seo-yeon", "Ha-eun", "Do-yun", "Ji-ho", "Soo-ah", "Hyun-woo"],
        ["Kim", "Park", "Choi", "Jung", "Kang", "Cho", "Yoon", "Jang", "Lim", "Han"],
    ),
    "ar": (
        ["Omar", "Layla", "Youssef", "Amira", "Karim", "Nour", "Hassan", "Salma", "Tariq", "Rania",
         "Ziad"],
        ["Haddad", "Khalil", "Mansour", "Nasser", "Hamdan", "Saleh", "Aziz", "Farouk", "Rahman",
         "Khoury"],
    ),
    "af": (
        ["Chinedu", "Amara", "Kwame", "Ngozi", "Tunde", "Adaeze", "Kofi", "Abena", "Emeka",
         "Yetunde"],
        ["Okafor", "Adeyemi", "Mensah", "Okonkwo", "Boateng", "Nwosu", "Asante", "Balogun", "Eze",
         "Owusu"],
    ),
    "it": (
        ["Giulia", "Marco", "Alessandro", "Francesca", "Matteo", "Chiara", "Lorenzo", "Federica",
         "Niccolò", "Martina"],
        ["Rossi", "Bianchi", "Ricci", "Esposito", "Romano", "Colombo", "Bruno", "Gallo", "Conti",
         "De Luca", "Mancini"],
    ),
    "pt": (
        ["João", "Beatriz", "Gonçalo", "Mariana", "Tiago", "Leonor", "Rafael", "Carolina", "Rui"],
        ["Silva", "Santos", "Ferreira", "Pereira", "Oliveira", "Costa", "Rodrigues", "Martins",
         "Sousa", "Gonçalves", "Araújo", "Lopes"],
    ),
}  # fmt: skip

#: Letters NFKD does not take apart.
_FOLD = str.maketrans({"ß": "ss", "ø": "o", "Ø": "O", "ł": "l", "Ł": "L", "æ": "ae", "\u0131": "i"})


def fold(name: str) -> str:
    """A name as it goes into a mailbox: ASCII, lower-case, letters, digits and hyphens only."""
    decomposed = unicodedata.normalize("NFKD", name.translate(_FOLD))
    ascii_only = "".join(c for c in decomposed if not unicodedata.combining(c))
    return re.sub(r"[^a-z0-9-]", "", ascii_only.lower())


def _index(position: int) -> dict[str, str]:
    index: dict[str, str] = {}
    for pools in NAMES.values():
        for name in pools[position]:
            key = fold(name)
            if index.setdefault(key, name) != name:
                raise ValueError(f"{name!r} and {index[key]!r} fold to the same {key!r}")
    return index


FIRST_BY_FOLD = _index(0)
LAST_BY_FOLD = _index(1)


def name_of(local: str, *, accents: bool = True) -> tuple[str, str]:
    """(first, last) of a person's mailbox ``first.last`` (digits and ``_`` allowed, as on
    free providers); the accented spelling when the name pools know it."""
    parts = re.split(r"[._]", re.sub(r"\d+$", "", local))
    if len(parts) != 2:
        return local.title(), ""
    first, last = parts
    if accents:
        return FIRST_BY_FOLD.get(first, first.title()), LAST_BY_FOLD.get(last, last.title())
    return first.title(), last.title()


# -- companies --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Company:
    name: str
    country: str
    phone: str  # "us", "uk", "de", "fr", "au", "ie", "ca", "nl", "es", "jp"
    #: Cultures of its people, with weights (the world's mailboxes were drawn from them).
    cultures: tuple[tuple[str, int], ...] = (("en", 6), ("es", 1), ("fr", 1), ("in", 1))


#: The CRM companies of the world: ordinary domains of first.last mailboxes on plain hosts.
CRM_COMPANIES: dict[str, Company] = {
    "brightwater-analytics.test": Company(
        "Brightwater Analytics", "United States", "us",
        (("en", 8), ("in", 3), ("zh", 2), ("es", 2), ("ko", 1), ("ar", 1))),
    "harborline-logistics.test": Company(
        "Harborline Logistics", "Canada", "ca",
        (("en", 8), ("fr", 4), ("zh", 1), ("in", 1), ("af", 1))),
    "pinecrest-dental.test": Company(
        "Pinecrest Dental Group", "United States", "us", (("en", 8), ("es", 3), ("in", 1))),
    "meridian-capital.test": Company(
        "Meridian Capital Partners", "United Kingdom", "uk",
        (("en", 8), ("in", 2), ("it", 1), ("af", 1), ("ar", 1), ("fr", 1))),
    "oakridge-software.test": Company(
        "Oakridge Software", "United States", "us",
        (("en", 6), ("in", 3), ("zh", 2), ("ce", 2), ("ko", 1), ("ja", 1), ("es", 1),
         ("tr", 1))),
    "bluepeak-energy.test": Company(
        "BluePeak Energy", "Australia", "au", (("en", 9), ("it", 1), ("zh", 1), ("in", 1))),
    "sterling-hotels.test": Company(
        "Sterling Hotels & Resorts", "United Kingdom", "uk",
        (("en", 6), ("fr", 2), ("es", 2), ("it", 2), ("pt", 1), ("ar", 1))),
    "nordlicht-maschinenbau.test": Company(
        "Nordlicht Maschinenbau GmbH", "Germany", "de",
        (("de", 10), ("tr", 2), ("ce", 2), ("nordic", 1))),
    "riverbend-foods.test": Company(
        "Riverbend Foods", "United States", "us",
        (("en", 8), ("es", 4), ("it", 1), ("af", 1))),
    "summit-legal.test": Company(
        "Summit Legal LLP", "Ireland", "ie", (("en", 9), ("fr", 1), ("pt", 1))),
    "ironclad-manufacturing.test": Company(
        "Ironclad Manufacturing", "United States", "us",
        (("en", 7), ("es", 3), ("ce", 2), ("de", 1), ("nordic", 1))),
    "lumen-health.test": Company(
        "Lumen Health Partners", "Netherlands", "nl",
        (("en", 5), ("nordic", 2), ("de", 2), ("tr", 1), ("ar", 1), ("af", 1), ("fr", 1))),
}  # fmt: skip

#: Free providers of the world: people, no company domain.
FREE_PROVIDERS = ("gmail.com", "yahoo.com")

#: Display names and countries of the world's other domains that show up in the CRM.
OTHER_COMPANIES: dict[str, Company] = {
    "northwind.test": Company("Northwind Traders", "United States", "us"),
    "acme-corp.test": Company("Acme Corporation", "United States", "us"),
    "globex.test": Company("Globex Corporation", "United States", "us"),
    "initech.test": Company("Initech", "United States", "us"),
    "contoso.test": Company("Contoso Ltd.", "United States", "us"),
    "trey-research.test": Company("Trey Research", "United States", "us"),
    "datum-corp.test": Company("A. Datum Corporation", "United States", "us"),
    "wingtip-toys.test": Company("Wingtip Toys", "United Kingdom", "uk"),
    "southridge-video.test": Company("Southridge Video", "Canada", "ca"),
    "lamna-healthcare.test": Company("Lamna Healthcare", "France", "fr"),
    "consolidated-messenger.test": Company("Consolidated Messenger", "United States", "us"),
    "adatum.test": Company("Adatum Corporation", "United States", "us"),
    "proseware.test": Company("Proseware, Inc.", "France", "fr"),
    "fabrikam.test": Company("Fabrikam, Inc.", "United States", "us"),
    "litware.test": Company("Litware, Inc.", "United States", "us"),
    "adventure-works.test": Company("Adventure Works Cycles", "United States", "us"),
    "parked-brand.test": Company("Parked Brand Co.", "United Kingdom", "uk"),
    "defunct-startup.test": Company("Defunct Startup Labs", "Germany", "de"),
    "tailwind-traders.test": Company("Tailwind Traders", "Netherlands", "nl"),
    "humongous-insurance.test": Company("Humongous Insurance", "United States", "us"),
    "wideworld-importers.test": Company("Wide World Importers", "Spain", "es"),
    "tailspin.test": Company("Tailspin Toys", "United States", "us"),
    "bücher.test": Company("Bücher & Söhne GmbH", "Germany", "de"),
    "lucerne-publishing.test": Company("Lucerne Publishing", "Spain", "es"),
    "mailinator.com": Company("", "", "us"),
}

#: The persons of the other domains that the CRM holds (valid with check_smtp on).
OTHER_PEOPLE = [
    *(f"{local}@northwind.test" for local in (
        "james.wilson", "mary.johnson", "robert.brown", "patricia.garcia", "john.miller",
        "jennifer.davis", "michael.rodriguez", "linda.martinez", "david.hernandez",
        "elizabeth.lopez", "william.gonzalez", "barbara.anderson", "richard.thomas",
        "susan.taylor", "joseph.moore", "jessica.jackson", "thomas.martin", "sarah.lee",
        "charles.perez", "karen.thompson")),
    "alice.johnson@acme-corp.test", "bob.smith@acme-corp.test", "carol.white@acme-corp.test",
    *(f"{local}@globex.test" for local in (
        "ana.silva", "ben.carter", "chloe.nguyen", "diego.ramos", "emma.fischer", "farid.haddad",
        "grace.kim", "hugo.weber")),
    *(f"{local}@initech.test" for local in (
        "peter.gibbons", "michael.bolton", "samir.nagheenanajar", "milton.waddams",
        "bill.lumbergh", "joanna.moore", "tom.smykowski", "lawrence.hart")),
    "kevin.lee@contoso.test", "priya.shah@trey-research.test", "tom.becker@datum-corp.test",
    "ella.wright@wingtip-toys.test", "noah.king@southridge-video.test",
    "fatima.zahra@lamna-healthcare.test", "paul.novak@consolidated-messenger.test",
    "ruth.baker@adatum.test", "andre.dubois@proseware.test",
]  # fmt: skip

#: One or two contacts at each special domain of the world (each a behaviour of its own), with
#: the contact's name. Not the slow ones (tarpit, silent host, DNS timeout): the demo stays quick.
SPECIAL_CONTACTS = [
    ("nina.patel@fabrikam.test", "Nina", "Patel"),  # catch-all
    ("j.morrison@fabrikam.test", "Jim", "Morrison"),  # catch-all, not a mailbox
    ("dana.cole@litware.test", "Dana", "Cole"),  # mailbox full
    ("evan.price@adventure-works.test", "Evan", "Price"),  # disabled
    ("jordan.blake@parked-brand.test", "Jordan", "Blake"),  # null MX
    ("max.mustermann@defunct-startup.test", "Max", "Mustermann"),  # NXDOMAIN
    ("quicktest.4821@mailinator.com", "Test", "User"),  # disposable
    ("freetrial.2291@mailinator.com", "Free", "Trial"),  # disposable, not a mailbox
    ("kim.larsen@tailwind-traders.test", "Kim", "Larsen"),  # dangling MX
    ("claire.dupont@humongous-insurance.test", "Claire", "Dupont"),  # SERVFAIL
    ("olga.petrova@wideworld-importers.test", "Olga", "Petrova"),  # blocked at RCPT
    ("greta.olsen@tailspin.test", "Greta", "Olsen"),  # greylisting
    ("andré@proseware.test", "André", "Dubois"),  # UTF-8 local part, no SMTPUTF8
    ("anna.schmidt@bücher.test", "Anna", "Schmidt"),  # IDN domain
    ("josé@lucerne-publishing.test", "José", "Ortega"),  # UTF-8 local part, SMTPUTF8
]

#: Role local parts the CRM companies have mailboxes for, and some they do not.
ROLE_GUESSES = ["marketing", "hr", "contact", "billing", "admin"]

# -- details of a record ------------------------------------------------------------------------

COUNTRY_SPELLINGS = {
    "United States": ["United States"] * 6 + ["USA", "US", "United States of America"],
    "United Kingdom": ["United Kingdom"] * 6 + ["UK", "GB", "England"],
    "Germany": ["Germany"] * 6 + ["Deutschland", "DE"],
}
OTHER_COUNTRIES = ["United States", "United Kingdom", "Germany", "France", "Spain", "Canada",
                   "India", "Australia", "Netherlands", "Sweden", "Japan", "Brazil", "Mexico",
                   "Ireland", "Italy", "Poland", "Türkiye", "Côte d'Ivoire"]  # fmt: skip
COUNTRY_PHONES = {
    "United States": "us", "United Kingdom": "uk", "Germany": "de", "France": "fr",
    "Spain": "es", "Canada": "ca", "Australia": "au", "Netherlands": "nl", "Ireland": "ie",
    "Japan": "jp",
}  # fmt: skip

NOTES_PLAIN = [
    "Met at SaaStr 2023", "Asked for pricing", "Webinar attendee", "Trade show lead",
    "Referred by partner", "Downloaded the whitepaper", "Newsletter signup", "Demo booked",
    "Existing customer", "Churned in 2022", "Decision maker", "Prefers email",
    "Out of office until Monday", "Renewal in Q4", "Café meeting in Lyon", "Spoke at the Expo",
]  # fmt: skip
NOTES_COMMA = [
    "Interested in the Pro plan, follow up in Q3",
    "Budget approved, waiting on legal",
    "Met at the booth, wants a demo",
    "Asked about SSO, SCIM and audit logs",
    "Left a voicemail, no answer yet",
    "Moved to procurement, see new contact",
]
NOTES_MULTILINE = [
    "Call notes:\n- budget approved\n- decision in March",
    "Spoke on 2023-05-04.\nSend the case study, then call back.",
    "Two sites:\nHQ and the warehouse\n(ask for Sam at the warehouse)",
    "Requested:\n1. pricing sheet\n2. security questionnaire",
]
NOTES_QUOTES = [
    'Said "not now", try again next year',
    'Title on LinkedIn: "Head of Ops"',
    'Asked for the "Enterprise" tier',
]
FREE_COMPANIES = ["", "", "", "Self-employed", "Freelance", "Student", "Consultant"]
PLACEHOLDERS = ["N/A", "n/a", "none", "None", "-", "#N/A", "NULL", "--", "unknown"]


def phone_number(rng: random.Random, style: str) -> str:
    """A phone number as people type them: leading ``+`` or zeros, spaces, dashes, brackets."""
    d = lambda n: "".join(str(rng.randrange(10)) for _ in range(n))  # noqa: E731
    four = f"01{d(2)}"  # 555-01xx: the fictional range of the North American plan
    forms = {
        "us": [f"+1 {rng.choice(['206', '415', '312', '303', '216'])} 555 {four}",
               f"+1-{rng.choice(['206', '415', '312'])}-555-{four}",
               f"({rng.choice(['206', '415', '312', '303'])}) 555-{four}",
               f"001 {rng.choice(['415', '312'])} 555 {four}"],
        "ca": [f"+1 {rng.choice(['604', '416', '514'])} 555 {four}",
               f"({rng.choice(['604', '416'])}) 555-{four}"],
        "uk": [f"+44 20 7946 0{d(3)}", f"020 7946 0{d(3)}", f"+44 (0)161 496 0{d(3)}",
               f"0044 161 496 0{d(3)}"],
        "de": [f"+49 30 {d(7)}", f"030 {d(7)}", f"0049 89 {d(7)}", f"+49 (0)89 {d(4)}-{d(3)}"],
        "fr": [f"+33 1 {d(2)} {d(2)} {d(2)} {d(2)}", f"01 {d(2)} {d(2)} {d(2)} {d(2)}",
               f"0033 4 {d(2)} {d(2)} {d(2)} {d(2)}"],
        "es": [f"+34 91 {d(3)} {d(2)} {d(2)}", f"0034 93 {d(3)} {d(2)} {d(2)}"],
        "au": [f"+61 2 5550 {d(4)}", f"02 5550 {d(4)}", f"0061 3 5550 {d(4)}"],
        "nl": [f"+31 20 {d(3)} {d(4)}", f"020 {d(3)} {d(4)}", f"0031 10 {d(3)} {d(4)}"],
        "ie": [f"+353 1 {d(3)} {d(4)}", f"01 {d(3)} {d(4)}"],
        "jp": [f"+81 3-{d(4)}-{d(4)}", f"03-{d(4)}-{d(4)}"],
    }  # fmt: skip
    return rng.choice(forms.get(style, forms["us"]))


# -- the world ----------------------------------------------------------------------------------


def read_world() -> dict:
    """world.json as written (domain names as Unicode, mailboxes in order)."""
    return json.loads(WORLD_FILE.read_text(encoding="utf-8"))


ROLE_LOCALS = frozenset(
    ["info", "sales", "support", "admin", "postmaster", "noreply", "marketing", "hr", "contact",
     "billing"]
)  # fmt: skip


def company_mailboxes(world: dict, domain: str) -> tuple[list[str], list[str]]:
    """(people, role mailboxes) of a domain of the world."""
    mailboxes = world["domains"][domain]["mailboxes"]
    roles = [m for m in mailboxes if m in ROLE_LOCALS]
    return [m for m in mailboxes if m not in roles], roles


# -- records -----------------------------------------------------------------------------------


@dataclass
class Record:
    first: str
    last: str
    company: str
    email: str  # the cell as written
    phone: str
    country: str
    created: datetime
    notes: str
    kind: str  # what the record is an example of (see KINDS)
    contact_id: int = 0
    #: How the CSV breaks it: None, "extra_field", "notes_comma", "too_few", "open_quote".
    broken: str | None = None
    #: The address the record is about (for duplicates: the one they duplicate).
    address: str = field(default="", compare=False)


KINDS = {
    "person": "a person at a company, address as it is in the world",
    "free": "a person at a free provider (gmail.com, yahoo.com)",
    "same_address": "another contact record with the same address, written the same way",
    "exact_row": "an exact copy of another row (same Contact ID)",
    "other_form": "the same address in another form (case, spaces, NBSP, tab, mailto:, "
    "display name)",
    "blank": "empty Email cell",
    "placeholder": "a placeholder instead of an address (N/A, none, -, #N/A, ...)",
    "bad_syntax": "a typo that breaks the syntax",
    "bounce": "a well-formed address whose mailbox does not exist (left the company, typo)",
    "role": "a role address (info@, sales@, support@, ...)",
    "special": "an address at one of the special domains of the world",
}

#: Transformations of a good address (local part, domain) that break its syntax.
BAD_SYNTAX = [
    lambda local, domain: f"{local}@@{domain}",
    lambda local, domain: f"{local}@{domain.rsplit('.', 1)[0]}",  # no TLD
    lambda local, domain: f"{local.replace('.', ' ')}@{domain}",  # a space
    lambda local, domain: f"{local}.{domain}",  # no @
    lambda local, domain: f"{local}@{domain}.",  # a trailing dot
    lambda local, domain: f"{local.split('.')[0]}.@{domain}",  # a dot before the @
    lambda local, domain: f"{local.replace('.', '..')}@{domain}",
    lambda local, domain: f"{local}@{domain.replace('.', ',')}",
    lambda local, domain: f"{local}@",
    lambda local, domain: f"@{domain}",
    lambda local, domain: f"{local}@{domain.replace('.', ' .')}",
    lambda local, domain: f"{local} at {domain}",
    lambda local, domain: f"{local}@{domain}; {local.split('.')[0]}@{domain}",  # two in one
    lambda local, domain: f"{local}@{domain.replace('.', '..')}",
    lambda local, domain: f"({local})@{domain}",
    lambda local, domain: (
        f"{local}@{domain.replace('-', '_')}" if "-" in domain else f"{local}@_{domain}"
    ),
]


class Builder:
    """Draws the records, deterministically from the seed."""

    def __init__(self, world: dict, seed: int = SEED) -> None:
        self.world = world
        self.rng = random.Random(seed)

    def created(self, after: datetime | None = None) -> datetime:
        """A creation time between January 2019 and the end of May 2024 (after ``after``)."""
        start = after or datetime(2019, 1, 7, 8, 0, 0)
        span = int((datetime(2024, 5, 31, 18, 0, 0) - start).total_seconds())
        return start + timedelta(seconds=self.rng.randrange(max(span, 1)))

    def notes(self) -> str:
        roll = self.rng.random()
        if roll < 0.68:
            return ""
        if roll < 0.84:
            return self.rng.choice(NOTES_PLAIN)
        if roll < 0.93:
            return self.rng.choice(NOTES_COMMA)
        if roll < 0.97:
            return self.rng.choice(NOTES_MULTILINE)
        return self.rng.choice(NOTES_QUOTES)

    def country(self, country: str) -> str:
        if not country or self.rng.random() < 0.06:
            return "" if self.rng.random() < 0.5 else self.rng.choice(OTHER_COUNTRIES)
        return self.rng.choice(COUNTRY_SPELLINGS.get(country, [country]))

    def phone(self, style: str) -> str:
        return "" if self.rng.random() < 0.12 else phone_number(self.rng, style)

    def person(self, address: str, kind: str, first: str, last: str) -> Record:
        domain = address.rpartition("@")[2]
        company = CRM_COMPANIES.get(domain) or OTHER_COMPANIES.get(domain)
        if company is None:  # a free provider
            country = self.rng.choice(OTHER_COUNTRIES)
            company_name, style = self.rng.choice(FREE_COMPANIES), COUNTRY_PHONES.get(country, "us")
        else:
            country, company_name, style = company.country, company.name, company.phone
        return Record(
            first=first, last=last, company=company_name, email=address,
            phone=self.phone(style), country=self.country(country), created=self.created(),
            notes=self.notes(), kind=kind, address=address,
        )  # fmt: skip

    def new_name(self, company: Company) -> tuple[str, str]:
        cultures, weights = zip(*company.cultures, strict=True)
        firsts, lasts = NAMES[self.rng.choices(cultures, weights)[0]]
        return self.rng.choice(firsts), self.rng.choice(lasts)

    # -- the kinds ---------------------------------------------------------------------------

    def people(self) -> list[Record]:
        records = []
        for domain in CRM_COMPANIES:
            people, _ = company_mailboxes(self.world, domain)
            for local in people:
                if self.rng.random() < 0.03:  # a few mailboxes are nobody's contact
                    continue
                records.append(self.person(f"{local}@{domain}", "person", *name_of(local)))
        for address in OTHER_PEOPLE:
            local = address.partition("@")[0]
            records.append(self.person(address, "person", *name_of(local, accents=False)))
        for domain in FREE_PROVIDERS:
            for local in self.world["domains"][domain]["mailboxes"]:
                records.append(self.person(f"{local}@{domain}", "free", *name_of(local)))
        return records

    def roles(self) -> list[Record]:
        records = []
        for domain, company in CRM_COMPANIES.items():
            _, roles = company_mailboxes(self.world, domain)
            for local in roles:
                for _ in range(self.rng.choice([1, 1, 2])):  # two contacts share it at times
                    first, last = ("", "") if self.rng.random() < 0.5 else self.new_name(company)
                    records.append(self.person(f"{local}@{domain}", "role", first, last))
        for local in ("info", "sales", "support", "admin", "postmaster"):
            records.append(self.person(f"{local}@contoso.test", "role", "", ""))
        # role addresses a company does not have: they bounce (mailbox not found)
        for domain in self.rng.sample(sorted(CRM_COMPANIES), 5):
            _, roles = company_mailboxes(self.world, domain)
            local = self.rng.choice([r for r in ROLE_GUESSES if r not in roles])
            records.append(self.person(f"{local}@{domain}", "role", "", ""))
        return records

    def bounces(self, count: int) -> list[Record]:
        """Well-formed addresses at real domains whose mailbox does not exist."""
        records: list[Record] = []
        taken = {(d, m) for d in CRM_COMPANIES for m in self.world["domains"][d]["mailboxes"]}
        domains = sorted(CRM_COMPANIES)
        while len(records) < count - 8:
            domain = self.rng.choice(domains)
            company = CRM_COMPANIES[domain]
            if self.rng.random() < 0.25:  # a typo in an existing person's first name
                people, _ = company_mailboxes(self.world, domain)
                local = self.rng.choice(people)
                first, last = local.split(".", 1)
                if len(first) < 4:
                    continue
                i = self.rng.randrange(1, len(first) - 2)
                typo = first[:i] + first[i + 1] + first[i] + first[i + 2 :]
                local_typo = f"{typo}.{last}"
                name = name_of(local)
            else:  # somebody who left
                name = self.new_name(company)
                local_typo = f"{fold(name[0])}.{fold(name[1])}"
            if (domain, local_typo) in taken:
                continue
            taken.add((domain, local_typo))
            records.append(self.person(f"{local_typo}@{domain}", "bounce", *name))
        for domain in ("northwind.test", "acme-corp.test", "gmail.com", "yahoo.com"):
            for local, first, last in {
                "northwind.test": [("steven.clark", "Steven", "Clark"),
                                   ("nancy.davolio", "Nancy", "Davolio")],
                "acme-corp.test": [("wile.coyote", "Wile E.", "Coyote"),
                                   ("road.runner", "Road", "Runner")],
                "gmail.com": [("old.address.1999", "Paul", "Meyer"),
                              ("lisa.k.turner", "Lisa", "Turner")],
                "yahoo.com": [("cooldude1987", "Mark", "Evans"),
                              ("sunshine_girl_77", "Sarah", "Hill")],
            }[domain]:  # fmt: skip
                records.append(self.person(f"{local}@{domain}", "bounce", first, last))
        return records

    def specials(self) -> list[Record]:
        return [self.person(a, "special", first, last) for a, first, last in SPECIAL_CONTACTS]

    def blanks(self, count: int, kind: str, values: Iterable[str] = ("",)) -> list[Record]:
        values = list(values)
        records = []
        domains = sorted(CRM_COMPANIES)
        for i in range(count):
            company = CRM_COMPANIES[self.rng.choice(domains)]
            record = self.person("", kind, *self.new_name(company))
            record.company, record.email = company.name, values[i % len(values)]
            record.country = self.country(company.country)
            record.phone = phone_number(self.rng, company.phone)  # no email: the phone is known
            records.append(record)
        return records

    def bad_syntax(self, people: list[Record], count: int) -> list[Record]:
        records = []
        for i, original in enumerate(self.rng.sample(people, count)):
            local, _, domain = original.address.partition("@")
            bad = BAD_SYNTAX[i % len(BAD_SYNTAX)](local, domain)
            assert parse_address(bad) is None, bad
            record = replace(original, email=bad, kind="bad_syntax", created=self.created(),
                             notes=self.notes())  # fmt: skip
            records.append(record)
        return records

    def same_address(self, originals: list[Record], count: int) -> list[Record]:
        """Other contact records of the same person: same address, later, other details."""
        records = []
        for original in self.rng.sample(originals, count):
            record = replace(
                original, kind="same_address", created=self.created(after=original.created),
                notes=self.rng.choice(["", "", "Imported from the webinar list",
                                       "Re-created by the web form", "Duplicate?"]),
                phone=original.phone if self.rng.random() < 0.7 else "",
            )  # fmt: skip
            records.append(record)
        return records

    def other_forms(self, originals: list[Record], count: int) -> list[Record]:
        forms = [
            lambda r: r.address.upper(),
            lambda r: r.address.title(),
            lambda r: r.address[0].upper() + r.address[1:],
            lambda r: f"  {r.address} ",
            lambda r: f"{r.address}\u00a0",
            lambda r: f"\u00a0{r.address}",
            lambda r: f"\t{r.address}",
            lambda r: f"mailto:{r.address}",
            lambda r: f"MAILTO:{r.address}",
            lambda r: f"{r.first} {r.last} <{r.address}>",
            lambda r: f"{r.first} {r.last} <{r.address}>",
            lambda r: f'"{r.last}, {r.first}" <{r.address}>',
        ]
        records = []
        for i, original in enumerate(self.rng.sample(originals, count)):
            record = replace(
                original, kind="other_form", email=forms[i % len(forms)](original),
                created=self.created(after=original.created), notes=self.notes(),
            )  # fmt: skip
            records.append(record)
        return records


def build_records(world: dict) -> list[Record]:
    """The 1,000 records of the CRM export, in file order, broken ones marked."""
    b = Builder(world)
    people = b.people()
    persons = [r for r in people if r.kind == "person"]
    records = [
        *people,
        *b.roles(),
        *b.bounces(70),
        *b.specials(),
        *b.blanks(40, "blank"),
        *b.blanks(18, "placeholder", PLACEHOLDERS),
        *b.bad_syntax(persons, 26),
        *b.other_forms([r for r in people if r.first and r.address.isascii()], 60),
    ]
    exact_rows = 12
    records += b.same_address(persons, RECORDS - len(records) - exact_rows)
    records.sort(key=lambda r: r.created)
    contact_id = 20104400
    for record in records:
        contact_id += b.rng.randrange(1, 40)
        record.contact_id = contact_id
    # exact copies of rows, each a little after its original (an export run twice, a bad merge)
    for original in b.rng.sample(records[:-20], exact_rows):
        at = records.index(original) + b.rng.randrange(1, 20)
        records.insert(at, replace(original, kind="exact_row"))
    assert len(records) == RECORDS, len(records)
    mark_broken(records)
    return records


def mark_broken(records: list[Record]) -> None:
    """Four records the CSV writes broken (the XLSX has their intended cells)."""

    def plain_person(i: int) -> bool:
        r = records[i]
        return r.kind == "person" and r.address.isascii() and r.company and "," not in r.company

    # a company name with a comma, unquoted: one field too many
    [proseware] = [
        r for r in records if r.kind == "person" and r.address == "andre.dubois@proseware.test"
    ]
    proseware.broken, proseware.notes = "extra_field", ""
    # notes with a comma, unquoted: one field too many
    i = next(i for i in range(380, RECORDS) if plain_person(i))
    records[i].broken, records[i].notes = "notes_comma", "Met at booth 14, wants a demo"
    # an opening quote in Notes that never closes, in the middle of the file; the next record's
    # Notes are quoted (a comma) and contain no other quote
    i = next(i for i in range(500, RECORDS) if plain_person(i) and plain_person(i + 1))
    records[i].broken, records[i].notes = "open_quote", "Prefers calls after 3pm"
    records[i + 1].notes = "Renewal due in June, send the quote"
    # a record cut short after the Email field
    i = next(i for i in range(720, RECORDS) if plain_person(i))
    records[i].broken = "too_few"


# -- writing ------------------------------------------------------------------------------------


def cells(record: Record) -> list[str]:
    return [
        str(record.contact_id), record.first, record.last, record.company, record.email,
        record.phone, record.country, record.created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        record.notes,
    ]  # fmt: skip


def csv_line(values: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(values)
    return out.getvalue()


def render_csv(records: list[Record]) -> tuple[str, dict[int, int]]:
    """The CSV text, and the line (1-based, header on line 1) where each broken record starts."""
    parts = [csv_line(HEADER)]
    line = 2
    broken_lines: dict[int, int] = {}
    for index, record in enumerate(records):
        values = cells(record)
        if record.broken == "extra_field":
            text = ",".join(values[:3]) + f",{record.company}," + csv_line(values[4:])
        elif record.broken == "notes_comma":
            text = csv_line(values[:8])[:-1] + f",{record.notes}\n"
        elif record.broken == "open_quote":
            text = csv_line(values[:8])[:-1] + f',"{record.notes}\n'
        elif record.broken == "too_few":
            text = csv_line(values[:5])
        else:
            text = csv_line(values)
        if record.broken:
            broken_lines[index] = line
        parts.append(text)
        line += text.count("\n")
    return "".join(parts), broken_lines


def write_xlsx(records: list[Record], path: Path) -> None:
    wb = Workbook()
    ws = wb.active
    ws.title = "Contacts"
    ws.append(HEADER)
    for cell in ws[1]:
        cell.font = Font(bold=True)
    for record in records:
        ws.append([
            record.contact_id, record.first, record.last, record.company, record.email,
            record.phone, record.country, record.created, record.notes,
        ])  # fmt: skip
    for row in ws.iter_rows(min_row=2):
        row[5].number_format = "@"  # Phone: text, so "+44 ..." and "0049 ..." stay as typed
        row[7].number_format = "yyyy-mm-dd hh:mm:ss"
    for column, width in zip("ABCDEFGHI", [12, 14, 16, 28, 40, 22, 16, 20, 40], strict=True):
        ws.column_dimensions[column].width = width
    ws.freeze_panes = "A2"
    notes = wb.create_sheet("Notes")
    for line in [
        ["Export", "Contacts, all properties"],
        ["Exported by", "crm-admin@northwind.test"],
        ["Exported at", XLSX_TIMESTAMP],
        ["Records", len(records)],
        ["Note", "Sample data of listhygiene; the pipeline reads only the first sheet."],
    ]:
        notes.append(line)
    notes["B3"].number_format = "yyyy-mm-dd hh:mm"
    wb.properties.creator = "listhygiene sample_data/make_samples.py"
    wb.properties.created = wb.properties.modified = XLSX_TIMESTAMP
    buffer = io.BytesIO()
    wb.save(buffer)
    path.write_bytes(_fixed_zip(buffer.getvalue()))


def _fixed_zip(data: bytes) -> bytes:
    """The workbook's zip with fixed member timestamps and properties (reruns are identical)."""
    out = io.BytesIO()
    stamp = XLSX_TIMESTAMP.strftime("%Y-%m-%dT%H:%M:%SZ")
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            content = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                content = re.sub(
                    rb"(<dcterms:(created|modified)[^>]*>)[^<]*",
                    rb"\g<1>" + stamp.encode(),
                    content,
                )
            fixed = zipfile.ZipInfo(info.filename, date_time=XLSX_TIMESTAMP.timetuple()[:6])
            fixed.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(fixed, content)
    return out.getvalue()


def mailing_list(records: list[Record]) -> list[str]:
    """A newsletter list: ~200 lines, one address each, with the usual mess."""
    rng = random.Random(SEED + 1)
    subscribers = sorted({r.address for r in records if r.kind in ("person", "free")})
    lines = rng.sample(subscribers, 160)
    lines += rng.sample(lines, 10)  # signed up twice
    lines += [a.upper() for a in rng.sample(lines, 3)] + [f"  {a}" for a in rng.sample(lines, 3)]
    lines += sorted({r.address for r in records if r.kind == "bounce"})[:8]
    lines += ["info@brightwater-analytics.test", "sales@oakridge-software.test",
              "newsletter@riverbend-foods.test"]  # fmt: skip
    lines += ["quicktest.4821@mailinator.com", "nina.patel@fabrikam.test", "dana.cole@litware.test"]
    lines += ["max.mustermann@defunct-startup.test", "anna.schmidt@bücher.test"]
    lines += ["mary.johnson@northwind", "james.wilson@@northwind.test", "sarah lee@northwind.test",
              "mailto:karen.thompson@northwind.test", "N/A"]  # fmt: skip
    rng.shuffle(lines)
    for _ in range(8):  # blank lines, some with spaces
        lines.insert(rng.randrange(len(lines)), rng.choice(["", "", " "]))
    return lines


# -- the expected verdicts ----------------------------------------------------------------------

_DISPLAY = re.compile(r"^.*<([^<>]*)>$", re.S)
_SPACE = " \t\u00a0\u2007\u202f\ufeff"


def clean(cell: str) -> str | None:
    """The address in an email cell, read as a person would (PRODUCT.md, "Pipeline rows");
    None for an empty cell or a placeholder."""
    text = cell.strip(_SPACE + "\r\n")
    match = _DISPLAY.match(text)
    if match:
        text = match.group(1).strip(_SPACE)
    if text.lower().startswith("mailto:"):
        text = text[len("mailto:") :].strip(_SPACE)
    if not text or text.lower() in {p.lower() for p in PLACEHOLDERS}:
        return None
    first = re.split(r"[;,]", text, maxsplit=1)[0].strip(_SPACE)
    if "@" in first and first != text:  # a list keeps its first address (see prepare.py)
        text = first
    local, at, domain = text.rpartition("@")
    return f"{local.lower()}{at}{domain.lower()}" if at else text


def expected(cell: str, world_model: World) -> tuple[str, str | None]:
    """(status, reason) with check_smtp on, by the first row of PRODUCT.md's table that applies,
    from what the world says about the address (the engine's default settings plus
    allow_private_mx; the greylisting host's retry comes after its 1.5 s)."""
    address = clean(cell)
    parsed = parse_address(address) if address else None
    if parsed is None:
        return "invalid", "invalid_syntax"
    spec = world_model.domains.get(parsed.domain)
    if spec is None or spec.dns == "nxdomain" or spec.null_mx:
        return "invalid", "no_mail_server"
    if spec.dns in ("servfail", "timeout"):
        return "unknown", "dns_error"
    hosts = [h for h in world_model.mail_hosts_of(parsed.domain) if h in world_model.hosts]
    if not hosts and not spec.a:  # no MX and no A, or a dangling MX
        return "invalid", "no_mail_server"
    if is_disposable(parsed.domain):
        return "disposable", "disposable_domain"
    live = [h for h in hosts if world_model.hosts[h].behaviour != "refuse"]
    if not live:
        return "unknown", "smtp_unreachable"
    host = world_model.hosts[live[0]]
    if host.behaviour == "silent" or host.banner_delay_ms >= 10_000:
        return "unknown", "smtp_timeout"
    if host.behaviour != "smtp":
        return "unknown", "smtp_unreachable"
    if host.block is not None:
        return "unknown", "blocked"
    if parsed.needs_smtputf8 and not host.smtputf8:
        return "unknown", "smtputf8_unsupported"
    local = parsed.local_part.casefold()
    if local in {m.casefold() for m in spec.disabled}:
        return "invalid", "mailbox_disabled"
    mailboxes = {m.casefold() for m in (*spec.mailboxes, *spec.full)}
    if not spec.catch_all and local not in mailboxes:
        return "invalid", "mailbox_not_found"
    if spec.catch_all:
        return "catchall", "catch_all"
    if local in {m.casefold() for m in spec.full}:
        return "risky", "mailbox_full"
    if is_role(local):
        return "role", "role_account"
    return "valid", None


# -- main ----------------------------------------------------------------------------------------


def status_table(counts: Counter) -> Iterator[str]:
    for (status, reason), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        yield f"  {status:<10} {reason or '—':<22} {n:>5}"


def main() -> int:
    world = read_world()
    model = load_world(WORLD_FILE)
    records = build_records(world)
    text, broken_lines = render_csv(records)
    CSV_FILE.write_text(text, encoding="utf-8", newline="")
    write_xlsx(records, XLSX_FILE)
    lines = mailing_list(records)
    TXT_FILE.write_text("\n".join(lines) + "\n", encoding="utf-8")

    kinds = Counter(r.kind for r in records)
    addresses = {clean(r.email) for r in records} - {None}
    well_formed = [r for r in records if not r.broken]
    verdicts = Counter(expected(r.email, model) for r in well_formed)
    all_verdicts = Counter(expected(r.email, model) for r in records)
    print(f"{CSV_FILE.name}: {len(records)} records, {text.count(chr(10))} lines")
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<13} {n:>4}  {KINDS[kind]}")
    syntactic = {a for a in addresses if expected(a, model) != ("invalid", "invalid_syntax")}
    repeats = sum(1 for r in records if clean(r.email) in syntactic) - len(syntactic)
    print(
        f"  distinct addresses, as read by a person: {len(addresses)}, of which "
        f"{len(syntactic)} syntactically valid; {repeats} records repeat an earlier one"
    )
    print("  broken records (CSV line where each starts):")
    for index, line in broken_lines.items():
        r = records[index]
        print(f"    line {line}: {r.broken:<12} {r.email} -> {expected(r.email, model)}")
    print(f"  expected status, check_smtp on, {len(well_formed)} well-formed records:")
    print("\n".join(status_table(verdicts)))
    print(f"  and with the broken records' intended cells ({len(records)} records, = the XLSX):")
    print("\n".join(status_table(all_verdicts)))
    print(f"{XLSX_FILE.name}: sheet Contacts, {len(records)} rows under the header; sheet Notes")
    rows = [line for line in lines if line.strip()]
    txt_verdicts = Counter(expected(line, model) for line in rows)
    distinct = {clean(line) for line in rows} - {None}
    print(
        f"{TXT_FILE.name}: {len(lines)} lines, {len(rows)} rows (non-blank), "
        f"{len(distinct)} distinct addresses"
    )
    print("\n".join(status_table(txt_verdicts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
