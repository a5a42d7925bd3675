"""A field's command-line option, written once beside the field (Run, Serve, the methods): memmath.cli builds its
parser from these, so a new field with an option needs no line on the command line's side."""

from __future__ import annotations


def option(flag: str, help: str, metavar: str | None = None, **how) -> dict:
    """The metadata of a field's option. how: choices (the allowed words, or a function giving them), low/high (a
    whole number's range), value (what a flag stores), auto (the word that leaves the field to its default), kind
    (how the text is read where the field's type does not say: "targets", "probability", "number"), dest (the
    option's name on the command line's side where two fields share a name), parse (a function turning the words
    into the field's value). A bool field is a flag, an int field a whole number from 1; "{choices}" in the help is
    replaced by the allowed words."""
    return {"option": {"flag": flag, "help": help, "metavar": metavar, **how}}
