"""A synthesis whose tensors stay on the device: a CUDA build's path.

``pipeline.synthesize_ids`` brings every stage's outputs to the host, computes the
durations, the alignments and the source noise there, and sends them back up.  On a GPU
that costs more than the steps themselves; ``synthesize_resident`` keeps everything on
the device instead: per chunk the inputs go up once (token ids, lengths, the style),
the durations come down (a few hundred int64: the frame count sizes what follows) and
the audio comes down; the rest runs on the device between the stages, through the
build's steps module (``steps.so``: kokoro_ext.build.kernels.steps, compiled with the
build; the manifest's ``requires["steps"]``).

The noise is the device's own: Philox4x32-10 normals of the chunk's seed
(kokoro_ext.run.noise.philox_normal reproduces them on the host), not the draws of
torch's CPU generator that ``synthesize_ids`` makes, so a CUDA build's audio at a seed
differs from a CPU build's as PyTorch on CUDA differs from PyTorch on a CPU.  ``noise``
(given) is uploaded and used instead: the fidelity tools compare engines on one noise.

Everything here takes the device through ``Transfers`` (upload, download) and ``Steps``
(the module's functions on one device): tests run it on TVM's CPU device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm_ffi

from kokoro_ext.run import artifacts, cuda, native
from kokoro_ext.run.geometry import STYLE_DIM, Geometry
from kokoro_ext.run.manifest import Limits
from kokoro_ext.run.noise import philox_key
from kokoro_ext.run.pipeline import (
    LengthOverflow, NonFiniteOutput, Trace, check_finite, check_noise,
)  # fmt: skip
from kokoro_ext.run.runner import to_numpy, to_tensor

#: The steps module of a build, and its entry in the manifest's ``requires``.
STEPS_FILE = "steps.so"
STEPS = "steps"
#: The functions the steps module exports (kokoro_ext.build.kernels.steps.KERNELS).
STEP_FUNCTIONS = (
    "durations", "frame_tokens", "align", "align_tokens_first", "philox_normal", "philox_bits",
)  # fmt: skip

#: A stage on device tensors: keyword inputs -> outputs by name (a NamedStage over
#: ``StageRunner.call_tensors``).
DeviceStage = Callable[..., Mapping[str, Any]]


@dataclass
class Transfers:
    """Moves arrays to the device and back; ``downloads`` lists what came down (name,
    shape, dtype) and ``uploads`` counts what went up, since the last ``reset``, for the
    tests and the bench to see."""

    upload: Callable[[np.ndarray], Any]
    download_tensor: Callable[[Any], np.ndarray]
    downloads: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)
    uploads: int = 0

    def reset(self) -> None:
        """Forget what was moved: before a chunk, so that the record is the chunk's."""
        self.downloads.clear()
        self.uploads = 0

    def up(self, array: np.ndarray) -> Any:
        self.uploads += 1
        return self.upload(np.ascontiguousarray(array))

    def down(self, name: str, tensor: Any) -> np.ndarray:
        array = self.download_tensor(tensor)
        self.downloads.append((name, tuple(array.shape), str(array.dtype)))
        return array


