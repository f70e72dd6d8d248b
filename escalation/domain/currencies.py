"""The currency codes a money action may carry: ISO 4217 alphabetic codes in use.

The table below is ISO 4217 List One ("current currency & funds code list") as published
by SIX Financial Information AG, the standard's maintenance agency
(https://www.six-group.com/en/products-services/financial-information/data-standards.html),
as of 2025-07-01: after XCG (Caribbean guilder) replaced ANG on 2025-03-31 and ANG was
withdrawn on 2025-06-30; ZWG (Zimbabwe Gold, 2024) replaced ZWL, SLE (2022) replaced SLL,
VED and VES replaced VEF, MRU replaced MRO, STN replaced STD, BYN replaced BYR, HRK was
withdrawn when Croatia adopted the euro (2023). Two List One codes are left out on purpose:
``XTS`` (reserved for testing) and ``XXX`` ("no currency involved"): a credit or correction
moves money in a currency. When the agency publishes an amendment (a code added or
withdrawn), edit :data:`ISO_4217` and the date above; a code withdrawn after an action was
recorded stays on that ledger row (nothing re-validates history).
"""

from __future__ import annotations

from escalation.domain.errors import InvalidInput

_LIST_ONE = """
AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN BWP
BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB
EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD
JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP
MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR
RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND
TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XAG XAU XBA XBB
XBC XBD XCD XCG XDR XOF XPD XPF XPT XSU XUA YER ZAR ZMW ZWG
"""
ISO_4217: frozenset[str] = frozenset(_LIST_ONE.split())
"""Active ISO 4217 alphabetic codes (List One as of 2025-07-01, without XTS and XXX)."""


def check_currency(code: str | None, field: str = "currency") -> str:
    """``code`` if it is an active ISO 4217 code (:data:`ISO_4217`; exact, upper case).

    Raises:
        InvalidInput: naming ``field`` (``"currency: ..."``), for None, another form
            (``usd``, ``US$``) or a code not in the list (``XXQ``, a withdrawn ``HRK``).
    """
    if code is None or code not in ISO_4217:
        form = ("" if code is not None and len(code) == 3 and code.isascii() and code.isupper()
                else " (three capital letters such as USD)")
        raise InvalidInput(f"{field}: not an active ISO 4217 currency code{form}, got "
                           f"{code!r}", field=field)
    return code


_MINOR_UNIT_EXCEPTIONS: dict[str, int | None] = {
    **dict.fromkeys(["BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF",
                     "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF"], 0),
    **dict.fromkeys(["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"], 3),
    **dict.fromkeys(["CLF", "UYW"], 4),
    # List One gives "N.A." as the minor unit of these funds and precious metals
    **dict.fromkeys(["XAG", "XAU", "XBA", "XBB", "XBC", "XBD", "XDR", "XPD", "XPT", "XSU",
                     "XUA"], None),
}
"""ISO 4217 List One's minor unit ("CcyMnrUnts": decimal places) of each active code that
does not have 2, as of the date in the module docstring."""


def minor_unit(code: str) -> int | None:
    """The decimal places of ``code``'s minor unit (ISO 4217 List One: 0 for JPY, 2 for USD,
    3 for BHD, 4 for CLF), None where the list gives none (funds and precious metals such as
    XAU, XDR). ``code``: an active code (:func:`check_currency`)."""
    return _MINOR_UNIT_EXCEPTIONS.get(code, 2)
