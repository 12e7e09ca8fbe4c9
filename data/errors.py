"""The one exception type of the data package, and the "did you mean" hint of its messages."""
import difflib
from collections.abc import Iterable


class DataError(ValueError):
    """A data source or data setting that cannot work: a missing file or dataset, an unknown field or option,
    a malformed line, a vocabulary the corpus cannot fill. The message is one line naming the config field, the
    bad value and what was expected."""


def did_you_mean(value: object, options: Iterable[object]) -> str:
    """ "; did you mean 'x'?" naming the option closest to ``value``, or "" when none is close."""
    close = difflib.get_close_matches(str(value), [str(o) for o in options], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
