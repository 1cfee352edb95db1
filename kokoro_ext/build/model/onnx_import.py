"""Kokoro-82M from an ONNX export (int8 or float32) as a float32 state dict for ``KModel``.

The exports kokoro-onnx users run (``kokoro-v1.0.onnx``, ``kokoro-v1.0.int8.onnx``) hold
the same weights as kokoro's ``kokoro-v1_0.pth``, but in the graph's form:

* Names.  Some initializers carry the module path of the exporting wrapper
  (``encoder.predictor.F0.0.norm1.fc.weight_quantized``, ``decoder.decoder.decode.0.conv1.bias``);
  others are named after the graph node that produced them before constant folding
  (``/decoder/decoder/decode.0/Mul_output_0``: a convolution weight with its weight
  normalization folded in) or are anonymous (``onnx::MatMul_6547``, ``onnx::LSTM_6930``).
  A weight is placed by the node that consumes it: the node's scope
  (``/encoder/F0.0/conv1/Conv_quant``) names the module, and where the initializer's own
  name also names one, the two must agree.
* Quantization (int8 export).  ``ConvInteger`` weights are uint8 with one scale and zero
  point per tensor, ``MatMulInteger`` weights int8 with one per output column, embedding
  tables int8 behind ``DequantizeLinear``, ``DynamicQuantizeLSTM`` weights int8 with one
  per direction.  The weight is ``(q - zero_point) * scale``; the scale of a
  ConvInteger/MatMulInteger weight is found downstream, where the integer result is
  multiplied by (activation scale x weight scale).  Scales and zero points that hold the
  same values are shared between weights in the file.
* Layout.  Linear weights are stored transposed (``[in, out]``); LSTM weights stack the
  two directions and use ONNX's gate order (i, o, f, c; torch: i, f, c, o), quantized LSTM
  weights are also transposed (``[dirs, in, 4h]``), and the two biases are joined
  (``[dirs, 8h]``).  Weight-normalized convolutions come folded: ``weight_v`` is the folded
  weight and ``weight_g`` its norm over the dims ``weight_norm`` uses (all but dim 0), so
  ``g * v / |v|`` gives the folded weight back.

Two groups of KModel parameters are not in the exports, because kokoro's output does not
depend on them: ALBERT's pooler (its output is discarded) and the affine parameters of the
AdaIN instance norms (the export normalizes without them, as kokoro intends: see the
comment in ``kokoro.istftnet.AdaIN1d``).  They are set to zeros and to the identity
(weight 1, bias 0) respectively, and reported.

Every initializer is accounted for: a parameter's value, its scale or zero point, a value
derived from a parameter (``1 / alpha`` of the Snake activations, checked), or a constant
of the graph that is no parameter (shapes, axes, epsilons, the iSTFT basis and window of
kokoro's parameter-free STFT module, zero initial LSTM states, the unit scale of a
functional layer norm).  An initializer that is none of these, or a parameter that stays
unfilled, is a ValueError naming it.

Needs the ``onnx`` package (not TVM).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

#: ONNX's LSTM gate blocks (i, o, f, c) in torch's order (i, f, g=c, o).
_ONNX_TO_TORCH_GATES = (0, 2, 3, 1)
#: Suffixes onnxruntime's quantizer appends to a weight's name.
_QUANT_SUFFIXES = ("_quantized", "_scale", "_zero_point")
#: Largest float initializer taken as a plain graph constant (epsilons, resize scales,
#: harmonic numbers, an STFT window) when no parameter claims it.
_SMALL_CONSTANT = 32


@dataclass(frozen=True)
class Placement:
    """What one ONNX initializer is: its role and the KModel parameters it feeds."""

    initializer: str
    role: str  # "weight", "scale", "zero point", "bias", "parameter", "derived", "constant"
    targets: tuple[str, ...] = ()
    note: str = ""


@dataclass
class OnnxWeights:
    """The float32 state dict imported from an ONNX file and how it was assembled."""

    path: Path
    quantized: bool  # int8 export (integer ops) rather than float32
    state_dict: dict[str, torch.Tensor]
    placements: dict[str, list[Placement]]  # initializer -> its roles (shared ones have several)
    from_onnx: set[str]  # KModel state keys filled from initializers
    filled: dict[str, str]  # KModel state keys not in the export -> what they were set to, why

    @property
    def initializers(self) -> int:
        return len(self.placements)

    def roles(self) -> Counter:
        """How many initializers have each role (an initializer counts once, its first role)."""
        return Counter(entries[0].role for entries in self.placements.values())

    def summary(self) -> str:
        """A few lines accounting for every initializer and parameter."""
        roles = ", ".join(f"{n} {role}" for role, n in sorted(self.roles().items()))
        feeding = sum(
            1 for entries in self.placements.values() if any(p.role != "constant" for p in entries)
        )
        reasons = Counter(self.filled.values())
        lines = [
            f"{self.path.name}: {'int8' if self.quantized else 'float32'} export, "
            f"{self.initializers} initializers ({roles})",
            f"{feeding} initializers placed into {len(self.from_onnx)} KModel parameters; "
            f"{self.initializers - feeding} are graph constants, not parameters",
        ]
        lines += [f"{n} parameters not in the export, {why}" for why, n in reasons.items()]
        return "\n".join(lines)


class _Graph:
    """Initializers, producers and consumers of an ONNX graph."""

    def __init__(self, model) -> None:
        from onnx import numpy_helper

        graph = model.graph
        self.nodes = list(graph.node)
        self.init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        # Constant nodes are initializers under another name; treat them alike.
        for node in self.nodes:
            if node.op_type == "Constant" and node.output:
                for attr in node.attribute:
                    if attr.name == "value":
                        self.init[node.output[0]] = numpy_helper.to_array(attr.t)
        self.producer = {out: node for node in self.nodes for out in node.output}
        self.consumers: dict[str, list[tuple]] = defaultdict(list)
        for node in self.nodes:
            for i, name in enumerate(node.input):
                if name:
                    self.consumers[name].append((node, i))

    def attr(self, node, name: str, default=None):
        for a in node.attribute:
            if a.name == name:
                from onnx import helper

                return helper.get_attribute_value(a)
        return default

    def input(self, node, i: int) -> str | None:
        """The initializer at input ``i`` of ``node``, if that input is one."""
        if i < len(node.input) and node.input[i] in self.init:
            return node.input[i]
        return None

    def weight_scale(self, node) -> str | None:
        """The weight scale of a ConvInteger/MatMulInteger: downstream, where the integer
        result (after an optional bias Add and the Cast to float) is multiplied by the
        product activation scale x weight scale."""
        frontier, seen = [node.output[0]], set()
        for _ in range(4):
            following = []
            for value in frontier:
                for user, _i in self.consumers.get(value, []):
                    if id(user) in seen:
                        continue
                    seen.add(id(user))
                    if user.op_type == "Mul":
                        other = user.input[1] if user.input[0] == value else user.input[0]
                        if other in self.init:
                            return other
                        maker = self.producer.get(other)
                        if maker is not None and maker.op_type == "Mul":
                            found = [x for x in maker.input if x in self.init]
                            if len(found) == 1:
                                return found[0]
                    elif user.op_type in ("Add", "Cast", "Reshape"):
                        following.extend(user.output)
            frontier = following
        return None

    def dequantize_linear_after(self, node):
        """The DequantizeLinear a quantized Gather's output goes through."""
        for user, _i in self.consumers.get(node.output[0], []):
            if user.op_type == "DequantizeLinear":
                return user
        return None


