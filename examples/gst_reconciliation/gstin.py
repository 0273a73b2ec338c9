"""GSTIN validation: the format of a regular taxpayer's GST identification number and its
check digit, as GSTN computes it. Standard library only, so it can be copied anywhere.

A GSTIN has 15 characters::

    27  AAPFU0939F  1  Z  V
    │   │           │  │  └ check digit: base-36, weighted mod-36 checksum of the first 14
    │   │           │  └─── 'Z' by default
    │   │           └────── entity number: the PAN holder's nth registration in the state
    │   │                   (1-9, then A-Z)
    │   └────────────────── the holder's PAN: 5 letters (the 4th: the kind of holder),
    │                       4 digits, a letter
    └────────────────────── state code, 01-38 (97: other territory)

The check digit: map each of the first 14 characters to its value in ``0-9A-Z`` (0 to 35),
multiply by 1 and 2 alternately from the left, add the quotient and the remainder of each
product divided by 36, and the check digit is the character whose value is
``(36 - sum mod 36) mod 36``. Two widely published example GSTINs, ``27AAPFU0939F1ZV``
and ``29AAGCB7383J1Z4``, check.

Out of scope: the other formats GSTN issues (UIN of UN bodies and embassies, TDS and TCS
registrations, non-resident and OIDAR registrations) follow other patterns and are refused
here; a valid check digit says the number is well formed, not that it is registered or
active (ask the GST portal, through a GSP, for that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["STATES", "Gstin", "InvalidGstin", "check_digit", "is_valid", "parse"]

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

STATES: dict[str, str] = {
    "01": "Jammu and Kashmir", "02": "Himachal Pradesh", "03": "Punjab",
    "04": "Chandigarh", "05": "Uttarakhand", "06": "Haryana", "07": "Delhi",
    "08": "Rajasthan", "09": "Uttar Pradesh", "10": "Bihar", "11": "Sikkim",
    "12": "Arunachal Pradesh", "13": "Nagaland", "14": "Manipur", "15": "Mizoram",
    "16": "Tripura", "17": "Meghalaya", "18": "Assam", "19": "West Bengal",
    "20": "Jharkhand", "21": "Odisha", "22": "Chhattisgarh", "23": "Madhya Pradesh",
    "24": "Gujarat", "25": "Daman and Diu", "26": "Dadra and Nagar Haveli and Daman and Diu",
    "27": "Maharashtra", "28": "Andhra Pradesh (before 2014)", "29": "Karnataka",
    "30": "Goa", "31": "Lakshadweep", "32": "Kerala", "33": "Tamil Nadu",
    "34": "Puducherry", "35": "Andaman and Nicobar Islands", "36": "Telangana",
    "37": "Andhra Pradesh", "38": "Ladakh", "97": "Other Territory",
}
"""GST state codes a regular registration can carry, and their names."""

HOLDERS: dict[str, str] = {
    "P": "individual", "C": "company", "H": "Hindu undivided family", "F": "firm or LLP",
    "A": "association of persons", "T": "trust", "B": "body of individuals",
    "L": "local authority", "J": "artificial juridical person", "G": "government",
}
"""The kinds of PAN holder, by the PAN's fourth character."""

_PAN = re.compile(r"[A-Z]{5}[0-9]{4}[A-Z]")


class InvalidGstin(ValueError):
    """A string is not a well-formed GSTIN; the message names the first problem found."""


@dataclass(frozen=True, slots=True)
class Gstin:
    """A well-formed GSTIN and its parts."""

    value: str
    state_code: str
    pan: str
    entity_number: str

    @property
    def state(self) -> str:
        """The name of the state or territory of registration."""
        return STATES[self.state_code]

    @property
    def holder(self) -> str:
        """What kind of PAN holder registered (individual, company, firm...)."""
        return HOLDERS[self.pan[3]]

    def __str__(self) -> str:
        return self.value


def check_digit(first14: str) -> str:
    """The check digit of a GSTIN whose first 14 characters are ``first14``."""
    if len(first14) != 14 or any(c not in ALPHABET for c in first14):
        raise InvalidGstin(f"need the first 14 characters of a GSTIN (0-9, A-Z), not "
                           f"{first14!r}")
    total = 0
    for position, char in enumerate(first14):
        product = ALPHABET.index(char) * (2 if position % 2 else 1)
        total += product // 36 + product % 36
    return ALPHABET[(36 - total % 36) % 36]


def parse(text: str) -> Gstin:
    """The GSTIN ``text`` holds (surrounding spaces and lower case allowed), or
    :class:`InvalidGstin` naming what is wrong with it."""
    if not isinstance(text, str):
        raise InvalidGstin(f"a GSTIN is a string, not {type(text).__name__}")
    value = text.strip().upper()
    if len(value) != 15:
        raise InvalidGstin(f"{value!r} has {len(value)} characters; a GSTIN has 15")
    if not value.isascii() or not value.isalnum():
        raise InvalidGstin(f"{value!r} holds characters other than 0-9 and A-Z")
    state, pan, entity, default, check = (value[:2], value[2:12], value[12], value[13],
                                          value[14])
    if state not in STATES:
        raise InvalidGstin(f"{value!r}: {state!r} is not a GST state code (01-38, or 97)")
    if not _PAN.fullmatch(pan):
        raise InvalidGstin(f"{value!r}: characters 3-12 ({pan!r}) are not shaped like a PAN "
                           "(5 letters, 4 digits, a letter)")
    if pan[3] not in HOLDERS:
        raise InvalidGstin(f"{value!r}: the PAN's 4th character {pan[3]!r} is no kind of "
                           f"holder ({', '.join(HOLDERS)})")
    if entity == "0":
        raise InvalidGstin(f"{value!r}: the entity number (13th character) is 1-9 or A-Z, "
                           "never 0")
    if default != "Z":
        raise InvalidGstin(f"{value!r}: the 14th character is {default!r}; a regular "
                           "registration has 'Z'")
    expected = check_digit(value[:14])
    if check != expected:
        raise InvalidGstin(f"{value!r}: the check digit is {check!r}, but the first 14 "
                           f"characters give {expected!r}")
    return Gstin(value, state, pan, entity)


def is_valid(text: str) -> bool:
    """Whether ``text`` is a well-formed GSTIN."""
    try:
        parse(text)
    except InvalidGstin:
        return False
    return True