class Steps:
    """The steps module's functions on ``device``, with their outputs in buffers kept
    from chunk to chunk (one per use, grown to the largest chunk: the device's allocator
    is not asked at every chunk, and a chunk's outputs live until its audio is down)."""

    def __init__(self, module: Any, device: tvm_ffi.Device):
        self.module, self.device = module, device
        self._functions, missing = {}, []
        for name in STEP_FUNCTIONS:
            try:
                self._functions[name] = module[name]
            except (AttributeError, KeyError, RuntimeError):
                missing.append(name)
        if missing:
            raise ValueError(f"the steps module lacks {', '.join(missing)}: rebuild the artifacts")
        self._alloc = tvm_ffi.get_global_func("runtime.TVMTensorAllocWithScope")
        self._view = tvm_ffi.get_global_func("runtime.TVMTensorCreateView")
        self._buffers: dict[str, Any] = {}

    def _take(self, use: str, shape: Sequence[int], dtype: str) -> Any:
        """A tensor of ``shape`` in the buffer of ``use``, grown (to a power of two of
        bytes, at least 64 KiB) when it is too small."""
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        buffer = self._buffers.get(use)
        if buffer is None or buffer.shape[0] < size:
            capacity = max(1 << 16, 1 << max(size - 1, 0).bit_length())
            buffer = self._alloc(tvm_ffi.Shape([capacity]), "uint8", self.device, None)
            self._buffers[use] = buffer
        return self._view(buffer, tvm_ffi.Shape([int(d) for d in shape]), tvm_ffi.dtype(dtype), 0)

    def durations(self, predicted: Any, speed: float) -> tuple[Any, Any]:
        """(durations, ends) int64 [T] of the text stage's ``duration`` [1, T]: frames per
        token as pipeline.durations computes them (-1 for a non-finite prediction), and
        their running sum."""
        tokens = int(predicted.shape[1])
        frames = self._take("durations", (tokens,), "int64")
        ends = self._take("ends", (tokens,), "int64")
        self._functions["durations"](predicted, float(np.float32(speed)), frames, ends)
        return frames, ends

    def frame_tokens(self, ends: Any, frames: int) -> Any:
        """int32 [frames]: the token of each frame (the number of tokens past the total)."""
        tokens = self._take("frame_tokens", (frames,), "int32")
        self._functions["frame_tokens"](ends, tokens)
        return tokens

    def align(self, values: Any, tokens: Any, use: str, tokens_first: bool = False) -> Any:
        """float32 [1, C, frames] of ``values`` [1, C, T] (or [1, T, C] with
        ``tokens_first``): each token's column repeated for its frames
        (kokoro_ext.run.alignment.align), in the buffer of ``use``."""
        channels = int(values.shape[2] if tokens_first else values.shape[1])
        out = self._take(use, (1, channels, int(tokens.shape[0])), "float32")
        self._functions["align_tokens_first" if tokens_first else "align"](values, tokens, out)
        return out

    def noise(self, seed: int, samples: int, harmonics: int, offset: int = 0) -> Any:
        """float32 [1, samples, harmonics]: kokoro_ext.run.noise.philox_normal on the device."""
        out = self._take("noise", (1, samples, harmonics), "float32")
        key0, key1 = philox_key(seed)
        offset &= (1 << 64) - 1
        signed = offset - (1 << 64) if offset >= 1 << 63 else offset  # the kernel's int64
        self._functions["philox_normal"](key0, key1, signed, out)
        return out

    def philox_bits(self, seed: int, count: int, offset: int = 0) -> Any:
        """uint32 [count]: the generator's words behind ``noise`` (kokoro_ext.run.noise.
        philox_bits), to check it bit for bit."""
        out = self._take("philox_bits", (count,), "uint32")
        key0, key1 = philox_key(seed)
        offset &= (1 << 64) - 1
        self._functions["philox_bits"](key0, key1, offset - (1 << 64) if offset >= 1 << 63 else offset, out)
        return out


def steps_record(path: Path) -> dict[str, str]:
    """The manifest's ``requires["steps"]``: the module's file name and SHA-256."""
    return {"file": path.name, "sha256": artifacts.sha256(path)}


def steps_path(directory: Path, requires: Mapping[str, Any]) -> Path | None:
    """The build's steps module, checked against its record; None for a build without
    one.  ValueError for a missing or changed file."""
    record = requires.get(STEPS)
    if not record:
        return None
    path = Path(directory) / record["file"]
    if not path.is_file():
        raise ValueError(f"{path} is missing: these artifacts' device steps are in it; rebuild them")
    if artifacts.sha256(path) != record["sha256"]:
        raise ValueError(f"{path} differs from the one these artifacts were built with; rebuild them")
    return path


