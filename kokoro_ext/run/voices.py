"""Kokoro voice packs: float32 [510, 1, 256], one style vector per phoneme count.

A voice is given as a file or by name:

* ``.bin``: raw little-endian float32, 510 x 256 values (kokoro-js's ``voices/*.bin``);
* ``.npy``: a numpy array of that shape (what a build stores as its default voice);
* ``.pt``: a torch tensor (kokoro's ``voices/*.pt``);
* a name such as ``af_heart``: ``<name>.bin`` (or ``.npy``/``.pt``) in the voices
  directory that ``python -m kokoro_ext.build.fetch`` fills (kokoro_ext.run.cache.voices_dir());
* a blend of names: ``af_bella+af_sky`` (equal weights), ``af_bella(2)+af_sky(1)`` or
  ``af_bella-af_sky`` (Kokoro-FastAPI's syntax, which its clients send): the packs
  summed with the weights normalized so that their sizes sum to 1, a voice after ``-``
  subtracted (``parse_blend``).  The voices of a blend must be of one language (a
  name's first letter, kokoro_ext.text.languages): the language picks the G2P that
  reads the text, and a text is read once.  A caller that takes Kokoro-FastAPI's
  requests (kokoro_ext.serve) allows mixed blends as it does: the first voice's
  language reads the text.

Loading needs numpy (and torch only for ``.pt``); not the compiler.  A voice that is not
there raises UnknownVoice (kokoro_ext.run.errors: the caller's mistake), a blend that
cannot be made BadBlend; a file that is there but is no voice pack (wrong size or shape,
NaN or Inf) a plain ValueError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kokoro_ext.run import cache
from kokoro_ext.run.errors import BadBlend, UnknownVoice

VOICE_SHAPE = (510, 1, 256)
SUFFIXES = (".bin", ".npy", ".pt")
#: Most voices in one blend: a client's blend is read and mixed on the server's event loop.
MAX_BLEND = 16
_NAME = re.compile(r"^[a-z]{2}_[a-z0-9]+$")
# one part of a blend: a name, then optionally a weight in parentheses
_PART = re.compile(r"(?P<name>[^()+-]*?)\s*(?:\((?P<weight>[^()]*)\))?")
# a spec that starts as a blend does (af_bella(2)..., af_bella-af_sky) rather than a path
_BLEND_START = re.compile(r"\s*[a-z]{2}_[a-z0-9]+\s*[(-]")
# the same, starting with an alias (alloy-af_bella)
_ALIAS_START = re.compile(r"\s*([A-Za-z0-9_]+)\s*[(-]")


def list_voices(directory: str | Path | None = None) -> list[str]:
    """Names of the voices in ``directory`` (default: the fetched voices), sorted.

    Only files whose stem is a voice name count: those are what a name can reach.
    """
    directory = Path(directory) if directory is not None else cache.voices_dir()
    if not directory.is_dir():
        return []
    return sorted({p.stem for p in directory.iterdir() if p.suffix in SUFFIXES and is_voice_name(p.stem)})


def is_voice_name(spec: str) -> bool:
    """Whether ``spec`` looks like a voice name (``af_heart``) rather than a path."""
    return bool(_NAME.match(spec))


def _named_file(name: str, directory: Path) -> Path | None:
    # a name has no dots or slashes (is_voice_name), so this stays inside ``directory``
    for suffix in SUFFIXES:
        candidate = directory / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def resolve_voice(spec: str | Path, directory: str | Path | None = None) -> Path:
    """The file of a voice given as a path or a name; UnknownVoice naming what is missing."""
    path = Path(spec)
    if path.is_file() or not (isinstance(spec, str) and is_voice_name(spec)):
        if not path.is_file():
            raise UnknownVoice(f"voice file {path} does not exist")
        return path
    directory = Path(directory) if directory is not None else cache.voices_dir()
    found = _named_file(spec, directory)
    if found is not None:
        return found
    known = list_voices(directory)
    if not known:
        raise UnknownVoice(f"no voice {spec!r}: there are no voices in {directory}; {cache.FETCH_HINT}")
    raise UnknownVoice(
        f"no voice {spec!r} in {directory}; the voices are: {', '.join(known)} "
        "(or pass a .bin, .npy or .pt file)"
    )


def _read(path: Path) -> np.ndarray:
    if path.suffix == ".bin":
        data = np.fromfile(path, dtype="<f4")
        if data.size != int(np.prod(VOICE_SHAPE)):
            raise ValueError(
                f"voice file {path} holds {data.size} float32 values; a .bin voice pack holds "
                f"{int(np.prod(VOICE_SHAPE))} ({' x '.join(map(str, VOICE_SHAPE))})"
            )
        return data.reshape(VOICE_SHAPE)
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    if path.suffix == ".pt":
        import torch

        voice = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(voice, torch.Tensor):
            raise ValueError(f"voice file {path} holds a {type(voice).__name__}, not a tensor")
        return voice.detach().float().numpy()
    raise ValueError(f"voice file {path}: unknown kind {path.suffix!r}, expected one of {SUFFIXES}")


def load_voice_array(spec: str | Path, directory: str | Path | None = None) -> np.ndarray:
    """A voice pack as float32 [510, 1, 256], from a file, by name or a blend of names
    (see the module doc; a file whose name looks like a blend is still that file).

    Raises UnknownVoice (a ValueError) for a missing file or name, BadBlend for a blend
    that cannot be made, and ValueError naming the file for an unreadable one, a wrong
    shape or NaN/Inf values.
    """
    if not (is_blend(spec) and not Path(spec).is_file()):
        return load_voice_file(resolve_voice(spec, directory))
    directory = Path(directory) if directory is not None else cache.voices_dir()

    def resolve(name: str) -> str:
        if not is_voice_name(name):  # never a path: a blend names voices
            raise UnknownVoice(f"{name!r} is not a voice name such as af_heart")
        resolve_voice(name, directory)  # UnknownVoice listing the voices there
        return name

    blend = parse_blend(spec, resolve)
    return mix(blend, lambda name: load_voice_file(resolve_voice(name, directory)))


def is_blend(spec: object) -> bool:
    """Whether ``spec`` is written as a blend (it has a ``+``, or starts with a voice name
    and a weight or a ``-``) rather than as one name or a path."""
    return isinstance(spec, str) and ("+" in spec or bool(_BLEND_START.match(spec)))


@dataclass(frozen=True)
class Blend:
    """Voices by name with weights whose sizes sum to 1, negative for a voice subtracted
    (``af_bella-af_sky``: 0.5 and -0.5); a single voice has weight 1."""

    parts: tuple[tuple[str, float], ...]

    @property
    def name(self) -> str:
        """The voice's name, or the blend written with its normalized weights."""
        if len(self.parts) == 1:
            return self.parts[0][0]
        return "".join(
            f"{'-' if weight < 0 else '+' if i else ''}{name}({abs(weight):.4g})"
            for i, (name, weight) in enumerate(self.parts)
        )

    @property
    def language(self) -> str | None:
        """The language code the names imply (parse_blend refuses a mix), or None."""
        return next(filter(None, (_language(name) for name, _ in self.parts)), None)


