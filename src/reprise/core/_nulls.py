"""The spellings of a missing value in text data: one definition for every reader.

CSV, TSV and JSON Lines files spell a missing value as text (``NA`` from R and
pandas, ``null``, an empty field, ``#N/A`` from spreadsheets). Every reader in
Reprise (``data add``, dataset versions read back, batch prediction) turns the
same spellings into nulls in every column, text columns included, so a profile,
a validation, a split and a model all see the same missing values that
``pandas.read_csv`` would. The defaults are pandas' (``STR_NA_VALUES`` in
pandas 2 and 3); a test keeps them equal to the installed pandas.

A value only matches a spelling exactly: ``"NAPLES"`` or ``" NA"`` are values.
"""

from __future__ import annotations

from collections.abc import Iterable

from reprise.core.errors import UserError

__all__ = ["NA_VALUES", "parse_na_values", "resolve_na_values"]

NA_VALUES: tuple[str, ...] = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)


def resolve_na_values(values: Iterable[str] | None) -> tuple[str, ...]:
    """The spellings to use: ``values`` (sorted, without duplicates) or the defaults.

    ``values`` replaces the defaults; to add one, pass ``[*NA_VALUES, "?"]``. An empty
    list means no spelling is missing (only JSON ``null`` and typed Parquet nulls).

    Example:
        >>> resolve_na_values(["NA", "", "NA"])
        ('', 'NA')
        >>> resolve_na_values(None) == NA_VALUES
        True
    """
    if values is None:
        return NA_VALUES
    if isinstance(values, str | bytes):
        raise UserError(f"na_values must be a list of strings, not one string ({values!r}); "
                        f"write [{values!r}].")
    out = list(values)
    bad = [v for v in out if not isinstance(v, str)]
    if bad:
        raise UserError(f"na_values must be strings; got {bad[0]!r} "
                        f"({type(bad[0]).__name__}). Quote it: {str(bad[0])!r}.")
    return tuple(sorted(set(out)))


def parse_na_values(text: str | None) -> tuple[str, ...] | None:
    """``--na-values`` on the command line: spellings separated by commas.

    ``"NA,,-"`` means ``NA``, the empty field and ``-``; ``""`` means the empty field
    only; ``"default,?"`` adds ``?`` to the defaults; ``"none"`` means no spelling.
    None (the option not given) keeps the defaults.

    Example:
        >>> parse_na_values("NA,,-")
        ('', '-', 'NA')
        >>> "?" in parse_na_values("default,?") and "NA" in parse_na_values("default,?")
        True
    """
    if text is None:
        return None
    if text.strip().lower() == "none":
        return ()
    parts = text.split(",")
    if "default" in parts:
        parts = [p for p in parts if p != "default"] + list(NA_VALUES)
    return resolve_na_values(parts)