_KINDS = {
    nn.Conv1d: "conv",
    nn.ConvTranspose1d: "conv_transpose",
    nn.Linear: "linear",
    nn.Embedding: "embedding",
    nn.LSTM: "lstm",
}


def _module_kind(module: nn.Module) -> str | None:
    for cls, kind in _KINDS.items():
        if isinstance(module, cls):
            return kind
    return None


class _Resolver:
    """Module paths of KModel, looked up from ONNX scopes and initializer names."""

    def __init__(self, model: nn.Module) -> None:
        self.modules = {name: m for name, m in model.named_modules() if name}
        self.state = model.state_dict()
        self.kinds = {name: _module_kind(m) for name, m in self.modules.items()}

    def module_for_scope(self, node_name: str, kind: str) -> str | None:
        """The module of ``kind`` a node's scope (``/encoder/F0.0/conv1/Conv_quant``) names.

        Scopes are the exporting wrapper's, so only their tail is KModel's: the module is
        the one of the right kind whose path ends with the longest tail of the scope that
        matches any (``F0.0.conv1`` -> ``predictor.F0.0.conv1``).  ONNX tracing numbers
        repeated calls of one module (``attention_1/query_1``); the numbers are dropped
        when the scope does not match as it is.  None if no tail names exactly one module.
        """
        parts = [p for p in node_name.split("/") if p][:-1]
        for candidate in (parts, [re.sub(r"_\d+$", "", p) for p in parts]):
            for k in range(len(candidate), 0, -1):
                tail = ".".join(candidate[-k:])
                found = [
                    path
                    for path, has in self.kinds.items()
                    if has == kind and (path == tail or path.endswith("." + tail))
                ]
                if len(found) == 1:
                    return found[0]
                if len(found) > 1:
                    break
        return None

    def state_key(self, name: str) -> str | None:
        """The KModel state key an initializer name (wrapper prefix and quantization
        suffix allowed) spells, or the module path + ``.weight`` of a weight-normalized
        module.  ``decoder.decoder.decode.0.conv1.bias`` -> ``decoder.decode.0.conv1.bias``."""
        for suffix in _QUANT_SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        parts = name.split(".")
        for k in range(len(parts)):
            key = ".".join(parts[k:])
            if key in self.state or (
                key.endswith(".weight") and key[: -len(".weight")] + ".weight_v" in self.state
            ):
                return key
        return None

    def parameter_free_owner(self, name: str) -> str | None:
        """The parameter-free KModel module an initializer's name lies under, if any
        (``decoder.decoder.generator.stft.istft.stft.inverse_basis`` -> ``decoder.generator.stft``)."""
        parts = name.split(".")
        for k in range(len(parts)):
            for j in range(len(parts), k, -1):
                path = ".".join(parts[k:j])
                module = self.modules.get(path)
                if module is not None and j < len(parts):
                    if not any(True for _ in module.parameters()):
                        return path
                    break
        return None


