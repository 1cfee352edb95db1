"""What a build is, typed: ``Manifest`` and its parts, to and from ``manifest.json``.

The build writes a ``Manifest`` (kokoro_ext.build.driver) and the runtime reads one
(kokoro_ext.run.artifacts.read_manifest), so both sides agree on one schema.  Each stage
records its ``StageSignature``: the names, dtypes and shapes of what its library's
``main`` takes and returns, with shapes in symbolic axes (``"batch"``, ``"tokens"``,
``"frames"``, derived ones such as ``"2*frames"`` or ``"120*frames+1"``) and the bounds of
each axis.  The runtime checks the signatures against what it expects of each stage
(kokoro_ext.run.contract) before it runs one.

``FORMAT`` changes whenever a build's files mean something else to the runtime; a build
of any other format is refused with a message telling to rebuild it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kokoro_ext.run.geometry import Geometry
from kokoro_ext.run.weights import WeightEntry

#: Version of what a build's files mean: the manifest's schema, the stage signatures, the
#: weights layout and what the stage libraries need of the native library.
FORMAT = 10
REBUILD = "rebuild the artifacts"

#: One entry of a symbolic shape: a fixed size, or an axis name or expression of one.
Dim = int | str
T = TypeVar("T")


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor of a stage's signature, or a checkpoint parameter (fixed shape)."""

    name: str
    dtype: str
    shape: tuple[Dim, ...]

    def to_json(self) -> list:
        return [self.name, self.dtype, list(self.shape)]

    @classmethod
    def from_json(cls, value: Any, path: str = "tensor") -> TensorSpec:
        items = _list(value, path)
        if len(items) != 3:
            raise _wrong(path, value, "[name, dtype, shape]")
        name, dtype, shape = items
        dims = tuple(_dim(d, f"{path}.shape") for d in _list(shape, f"{path}.shape"))
        return cls(_str(name, f"{path}.name"), _str(dtype, f"{path}.dtype"), dims)


@dataclass(frozen=True)
class StageSignature:
    """What a stage library's ``main`` takes (before its weights) and returns, by name."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    #: axis name -> (least, greatest or None for no bound)
    axes: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "axes": {name: list(bounds) for name, bounds in self.axes.items()},
        }

    @classmethod
    def from_json(cls, value: Any, path: str = "signature") -> StageSignature:
        fields = _Fields(value, path)
        return cls(
            inputs=fields.sequence("inputs", TensorSpec.from_json),
            outputs=fields.sequence("outputs", TensorSpec.from_json),
            axes=fields.mapping("axes", _bounds),
        )


@dataclass(frozen=True)
class WeightsFile:
    """A stage's weights file: the arrays its ``main`` takes after the inputs."""

    file: str
    sha256: str
    bytes: int
    tensors: tuple[WeightEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "sha256": self.sha256,
            "bytes": self.bytes,
            "tensors": [t.to_json() for t in self.tensors],
        }

    @classmethod
    def from_json(cls, value: Any, path: str = "weights") -> WeightsFile:
        fields = _Fields(value, path)
        return cls(
            file=fields.string("file"),
            sha256=fields.string("sha256"),
            bytes=fields.integer("bytes"),
            tensors=fields.sequence("tensors", _weight_entry),
        )


@dataclass(frozen=True)
class StageEntry:
    """One compiled stage: its library, its weights and how they were made."""

    file: str
    sha256: str
    weights: WeightsFile
    #: the checkpoint parameters the library's weight transform takes, in its order
    #: (what ``build --weights-only`` feeds it)
    parameters: tuple[TensorSpec, ...]
    signature: StageSignature
    ir_lines: int  # lines of the imported Relax module
    seconds: Mapping[str, float]  # export / import / compile / transform
    #: the prefix of the stage's symbols in ``file`` (``ffi.SystemLib(prefix)``): a
    #: browser build links its stages into one module; "" for a library of its own
    prefix: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "sha256": self.sha256,
            **({"prefix": self.prefix} if self.prefix else {}),
            "weights": self.weights.to_json(),
            "parameters": [p.to_json() for p in self.parameters],
            "signature": self.signature.to_json(),
            "ir_lines": self.ir_lines,
            "seconds": dict(self.seconds),
        }

    @classmethod
    def from_json(cls, value: Any, path: str = "stage") -> StageEntry:
        fields = _Fields(value, path)
        return cls(
            file=fields.string("file"),
            sha256=fields.string("sha256"),
            weights=fields.get("weights", WeightsFile.from_json),
            parameters=fields.sequence("parameters", TensorSpec.from_json),
            signature=fields.get("signature", StageSignature.from_json),
            ir_lines=fields.integer("ir_lines"),
            seconds=fields.mapping("seconds", _float),
            prefix=fields.string("prefix") if "prefix" in fields.value else "",
        )