def parse_blend(
    spec: str, resolve: Callable[[str], str] = lambda name: name, mixed_languages: bool = False
) -> Blend:
    """The Blend ``spec`` writes, as Kokoro-FastAPI reads it: ``name``, ``a+b`` (equal
    weights), ``a(2)+b(1)`` or ``a-b`` (b subtracted), spaces around parts and weights
    allowed.  The weights are divided by their sum (a subtracted voice's counted as it is
    written, positive), so that ``a(2)+b(1)`` is the weighted mean and ``a-b`` is
    ``0.5 a - 0.5 b``.

    ``resolve`` maps each name to the voice it stands for (raising UnknownVoice if none).
    BadBlend for an empty part or one that is not ``name`` or ``name(weight)``, a weight
    that is not a positive finite number, more than MAX_BLEND voices, or voices of
    different languages unless ``mixed_languages`` (then the blend's language is its
    first voice's, as Kokoro-FastAPI reads the text in the first voice's language).
    """
    terms = _terms(spec)
    if len(terms) > MAX_BLEND:
        raise BadBlend(f"voice blend {_show(spec)} has {len(terms)} voices; at most {MAX_BLEND}")
    found: list[tuple[str, float, int]] = []
    for sign, piece in terms:
        match = _PART.fullmatch(piece.strip())
        if match is None or not match["name"]:
            what = "an empty part" if not piece.strip() else f"the part {_show(piece.strip())}"
            raise BadBlend(
                f"cannot read {what} of voice blend {_show(spec)}: write voices as "
                "af_bella+af_sky, with weights as af_bella(2)+af_sky(1), or subtract one "
                "as af_bella-af_sky"
            )
        name, weight = match["name"], _weight(match["weight"], match["name"], spec)
        try:
            found.append((resolve(name), weight, sign))
        except UnknownVoice as error:
            if len(terms) == 1:
                raise
            raise UnknownVoice(f"{error} (in the voice blend {_show(spec)})") from None
    top = max(weight for _, weight, _ in found)  # scaled by the largest first: sums stay finite
    total = math.fsum(weight / top for _, weight, _ in found)
    blend = Blend(tuple((name, sign * weight / top / total) for name, weight, sign in found))
    if not mixed_languages:
        _check_languages(blend, spec)
    return blend