def _dequantize(q: np.ndarray, zero_point: np.ndarray | None, scale: np.ndarray, axis: int) -> np.ndarray:
    """``(q - zero_point) * scale`` with per-tensor or per-``axis`` scale and zero point."""
    values = q.astype(np.float32)

    def along(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if x.size <= 1:
            return x.reshape(())
        shape = [1] * q.ndim
        shape[axis] = x.size
        return x.reshape(shape)

    if zero_point is not None:
        values = values - along(zero_point)
    return values * along(scale)


def _gates_to_torch(x: np.ndarray, axis: int) -> np.ndarray:
    blocks = np.split(x, 4, axis=axis)
    return np.concatenate([blocks[i] for i in _ONNX_TO_TORCH_GATES], axis=axis)


class _Importer:
    def __init__(self, path: Path, model: nn.Module) -> None:
        import onnx

        try:
            proto = onnx.load(str(path))
        except Exception as err:  # onnx raises DecodeError, OSError, ...
            raise ValueError(f"cannot read ONNX model {path}: {err}") from err
        self.path = path
        self.graph = _Graph(proto)
        self.names = {t.name for t in proto.graph.initializer}
        self.resolve = _Resolver(model)
        self.values: dict[str, np.ndarray] = {}
        self.placements: dict[str, list[Placement]] = defaultdict(list)
        self.quantized = False
        self.problems: list[str] = []

    # -- placing --------------------------------------------------------------------------

    def place(self, name: str | None, role: str, targets: Iterable[str], note: str = "") -> None:
        if name is not None and name in self.names:
            self.placements[name].append(Placement(name, role, tuple(targets), note))

    def put(self, key: str, value: np.ndarray, source: str) -> None:
        expected = self.resolve.state.get(key)
        if expected is None:
            self.problems.append(f"{source} would go to {key}, which KModel does not have")
            return
        value = np.asarray(value, dtype=np.float32)
        if value.size != expected.numel():
            self.problems.append(
                f"{source} -> {key}: {list(value.shape)} does not fit {list(expected.shape)}"
            )
            return
        if key in self.values:
            if not np.array_equal(self.values[key], value.reshape(tuple(expected.shape))):
                self.problems.append(f"{source} -> {key}: a second, different value")
            return
        self.values[key] = value.reshape(tuple(expected.shape))

    def put_weight(self, module: str, weight: np.ndarray, source: str) -> list[str]:
        """A module's weight; a weight-normalized module gets ``weight_v`` = the weight and
        ``weight_g`` = its norm over all dims but 0, which multiply back to the weight."""
        if module + ".weight_v" in self.resolve.state:
            axes = tuple(range(1, weight.ndim))
            # A channel quantized to all zeros has norm 0, and g * v / |v| would be 0 / 0:
            # give it v = 1 (any nonzero direction), so that g = 0 makes it exactly 0.
            zero = ~weight.any(axis=axes, keepdims=True)
            weight = np.where(zero, np.float32(1), weight).astype(np.float32)
            # The norm as torch's weight norm computes it, so that g / |v| is exactly 1 and
            # g * v / |v| gives back the checkpoint's values bit for bit.
            v = torch.from_numpy(np.ascontiguousarray(weight))
            ones = torch.ones((weight.shape[0],) + (1,) * len(axes))
            _, norm = torch._weight_norm_interface(v, ones, 0)
            norm = np.where(zero, np.float32(0), norm.numpy().reshape(zero.shape))
            self.put(module + ".weight_v", weight, source)
            self.put(module + ".weight_g", norm.astype(np.float32), source)
            return [module + ".weight_v", module + ".weight_g"]
        self.put(module + ".weight", weight, source)
        return [module + ".weight"]

    # -- the weight-bearing nodes ---------------------------------------------------------

    def target(self, weight: str, nodes: list, kind: str) -> str | None:
        """The module whose weight ``weight`` is, from its consumers' scopes and its name."""
        from_scope = {self.resolve.module_for_scope(n.name, kind) for n in nodes} - {None}
        key = self.resolve.state_key(weight)
        from_name = None
        if key is not None:
            from_name = key.rsplit(".", 1)[0]
            if self.resolve.kinds.get(from_name) != kind:
                from_name = None
        if len(from_scope) > 1:
            self.problems.append(f"{weight} is used by nodes of different modules: {sorted(from_scope)}")
            return None
        scoped = next(iter(from_scope), None)
        if scoped and from_name and scoped != from_name:
            self.problems.append(
                f"{weight}: its name says {from_name} but its node "
                f"({nodes[0].name}) is in {scoped}"
            )
            return None
        return scoped or from_name

    def weights(self) -> None:
        g = self.graph
        users: dict[tuple[str, str], list] = defaultdict(list)  # (weight, op) -> nodes
        for node in g.nodes:
            op = node.op_type
            index = {"Conv": 1, "ConvInteger": 1, "ConvTranspose": 1, "MatMul": 1,
                     "MatMulInteger": 1, "Gemm": 1, "Gather": 0, "LSTM": 1,
                     "DynamicQuantizeLSTM": 1}.get(op)
            if index is None:
                continue
            weight = g.input(node, index)
            if weight is None or weight not in self.names:
                continue
            if op == "Gather" and not (
                g.init[weight].dtype == np.float32 or g.dequantize_linear_after(node) is not None
            ):
                continue
            users[(weight, op)].append(node)
        for (weight, op), nodes in users.items():
            kind = {"Conv": "conv", "ConvInteger": "conv", "ConvTranspose": "conv_transpose",
                    "MatMul": "linear", "MatMulInteger": "linear", "Gemm": "linear",
                    "Gather": "embedding", "LSTM": "lstm", "DynamicQuantizeLSTM": "lstm"}[op]
            module = self.target(weight, nodes, kind)
            if module is None:
                continue  # left unplaced: reported at the end unless something else claims it
            getattr(self, "_" + op.lower())(module, weight, nodes[0])

    def _scaled(self, module: str, weight: str, node, zp_index: int | None, axis: int) -> np.ndarray:
        g = self.graph
        self.quantized = True
        scale = g.weight_scale(node)
        zero_point = g.input(node, zp_index) if zp_index is not None else None
        if scale is None:
            self.problems.append(f"{weight}: no weight scale found after {node.name}")
            return g.init[weight].astype(np.float32)
        self.place(scale, "scale", [module + ".weight"])
        self.place(zero_point, "zero point", [module + ".weight"])
        zp = g.init[zero_point] if zero_point is not None else None
        return self._dequantize(g.init[weight], zp, g.init[scale], axis)

    def _conv(self, module: str, weight: str, node) -> None:
        self.place(weight, "weight", self.put_weight(module, self.graph.init[weight], weight))

    _convtranspose = _conv

    def _convinteger(self, module: str, weight: str, node) -> None:
        w = self._scaled(module, weight, node, 3, axis=0)
        self.place(weight, "weight", self.put_weight(module, w, weight))

    def _matmul(self, module: str, weight: str, node) -> None:
        self.place(weight, "weight", self.put_weight(module, self.graph.init[weight].T, weight))

    def _matmulinteger(self, module: str, weight: str, node) -> None:
        w = self._scaled(module, weight, node, 3, axis=1)  # [in, out]: per output column
        self.place(weight, "weight", self.put_weight(module, w.T, weight))

    def _gemm(self, module: str, weight: str, node) -> None:
        w = self.graph.init[weight]
        if not self.graph.attr(node, "transB", 0):
            w = w.T
        self.place(weight, "weight", self.put_weight(module, w, weight))
        bias = self.graph.input(node, 2)
        if bias is not None and module + ".bias" in self.resolve.state:
            self.put(module + ".bias", self.graph.init[bias], bias)
            self.place(bias, "bias", [module + ".bias"])

    def _gather(self, module: str, weight: str, node) -> None:
        g = self.graph
        table = g.init[weight]
        dq = g.dequantize_linear_after(node)
        if dq is not None:
            self.quantized = True
            scale, zero_point = g.input(dq, 1), g.input(dq, 2)
            self.place(scale, "scale", [module + ".weight"])
            self.place(zero_point, "zero point", [module + ".weight"])
            zp = g.init[zero_point] if zero_point is not None else None
            table = self._dequantize(table, zp, g.init[scale], axis=1)
        self.place(weight, "weight", self.put_weight(module, table, weight))

    def _lstm(self, module: str, weight: str, node, quantized: bool = False) -> None:
        g = self.graph
        w, r, b = g.input(node, 1), g.input(node, 2), g.input(node, 3)
        if r is None:
            self.problems.append(f"{node.name}: recurrent weights are not an initializer")
            return
        W, R = g.init[w], g.init[r]
        if quantized:
            self.quantized = True
            scales = [g.input(node, i) for i in (8, 9, 10, 11)]
            if scales[0] is None or scales[2] is None:
                self.problems.append(f"{node.name}: weight scales are not initializers")
                return
            zp = [g.init[s] if s is not None else None for s in (scales[1], scales[3])]
            # [dirs, in, 4h], scale and zero point per direction (or per dir and gate row)
            W = np.swapaxes(self._lstm_dequantize(W, zp[0], g.init[scales[0]]), 1, 2)
            R = np.swapaxes(self._lstm_dequantize(R, zp[1], g.init[scales[2]]), 1, 2)
            self.place(scales[0], "scale", [module + ".weight_ih_l0"])
            self.place(scales[1], "zero point", [module + ".weight_ih_l0"])
            self.place(scales[2], "scale", [module + ".weight_hh_l0"])
            self.place(scales[3], "zero point", [module + ".weight_hh_l0"])
        directions = W.shape[0]
        suffixes = ["_l0", "_l0_reverse"][:directions]
        hidden4 = W.shape[1]
        B = g.init[b] if b is not None else np.zeros((directions, 2 * hidden4), np.float32)
        keys = []
        for d, suffix in enumerate(suffixes):
            for name, value in (
                ("weight_ih", W[d]),
                ("weight_hh", R[d]),
                ("bias_ih", B[d, :hidden4]),
                ("bias_hh", B[d, hidden4:]),
            ):
                key = f"{module}.{name}{suffix}"
                self.put(key, _gates_to_torch(value, 0), f"{node.name} ({name})")
                keys.append(key)
        self.place(w, "weight", [k for k in keys if ".weight_ih" in k])
        self.place(r, "weight", [k for k in keys if ".weight_hh" in k])
        self.place(b, "bias", [k for k in keys if ".bias_" in k])
        for i in (5, 6):  # initial hidden and cell state
            init = g.input(node, i)
            if init is not None and not np.any(g.init[init]):
                self.place(init, "constant", (), f"zero initial LSTM state of {module}")

    # the two ways a quantized weight becomes floats, methods so that _CodesImporter can
    # follow its integer codes and scales through the same placing instead
    _dequantize = staticmethod(_dequantize)

    @staticmethod
    def _lstm_dequantize(q: np.ndarray, zero_point, scale) -> np.ndarray:
        scale = np.asarray(scale, np.float32)
        zp = np.zeros_like(scale) if zero_point is None else np.asarray(zero_point, np.float32)
        if scale.ndim == 1:  # per direction
            return (q.astype(np.float32) - zp[:, None, None]) * scale[:, None, None]
        return (q.astype(np.float32) - zp[:, None, :]) * scale[:, None, :]  # per direction and column

    def _dynamicquantizelstm(self, module: str, weight: str, node) -> None:
        self._lstm(module, weight, node, quantized=True)

    # -- everything else ------------------------------------------------------------------

    def named_parameters(self) -> None:
        """Float initializers whose name is a KModel parameter (biases, norms, alphas)."""
        for name in self.names:
            if self.placements.get(name):
                continue
            key = self.resolve.state_key(name)
            value = self.graph.init[name]
            if key is None or key not in self.resolve.state or value.dtype != np.float32:
                continue
            if key in self.values:
                continue
            self.put(key, value, name)
            self.place(name, "bias" if key.endswith(".bias") else "parameter", [key])

    def derived_and_constants(self) -> None:
        g = self.graph
        reciprocals = {}
        for key, value in self.values.items():
            if re.search(r"\.alpha\d\.\d+$", key):
                reciprocals[key] = 1.0 / value.astype(np.float64)
        for name in sorted(self.names):
            if self.placements.get(name):
                continue
            value = g.init[name]
            users = g.consumers.get(name, [])
            ops = {(n.op_type, i) for n, i in users}
            owner = self.resolve.parameter_free_owner(name)
            if owner is not None:
                self.place(name, "constant", (), f"of {owner}, which has no parameters")
                continue
            # int8/uint8 are quantized weights and zero points, never shapes or indices
            if value.dtype == np.bool_ or (value.dtype.kind in "iu" and value.dtype.itemsize > 1):
                self.place(name, "constant", (), "integer constant (shape, axis, index)")
                continue
            if value.dtype != np.float32:
                continue
            if value.size <= _SMALL_CONSTANT:
                self.place(name, "constant", (), "scalar or small graph constant")
                continue
            if ops and all(op == ("LayerNormalization", 1) for op in ops) and np.all(value == 1):
                self.place(name, "constant", (), "unit scale of a functional layer_norm")
                continue
            if ops and all(op == ("LayerNormalization", 2) for op in ops) and not np.any(value):
                self.place(name, "constant", (), "zero bias of a functional layer_norm")
                continue
            if ops and all(op[0] in ("LSTM", "DynamicQuantizeLSTM") and op[1] in (5, 6) for op in ops) and not np.any(value):
                self.place(name, "constant", (), "zero initial LSTM state")
                continue
            for key, reciprocal in reciprocals.items():
                if reciprocal.size == value.size and np.allclose(
                    value.ravel(), reciprocal.ravel(), rtol=1e-5, atol=0
                ):
                    self.place(name, "derived", [key], f"1 / {key} (Snake activation)")
                    break

    def fill_missing(self) -> dict[str, str]:
        """KModel parameters no initializer gave: the known absent ones, else problems."""
        filled = {}
        modules = self.resolve.modules
        for key, expected in self.resolve.state.items():
            if key in self.values:
                continue
            owner = key.rsplit(".", 1)[0]
            if isinstance(modules.get(owner), nn.InstanceNorm1d):
                value = np.ones if key.endswith(".weight") else np.zeros
                self.values[key] = value(tuple(expected.shape), np.float32)
                filled[key] = "set to the identity (weight 1, bias 0): instance norm without affine in the export"
            elif owner.startswith("bert.pooler"):
                self.values[key] = np.zeros(tuple(expected.shape), np.float32)
                filled[key] = "set to 0: ALBERT's pooler, whose output KModel discards"
            else:
                self.problems.append(f"KModel parameter {key} {list(expected.shape)} is in no initializer")
        return filled

    def run(self) -> OnnxWeights:
        self.weights()
        self.named_parameters()
        self.derived_and_constants()
        from_onnx = set(self.values)
        filled = self.fill_missing()
        unplaced = sorted(n for n in self.names if not self.placements.get(n))
        for name in unplaced:
            value = self.graph.init[name]
            users = ", ".join(sorted({n.name for n, _ in self.graph.consumers.get(name, [])})[:2])
            self.problems.append(
                f"initializer {name} ({value.dtype} {list(value.shape)}, used by {users or 'nothing'}) "
                "cannot be placed"
            )
        if self.problems:
            shown = "\n  ".join(self.problems[:12])
            more = f"\n  ... and {len(self.problems) - 12} more" if len(self.problems) > 12 else ""
            raise ValueError(
                f"{self.path} does not map onto Kokoro's KModel for this config "
                f"({len(self.problems)} problems):\n  {shown}{more}\n"
                "Pass a Kokoro-82M v1.0 ONNX export (kokoro-v1.0.onnx or kokoro-v1.0.int8.onnx) "
                "with the config it was exported from."
            )
        state = {
            key: torch.from_numpy(np.array(self.values[key], dtype=np.float32)).reshape(expected.shape)
            for key, expected in self.resolve.state.items()
        }
        return OnnxWeights(
            path=self.path,
            quantized=self.quantized,
            state_dict=state,
            placements=dict(self.placements),
            from_onnx=from_onnx,
            filled=filled,
        )


def import_onnx(path: str | Path, model: nn.Module) -> OnnxWeights:
    """The float32 state dict for ``model`` (a ``kokoro.KModel``) in an ONNX export.

    ``model`` gives the parameter names and shapes (its values are not used).  Raises
    ValueError naming every initializer that cannot be placed and every parameter left
    unfilled.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"ONNX model {path} does not exist")
    return _Importer(path, model).run()


# -- the int8 codes behind the floats ------------------------------------------------------


@dataclass(frozen=True)
class QuantizedTensor:
    """A state dict tensor of an int8 export as its integer codes (``q - zero_point`` less
    ``offset``, in the state's layout) and float32 scales that broadcast against them:
    ``(codes.astype(float32) + offset) * scale`` is the imported value bit for bit (the
    importer computes ``(float32(q) - zero_point) * scale``, whose difference is an exact
    integer, as is the sum here)."""

    codes: np.ndarray  # int8; uint8 with an offset where q - zero_point leaves int8's range
    scale: np.ndarray  # float32, of the codes' rank, 1 along every axis it does not vary
    offset: int = 0  # added to the codes: a uint8 convolution's codes less their zero point

    def values(self) -> np.ndarray:
        return (self.codes.astype(np.float32) + np.float32(self.offset)) * self.scale


class _CodesImporter(_Importer):
    """The importer placing, instead of a quantized weight's values, its codes
    (``follow="codes"``) or its scale spread over every element (``follow="scales"``),
    through the same transposes, gate orders and direction splits."""

    def __init__(self, path: Path, model: nn.Module, follow: str) -> None:
        super().__init__(path, model)
        self.follow = follow

    def _dequantize(self, q, zero_point, scale, axis):  # type: ignore[override]
        if self.follow == "codes":
            return _dequantize(q, zero_point, np.float32(1), axis)
        return _dequantize(np.ones_like(q), None, scale, axis)

    def _lstm_dequantize(self, q, zero_point, scale):  # type: ignore[override]
        if self.follow == "codes":
            return _Importer._lstm_dequantize(q, zero_point, np.ones_like(np.asarray(scale, np.float32)))
        return _Importer._lstm_dequantize(np.ones_like(q), None, scale)


def _least_scale(scale: np.ndarray) -> np.ndarray:
    """``scale`` cut to one element along every axis where it does not vary."""
    for axis in range(scale.ndim):
        first = np.take(scale, [0], axis=axis)
        if np.array_equal(scale, np.broadcast_to(first, scale.shape)):
            scale = first
    return np.ascontiguousarray(scale)


def quantized_codes(path: str | Path, model: nn.Module,
                    imported: OnnxWeights | None = None) -> dict[str, QuantizedTensor]:
    """The state dict tensors of an int8 export (``import_onnx(path, model)``, or
    ``imported``) that are its dequantized weights, as QuantizedTensor, each checked to
    give the imported value bit for bit.  A tensor that is not (a float parameter, a
    weight norm's ``weight_g``, a weight-normalized ``weight_v`` whose all-zero channels
    the importer set to 1) is left out: the caller keeps its floats."""
    path = Path(path)
    imported = imported if imported is not None else import_onnx(path, model)
    if not imported.quantized:
        return {}
    codes = _CodesImporter(path, model, "codes").run().state_dict
    scales = _CodesImporter(path, model, "scales").run().state_dict
    found = {}
    for key, tensor in imported.state_dict.items():
        value, k = tensor.numpy(), codes[key].numpy()
        if np.array_equal(k, value) or not np.array_equal(k, np.rint(k)):
            continue  # not a dequantized weight (or its scale is 1: nothing to gain)
        scale = _least_scale(scales[key].numpy().astype(np.float32))
        if key.endswith(".weight_v"):
            # channels quantized to all zeros, which put_weight set to 1: code 1, scale 1
            ones = np.all(value.reshape(len(value), -1) == 1, axis=1) & np.all(
                k.reshape(len(k), -1) == 1, axis=1)
            if ones.any():
                scale = np.broadcast_to(scale, (len(k),) + scale.shape[1:]).copy()
                scale[ones] = 1
        low, high = int(k.min(initial=0)), int(k.max(initial=0))
        if -128 <= low and high <= 127:
            q = QuantizedTensor(k.astype(np.int8), scale)
        elif high - low <= 255:
            q = QuantizedTensor((k - low).astype(np.uint8), scale, low)
        else:
            continue  # not one byte's codes
        if np.array_equal(q.values().view(np.uint32), value.view(np.uint32)):
            found[key] = q
    return found