@dataclass(frozen=True)
class Source:
    """Where a build's weights or voice came from: a file, or random draws of a seed."""

    path: str | None = None
    sha256: str | None = None
    name: str | None = None  # a voice's name (af_heart), when it was given by name
    random_seed: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, value: Any, path: str = "source") -> Source:
        fields = _Fields(value, path)
        if "random_seed" in fields.value:
            return cls(random_seed=fields.integer("random_seed"))
        return cls(
            path=fields.string("path"),
            sha256=fields.string("sha256"),
            name=fields.string("name") if "name" in fields.value else None,
        )


@dataclass(frozen=True)
class Limits:
    """The most tokens and frames one call takes."""

    tokens: int
    frames: int

    def to_json(self) -> dict[str, int]:
        return {"tokens": self.tokens, "frames": self.frames}

    @classmethod
    def from_json(cls, value: Any, path: str = "limits") -> Limits:
        fields = _Fields(value, path)
        return cls(tokens=fields.integer("tokens"), frames=fields.integer("frames"))


@dataclass(frozen=True)
class Manifest:
    """Everything a build records: what was built, from what, for what."""

    kokoro_ext: str  # the package version that built it
    tvm: str  # the apache-tvm version that compiled it (the runtime must be the same)
    patches: Mapping[str, str]  # TVM patch series: patch -> state (kokoro_ext.build.environment)
    target: Mapping[str, Any]  # the TVM target, as JSON
    #: instructions the compiled code may use, for a person or tool deciding where the
    #: build can go and for the load check (no LLVM on the run side)
    cpu_features: tuple[str, ...]
    lstm_backend: str
    dense: str
    #: which weights are stored as int8 (kokoro_ext.build.precision: auto, int8, float32)
    weight_dtype: str
    #: what layers on int8 weights multiply in (kokoro_ext.build.precision: int8,
    #: bf16, fp32)
    precision: str
    limits: Limits
    geometry: Geometry
    config_sha256: str
    weights: Source
    voice: Source
    voice_sha256: str
    stages: Mapping[str, StageEntry]
    build_seconds: float
    #: what a GPU build needs of the device ({"features": [...], "limits": {...}}, as
    #: WebGPU names them); empty for a CPU build
    requires: Mapping[str, Any] = field(default_factory=dict)
    format: int = FORMAT

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "kokoro_ext": self.kokoro_ext,
            "tvm": self.tvm,
            "patches": dict(self.patches),
            "target": dict(self.target),
            "cpu_features": list(self.cpu_features),
            "lstm_backend": self.lstm_backend,
            "dense": self.dense,
            "weight_dtype": self.weight_dtype,
            "precision": self.precision,
            "limits": self.limits.to_json(),
            "geometry": dict(self.geometry.__dict__),
            "config_sha256": self.config_sha256,
            "weights": self.weights.to_json(),
            "voice": self.voice.to_json(),
            "voice_sha256": self.voice_sha256,
            "stages": {name: entry.to_json() for name, entry in self.stages.items()},
            "build_seconds": self.build_seconds,
            **({"requires": dict(self.requires)} if self.requires else {}),
        }

    @classmethod
    def from_json(cls, value: Any) -> Manifest:
        """The manifest ``value`` (parsed JSON) holds; ValueError naming the first field
        that is missing or wrong, or saying that the build is of another format."""
        fields = _Fields(value, "")
        if fields.value.get("format") != FORMAT:
            raise ValueError(
                f"has format {fields.value.get('format')!r}, this kokoro_ext reads format "
                f"{FORMAT}: the build is from another version; {REBUILD}"
            )
        return cls(
            kokoro_ext=fields.string("kokoro_ext"),
            tvm=fields.string("tvm"),
            patches=fields.mapping("patches", _str),
            target=fields.mapping("target", lambda v, path: v),
            cpu_features=fields.sequence("cpu_features", _str),
            lstm_backend=fields.string("lstm_backend"),
            dense=fields.string("dense"),
            weight_dtype=fields.string("weight_dtype"),
            precision=fields.string("precision"),
            limits=fields.get("limits", Limits.from_json),
            geometry=fields.get("geometry", _geometry),
            config_sha256=fields.string("config_sha256"),
            weights=fields.get("weights", Source.from_json),
            voice=fields.get("voice", Source.from_json),
            voice_sha256=fields.string("voice_sha256"),
            stages=fields.mapping("stages", StageEntry.from_json),
            build_seconds=fields.number("build_seconds"),
            requires=fields.value.get("requires") or {},
        )


