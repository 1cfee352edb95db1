"""Errors that blame the caller's input, as distinct from a broken build or a bug.

The run side raises these where what it was asked for cannot be done whatever the build
(a speed out of range, a voice that is not there or a blend that cannot be made, text
with nothing to say); a caller such as kokoro_ext.serve answers them as the client's
mistake (4xx naming ``param``) and everything else as its own (5xx).  They are
ValueErrors, so code that catches ValueError keeps working.
"""

from __future__ import annotations


class BadInput(ValueError):
    """The input is at fault; ``param`` names the request field it came from, if one."""

    param: str | None = None


class BadSpeed(BadInput):
    """A speed that is not a number in the range the model takes."""

    param = "speed"


class UnknownVoice(BadInput):
    """A voice name or file that is not there."""

    param = "voice"


class BadBlend(BadInput):
    """A voice blend (``af_bella(2)+af_sky``) that cannot be made: its syntax, a weight
    that is not a positive number, or voices of different languages."""

    param = "voice"


class NothingToSay(BadInput):
    """Text that is empty, or leaves no sound once read (only punctuation, other scripts)."""

    param = "input"


class TooLong(BadInput):
    """Input that cannot be cut to fit the build's limits (one unsplittable piece too long)."""

    param = "input"