def _terms(spec: str) -> list[tuple[int, str]]:
    """``spec`` cut at each ``+`` and ``-`` outside parentheses (a weight may be ``1e-3``
    or, refused later with its own message, ``-1``): (sign, text) of each part."""
    terms: list[tuple[int, str]] = []
    sign, start, depth = 1, 0, 0
    for i, char in enumerate(spec):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char in "+-" and depth == 0:
            terms.append((sign, spec[start:i]))
            sign, start = (1 if char == "+" else -1), i + 1
    terms.append((sign, spec[start:]))
    return terms


def _weight(text: str | None, name: str, spec: str) -> float:
    if text is None:
        return 1.0
    try:
        weight = float(text.strip())
    except ValueError:
        weight = math.nan
    if not (math.isfinite(weight) and weight > 0):
        raise BadBlend(
            f"the weight of {_show(name)} in voice blend {_show(spec)} must be a positive "
            f"number, got {_show(text.strip())}"
        )
    return weight


def _language(name: str) -> str | None:
    from kokoro_ext.text.languages import language_of_voice  # the text side's one rule

    found = language_of_voice(name)
    return None if found is None else found.code


def _check_languages(blend: Blend, spec: str) -> None:
    from kokoro_ext.text.languages import LANGUAGES

    first: tuple[str, str] | None = None
    for name, _ in blend.parts:
        code = _language(name)
        if code is None:  # a name of no Kokoro language (a custom pack) blends with any
            continue
        if first is None:
            first = (name, code)
        elif code != first[1]:
            raise BadBlend(
                f"voice blend {_show(spec)} mixes languages: {first[0]} is "
                f"{LANGUAGES[first[1]].name}, {name} is {LANGUAGES[code].name}; the "
                "language picks how the text is read, so a blend's voices must share it"
            )


def mix(blend: Blend, load: Callable[[str], np.ndarray]) -> np.ndarray:
    """The packs of ``blend`` summed with its weights (``load`` gives a name's pack),
    float32; a single voice's pack as it is."""
    if len(blend.parts) == 1:
        return load(blend.parts[0][0])
    total = np.zeros(VOICE_SHAPE, np.float64)  # summed in float64, rounded once
    for name, weight in blend.parts:
        total += load(name).astype(np.float64) * weight
    return total.astype(np.float32)


@dataclass(frozen=True, eq=False)
class NamedVoice:
    """A voice pack with the voice or blend it was made from and the language its names
    imply: what a caller that resolves voices itself (kokoro_ext.serve) hands the
    Synthesizer, which reads the text in that language."""

    pack: np.ndarray
    name: str
    language: str | None


def voice_language(voice: object) -> str | None:
    """The language code a voice implies: a NamedVoice's, a blend's (BadBlend if it mixes
    languages), a name's or file name's first letter (kokoro_ext.text.languages); None for
    anything else (an array, a name of no Kokoro language)."""
    if isinstance(voice, NamedVoice):
        return voice.language
    if is_blend(voice) and not Path(voice).is_file():
        return parse_blend(voice).language
    if isinstance(voice, (str, Path)):
        return _language(voice)
    return None