# -- reading JSON, naming the field at fault -------------------------------------------


def _wrong(path: str, value: Any, expected: str) -> ValueError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return ValueError(f"field {path!r} is {shown}, not {expected}; {REBUILD}")


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _wrong(path, value, "a string")
    return value


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(path, value, "an integer")
    return value


def _float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong(path, value, "a number")
    return float(value)


def _dim(value: Any, path: str) -> Dim:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _wrong(path, value, "a size or an axis")
    return value


def _list(value: Any, path: str) -> list:
    if not isinstance(value, list):
        raise _wrong(path, value, "a list")
    return value


def _bounds(value: Any, path: str) -> tuple[int, int | None]:
    items = _list(value, path)
    if len(items) != 2:
        raise _wrong(path, value, "[least, greatest or null]")
    return _int(items[0], path), None if items[1] is None else _int(items[1], path)


def _weight_entry(value: Any, path: str) -> WeightEntry:
    try:
        return WeightEntry.from_json(value)
    except (TypeError, ValueError):
        raise _wrong(path, value, "[shape, dtype, offset] or [shape, dtype, offset, wire]") from None


def _geometry(value: Any, path: str) -> Geometry:
    fields = _Fields(value, path)
    return Geometry(
        samples_per_frame=fields.integer("samples_per_frame"),
        spectrum_per_frame=fields.integer("spectrum_per_frame"),
        harmonics=fields.integer("harmonics"),
    )


class _Fields:
    """The fields of one JSON object at ``path``, each read with a check of its type."""

    def __init__(self, value: Any, path: str):
        if not isinstance(value, dict):
            raise _wrong(path or "manifest", value, "an object")
        self.value, self.path = value, path

    def get(self, key: str, read: Callable[[Any, str], T]) -> T:
        path = f"{self.path}.{key}" if self.path else key
        if key not in self.value:
            raise ValueError(f"records no {path!r} (a required field); {REBUILD}")
        return read(self.value[key], path)

    def string(self, key: str) -> str:
        return self.get(key, _str)

    def integer(self, key: str) -> int:
        return self.get(key, _int)

    def number(self, key: str) -> float:
        return self.get(key, _float)

    def sequence(self, key: str, read: Callable[[Any, str], T]) -> tuple[T, ...]:
        def items(value: Any, path: str) -> tuple[T, ...]:
            return tuple(read(x, f"{path}[{i}]") for i, x in enumerate(_list(value, path)))

        return self.get(key, items)

    def mapping(self, key: str, read: Callable[[Any, str], T]) -> dict[str, T]:
        def items(value: Any, path: str) -> dict[str, T]:
            if not isinstance(value, dict):
                raise _wrong(path, value, "an object")
            return {k: read(v, f"{path}.{k}") for k, v in value.items()}

        return self.get(key, items)


__all__ = [
    "FORMAT",
    "Limits",
    "Manifest",
    "Source",
    "StageEntry",
    "StageSignature",
    "TensorSpec",
    "WeightsFile",
]