def load_cuda_steps(directory: Path, requires: Mapping[str, Any], device: int = 0) -> Steps | None:
    """The build's steps module on CUDA device ``device`` (TVM's CUDA runtime loads its
    kernels); None for a build without one."""
    path = steps_path(directory, requires)
    if path is None:
        return None
    native.load_runtime()
    cuda.load_runtime()
    return Steps(tvm_ffi.load_module(str(path)), tvm_ffi.device("cuda", device))


def cuda_transfers(device: int = 0) -> Transfers:
    """Uploads to CUDA device ``device`` and downloads from it (each download waits for
    the tensor)."""
    return Transfers(
        upload=lambda array: cuda.to_device(to_tensor(array), device),
        download_tensor=lambda tensor: to_numpy(cuda.to_host(tensor)),
    )


def synthesize_resident(
    stage: Callable[[str], DeviceStage],
    steps: Steps,
    transfers: Transfers,
    geometry: Geometry,
    input_ids: Sequence[int],
    style: np.ndarray,
    limits: Limits,
    speed: float = 1.0,
    seed: int = 0,
    noise: np.ndarray | None = None,
) -> Trace:
    """``pipeline.synthesize_ids`` with the tensors on the device (module doc): the same
    stages, inputs and checks, the durations and the audio the only downloads.

    ``noise``: float32 [1, samples, harmonics] to use (uploaded) instead of the device's
    Philox noise of ``seed``.  Raises LengthOverflow as synthesize_ids does, and
    NonFiniteOutput for a non-finite duration (naming the text stage) or audio (the
    decoder's; the stages' other outputs are not brought to the host to be checked).
    The Trace's ``stages`` is empty: their outputs stayed on the device.
    """
    tokens = len(input_ids)
    if tokens > limits.tokens:
        raise LengthOverflow("tokens", tokens, limits.tokens)
    up = transfers.up
    predictor_style = up(style[:, STYLE_DIM:])
    text = stage("text")(
        input_ids=up(np.array([input_ids], dtype=np.int64)),
        lengths=up(np.array([tokens], dtype=np.int64)),
        style=predictor_style,
    )
    durations, ends = steps.durations(text["duration"], speed)
    frames_per_token = transfers.down("durations", durations)
    if (frames_per_token < 0).any():
        raise NonFiniteOutput(
            f"the text stage returned non-finite values in 'duration' (tokens "
            f"{np.flatnonzero(frames_per_token < 0).tolist()[:8]}); the build or its kernels "
            "are broken: rebuild the artifacts and run `python -m kokoro_ext.validate` on them"
        )
    frames = int(frames_per_token.sum())
    if frames > limits.frames:
        raise LengthOverflow("frames", frames, limits.frames)
    frame_lengths = up(np.array([frames], dtype=np.int64))
    token_of_frame = steps.frame_tokens(ends, frames)
    prosody = stage("prosody")(
        en=steps.align(text["d"], token_of_frame, "en", tokens_first=True),
        lengths=frame_lengths,
        style=predictor_style,
    )
    samples = geometry.samples_per_frame * frames
    if noise is not None:
        check_noise(noise, geometry, frames)
        source_noise = up(np.asarray(noise, dtype=np.float32))
    else:
        source_noise = steps.noise(seed, samples, geometry.harmonics)
    source = stage("source")(F0=prosody["F0"], lengths=frame_lengths, noise=source_noise)
    decoder = stage("decoder")(
        asr=steps.align(text["t_en"], token_of_frame, "asr"),
        F0=prosody["F0"],
        N=prosody["N"],
        lengths=frame_lengths,
        style=up(style[:, :STYLE_DIM]),
        spectrum=source["spectrum"],
    )
    audio = transfers.down("audio", decoder["audio"])
    check_finite("decoder", {"audio": audio})
    return Trace(
        audio=audio[0].astype(np.float32),
        durations=frames_per_token.astype(np.int64),
        tokens=tokens,
        frames=frames,
    )
