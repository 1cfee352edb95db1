"""The compiled stages of the pipeline: what each one is, takes and returns.

Kokoro is split where the durations leave the graph (see kokoro_ext.build.export):

  text     tokens  (input_ids, lengths, style)            -> (d, duration, t_en)
  (host)   integer durations -> alignment -> en = d @ A, asr = t_en @ A over the frames
  prosody  frames  (en, lengths, style)                   -> (F0, N)
  source   frames  (F0 as [B, frames, 2], lengths, noise) -> spectrum
  decoder  frames  (asr, F0, N, lengths, style, spectrum) -> audio

Each stage is exported with its batch and time axes symbolic (``dynamic``: torch.export
Dims named by the axis, derived axes written as what they are, ``2*frames``,
``600*frames``, ``120*frames+1``), so one compiled library runs every length.  A single
input runs at its own length, unpadded.  The stages also take ``lengths``: rows of a
batch padded to a common length keep their own valid lengths, so the valid part of each
row equals that row run alone.  ``StageSpec.signature`` reads the names, dtypes and
symbolic shapes of a stage's inputs and outputs off its exported program, for the
manifest (the run side checks them against kokoro_ext.run.contract).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import sympy
import torch
from torch import Tensor, nn
from torch.export import Dim, ExportedProgram

from kokoro_ext.build.export import DecoderStage, ProsodyStage, SourceStage, TextStage
from kokoro_ext.run.geometry import STYLE_DIM, Geometry
from kokoro_ext.run.manifest import StageSignature, TensorSpec

__all__ = ["STAGES", "STYLE_DIM", "Geometry", "StageSpec", "MAX_TOKENS", "MAX_FRAMES", "MAX_BATCH"]

Axis = Literal["tokens", "frames"]


@dataclass(frozen=True)
class StageSpec:
    """One compiled stage: its PyTorch module, example inputs of a length, and which of
    their axes are symbolic."""

    name: str
    axis: Axis
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    module: Callable[[nn.Module], nn.Module]
    example: Callable[[nn.Module, int], tuple[Tensor, ...]]
    dynamic: Callable[[nn.Module], tuple]  # torch.export dynamic_shapes of the inputs

    def batched_example(self, model: nn.Module, size: int, rows: int = 2) -> tuple[Tensor, ...]:
        """``example`` with ``rows`` rows: what the symbolic export traces (a batch axis of
        1 would be specialized)."""
        return tuple(t.repeat(rows, *[1] * (t.ndim - 1)) for t in self.example(model, size))

    def signature(self, program: ExportedProgram, dynamic: tuple) -> StageSignature:
        """The signature of the library compiled from ``program`` (this stage exported with
        ``dynamic``): the spec's names, the program's dtypes and shapes, each symbolic
        size written in the names of ``dynamic``'s Dims, and their bounds."""
        nodes = {node.name: node for node in program.graph.nodes}
        inputs = [nodes[n].meta["val"] for n in program.graph_signature.user_inputs]
        outputs = [nodes[n].meta["val"] for n in program.graph_signature.user_outputs]
        if (len(inputs), len(outputs)) != (len(self.inputs), len(self.outputs)):
            raise ValueError(
                f"stage {self.name!r} names {len(self.inputs)} inputs and "
                f"{len(self.outputs)} outputs, its program has {len(inputs)} and {len(outputs)}"
            )
        # torch.export names its symbols s0, s1, ...: each is the root of a Dim given
        names: dict[sympy.Symbol, sympy.Symbol] = {}
        for value, axes in zip(inputs, dynamic):
            for axis, dim in (axes or {}).items():
                size = value.shape[axis]
                if isinstance(size, torch.SymInt):
                    root = getattr(dim, "root", dim)  # 2*frames: frames
                    for symbol in size.node.expr.free_symbols:
                        names[symbol] = sympy.Symbol(root.__name__)

        def spec(name: str, value: Tensor) -> TensorSpec:
            shape = tuple(
                str(size.node.expr.xreplace(names)).replace(" ", "")
                if isinstance(size, torch.SymInt)
                else int(size)
                for size in value.shape
            )
            return TensorSpec(name, str(value.dtype).removeprefix("torch."), shape)

        axes = {}
        for symbol, name in names.items():
            bounds = program.range_constraints[symbol]
            upper = int(bounds.upper) if bounds.upper.is_Integer else None  # not int_oo
            axes[str(name)] = (int(bounds.lower), upper)
        return StageSignature(
            inputs=tuple(map(spec, self.inputs, inputs)),
            outputs=tuple(map(spec, self.outputs, outputs)),
            axes=dict(sorted(axes.items())),
        )