def _show(value: object, most: int = 60) -> str:
    """``repr(value)``, cut to ``most`` characters: messages quote what a client sent."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def load_voice_file(path: Path) -> np.ndarray:
    """The checked voice pack in the file ``path`` (.bin, .npy or .pt)."""
    try:
        voice = _read(path)
    except ValueError:
        raise
    except Exception as err:  # numpy and torch raise many types for a bad file
        raise ValueError(f"cannot read voice pack {path}: {err}") from err
    return check_voice_pack(voice, f"voice pack {path}")


def check_voice_pack(pack: np.ndarray, source: str) -> np.ndarray:
    """``pack`` as contiguous float32 if it is a finite [510, 1, 256] voice pack, else a
    ValueError naming ``source``; the one check for voices from files, names and arrays."""
    if tuple(np.shape(pack)) != VOICE_SHAPE:
        raise ValueError(
            f"{source} must have shape {list(VOICE_SHAPE)}, got {list(np.shape(pack))} "
            "(one style vector per phoneme count)"
        )
    pack = np.ascontiguousarray(pack, dtype=np.float32)
    if not np.isfinite(pack).all():
        raise ValueError(f"{source} holds NaN or Inf values")
    return pack


class VoiceDirectory:
    """The voices of one directory, by name only, each read and checked on first use.

    For callers that take a voice from someone else (kokoro_ext.serve's clients): a voice
    is looked up among the names listed when this is made, never taken as a path, so
    ``../x`` or ``/etc/passwd`` cannot reach a file.  ``aliases`` maps other names onto
    voices (OpenAI's ``alloy`` onto ``am_adam``, as Kokoro-FastAPI maps it).  Wherever a voice is asked for, a blend
    of these names and aliases is too (``af_bella(2)+alloy``: parse_blend).
    """

    def __init__(self, directory: str | Path | None = None, aliases: Mapping[str, str] | None = None,
                 mixed_languages: bool = False):
        self.directory = Path(directory) if directory is not None else cache.voices_dir()
        self.aliases = dict(aliases or {})
        self.mixed_languages = mixed_languages  # parse_blend's: the first voice's language
        self.names = list_voices(self.directory)
        self._known = frozenset(self.names)
        self._packs: dict[str, np.ndarray] = {}  # 0.5 MB each: 28 MB once all 54 are used

    def resolve(self, voice: object) -> str:
        """The voice name ``voice`` (a name or an alias) stands for; UnknownVoice if none."""
        name = self.aliases.get(voice, voice) if isinstance(voice, str) else None
        if name not in self._known:
            raise UnknownVoice(f"unknown voice {_show(voice)}; {self._choices()}")
        return name

    def blend(self, voice: object) -> Blend:
        """The Blend ``voice`` (a name, an alias or a blend of them) stands for; UnknownVoice
        naming a voice that is not here, BadBlend for a blend that cannot be made."""
        if not isinstance(voice, str):
            raise UnknownVoice(f"unknown voice {_show(voice)}; {self._choices()}")
        start = _ALIAS_START.match(voice)
        if not (is_blend(voice) or start and start[1] in self.aliases):
            # one name: a "-" elsewhere (a path) is no subtraction
            return Blend(((self.resolve(voice), 1.0),))
        return parse_blend(voice, self.resolve, self.mixed_languages)

    def voice(self, voice: object) -> NamedVoice:
        """The pack of ``voice`` (as ``blend`` takes it, or a Blend it made), with its name
        and language."""
        blend = voice if isinstance(voice, Blend) else self.blend(voice)
        return NamedVoice(mix(blend, self._pack), blend.name, blend.language)

    def load(self, voice: object) -> np.ndarray:
        """The voice pack ``voice`` stands for, float32 [510, 1, 256].

        UnknownVoice if it is no voice here, BadBlend for a blend that cannot be made;
        ValueError if a file is no longer there or is not a finite voice pack (the
        directory's fault, not the caller's).
        """
        return self.voice(voice).pack

    def _pack(self, name: str) -> np.ndarray:
        if name not in self._packs:
            path = _named_file(name, self.directory)
            if path is None:
                raise ValueError(f"voice {name!r} was listed in {self.directory} but its file is gone")
            self._packs[name] = load_voice_file(path)
        return self._packs[name]

    def _choices(self) -> str:
        # no directory in the message: it may go to a client
        if not self.names:
            return "there are no voices"
        aliases = [f"{alias} ({name})" for alias, name in self.aliases.items() if name in self._known]
        return f"one of {', '.join(self.names)}" + (f" or {', '.join(aliases)}" if aliases else "")