#: Longest input of the text stage: kokoro's 510 phonemes and its two boundary tokens
#: (ALBERT has 512 positions).
MAX_TOKENS = 512
#: Longest audio one call synthesizes, in frames (40 per second): a bound for callers to
#: check, not a compiled one (the frames axis has no upper bound in the libraries, so
#: that buffers are sized by the input, not by a maximum).
MAX_FRAMES = 8192


#: Most rows in one call: rows of unequal lengths are padded to the longest and keep
#: their own ``lengths``.
MAX_BATCH = 16


def _batch() -> Dim:
    return Dim("batch", min=1, max=MAX_BATCH)


def _tokens() -> Dim:
    return Dim("tokens", min=2, max=MAX_TOKENS)


def _frames() -> Dim:
    return Dim("frames", min=2)


def _text_dynamic(model: nn.Module) -> tuple:
    b = _batch()
    return ({0: b, 1: _tokens()}, {0: b}, {0: b})


def _prosody_dynamic(model: nn.Module) -> tuple:
    b = _batch()
    return ({0: b, 2: _frames()}, {0: b}, {0: b})


def _source_dynamic(model: nn.Module) -> tuple:
    b, frames = _batch(), _frames()
    samples = Geometry.from_model(model).samples_per_frame * frames
    # F0 [B, 2 * frames], noise [B, 600 * frames, H]: no input has ``frames`` itself;
    # the importer defines it from F0's length (tvm_patches/0007)
    return ({0: b, 1: 2 * frames}, {0: b}, {0: b, 1: samples})


def _decoder_dynamic(model: nn.Module) -> tuple:
    b, frames = _batch(), _frames()
    spectrum = Geometry.from_model(model).spectrum_per_frame * frames + 1
    return (
        {0: b, 2: frames},
        {0: b, 1: 2 * frames},
        {0: b, 1: 2 * frames},
        {0: b},
        {0: b},
        {0: b, 2: spectrum},
    )


def _text_example(model: nn.Module, tokens: int) -> tuple[Tensor, ...]:
    ids = torch.ones(1, tokens, dtype=torch.int64)
    return ids, torch.tensor([tokens]), torch.zeros(1, STYLE_DIM)


def _prosody_example(model: nn.Module, frames: int) -> tuple[Tensor, ...]:
    channels = model.predictor.shared.input_size
    return torch.zeros(1, channels, frames), torch.tensor([frames]), torch.zeros(1, STYLE_DIM)


def _source_example(model: nn.Module, frames: int) -> tuple[Tensor, ...]:
    geometry = Geometry.from_model(model)
    noise = torch.zeros(1, geometry.samples_per_frame * frames, geometry.harmonics)
    return torch.zeros(1, 2 * frames), torch.tensor([frames]), noise


def _decoder_example(model: nn.Module, frames: int) -> tuple[Tensor, ...]:
    spectrum_channels = model.decoder.generator.post_n_fft + 2
    spectrum_frames = Geometry.from_model(model).spectrum_per_frame * frames + 1
    return (
        torch.zeros(1, model.decoder.asr_res[0].in_channels, frames),
        torch.zeros(1, 2 * frames),
        torch.zeros(1, 2 * frames),
        torch.tensor([frames]),
        torch.zeros(1, STYLE_DIM),
        torch.zeros(1, spectrum_channels, spectrum_frames),
    )


STAGES: dict[str, StageSpec] = {
    spec.name: spec
    for spec in (
        StageSpec(
            "text",
            "tokens",
            ("input_ids", "lengths", "style"),
            ("d", "duration", "t_en"),
            TextStage,
            _text_example,
            _text_dynamic,
        ),
        StageSpec(
            "prosody",
            "frames",
            ("en", "lengths", "style"),
            ("F0", "N"),
            ProsodyStage,
            _prosody_example,
            _prosody_dynamic,
        ),
        StageSpec(
            "source",
            "frames",
            ("F0", "lengths", "noise"),
            ("spectrum",),
            SourceStage,
            _source_example,
            _source_dynamic,
        ),
        StageSpec(
            "decoder",
            "frames",
            ("asr", "F0", "N", "lengths", "style", "spectrum"),
            ("audio",),
            DecoderStage,
            _decoder_example,
            _decoder_dynamic,
        ),
    )
}
