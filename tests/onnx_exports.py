"""Small ONNX files in the form of kokoro-onnx's Kokoro exports, for the importer tests.

``write_export(model, path, quantized=True)`` writes the parameters of a (small-config)
``kokoro.KModel`` as the initializers of an ONNX graph laid out like
``kokoro-v1.0.int8.onnx`` (or, with ``quantized=False``, like the float32
``kokoro-v1.0.onnx``): the nodes that consume the weights, with the exporting wrapper's
scopes (``/encoder/F0.0/conv1/Conv_quant``: no ``predictor``), and the same three kinds of
names:

* module paths with onnxruntime's quantization suffixes (AdaIN ``fc`` weights, embedding
  tables, the plain convolutions, every bias, norm and Snake alpha);
* node names (``/decoder/decoder/decode.0/Mul_output_0_quantized``) for the
  weight-normalized convolutions, whose weight norm is folded in;
* anonymous names (``onnx::MatMul_7001_quantized``, ``onnx::LSTM_7100_quantized``) for the
  ALBERT and projection linears (stored [in, out]) and the LSTMs (ONNX gate order i, o,
  f, c; quantized LSTM weights stored [dirs, in, 4h]; the two biases joined).

Quantization is as onnxruntime's dynamic quantizer does it: uint8 per tensor for
ConvInteger, int8 per output column for MatMulInteger, int8 per tensor for embedding
tables and per direction for DynamicQuantizeLSTM, and scales and zero points with equal
values stored once and shared.  The graph is not meant to run: only the weight-bearing
nodes are there, enough to place every initializer.  Written with the onnx package only.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper
from torch import nn

TORCH_TO_ONNX_GATES = (0, 3, 1, 2)  # torch i, f, c, o -> onnx i, o, f, c


def wrapper_name(path: str) -> str:
    """The exporting wrapper's name of a KModel path (encoder.* / decoder.decoder.*)."""
    return ("decoder." if path.startswith("decoder.") else "encoder.") + path


def scope(path: str) -> str:
    """The wrapper's node scope of a KModel module path, with its quirks."""
    parts = path.split(".")
    out, i = [], 0
    while i < len(parts):  # ModuleList/Sequential indices stay with their name: F0.0
        if i + 1 < len(parts) and parts[i + 1].isdigit():
            out.append(f"{parts[i]}.{parts[i + 1]}")
            i += 2
        else:
            out.append(parts[i])
            i += 1
    if out[0] == "predictor" and out[1].split(".")[0] in ("F0", "N", "shared", "F0_proj", "N_proj"):
        out = out[1:]  # F0Ntrain's modules are traced in the wrapper's scope
    if out[0] == "text_encoder" and out[1].startswith("cnn."):
        out = [out[0], out[1], out[1] + "." + out[2]] + out[3:]  # cnn.0/cnn.0.0
    return "/" + "/".join(["decoder" if path.startswith("decoder.") else "encoder", *out])


class _Writer:
    def __init__(self) -> None:
        self.inits: dict[str, np.ndarray] = {}
        self.nodes: list = []
        self.shared: dict[tuple, str] = {}
        self.ids = itertools.count(7001)
        self.values = itertools.count()

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits[name] = np.asarray(value)
        return name

    def shared_init(self, name: str, value: np.ndarray) -> str:
        """Scales and zero points of equal value are stored once (as onnxruntime does)."""
        value = np.asarray(value)
        key = (value.dtype.str, value.shape, value.tobytes())
        if key not in self.shared:
            self.shared[key] = self.init(name, value)
        return self.shared[key]

    def value(self) -> str:
        return f"v{next(self.values)}"

    def node(self, op: str, inputs: list[str], name: str, outputs: int = 1, domain: str = "", **attrs):
        out = [self.value() for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, out, name=name, domain=domain or None, **attrs))
        return out


def _folded(module: nn.Module) -> np.ndarray:
    if hasattr(module, "weight_v"):
        v = module.weight_v.detach().double()
        g = module.weight_g.detach().double()
        norm = v.pow(2).sum(dim=tuple(range(1, v.dim())), keepdim=True).sqrt()
        return (g * v / norm).float().numpy()
    return module.weight.detach().numpy()


def _quant_uint8(w: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
    scale = np.float32((hi - lo) / 255 or 1.0)
    zp = np.uint8(np.clip(round(-lo / scale), 0, 255))
    q = np.clip(np.round(w / scale) + zp, 0, 255).astype(np.uint8)
    return q, scale, zp


def _quant_int8(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 (zero point 0), per tensor or per ``axis``."""
    reduce = None if axis is None else tuple(i for i in range(w.ndim) if i != axis)
    scale = (np.abs(w).max(axis=reduce, keepdims=True) / 127).astype(np.float32)
    scale[scale == 0] = 1.0
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    return q, scale.reshape(-1) if axis is not None else scale.reshape(())


def _onnx_gates(x: np.ndarray, axis: int) -> np.ndarray:
    blocks = np.split(x, 4, axis=axis)
    return np.concatenate([blocks[i] for i in TORCH_TO_ONNX_GATES], axis=axis)


def write_export(model: nn.Module, file: Path, quantized: bool = True) -> dict[str, float]:
    """Write ``model`` as a kokoro-onnx style export; returns each KModel parameter's
    quantization step (0 for parameters stored as float), for tolerances."""
    w = _Writer()
    step: dict[str, float] = {}
    placed: set[str] = set()
    act = w.value()  # stands for any activation; its scale and zero point likewise
    act_scale, act_zp = w.value(), w.value()

    def conv(path: str, module: nn.Module, transpose: bool = False) -> None:
        weight = _folded(module)
        normed = hasattr(module, "weight_v")
        keys = [f"{path}.weight_v", f"{path}.weight_g"] if normed else [f"{path}.weight"]
        placed.update(keys)
        parent = scope(path).rsplit("/", 1)[0]
        node_name = f"{scope(path)}/{'ConvTranspose' if transpose else 'Conv'}"
        base = f"{parent}/Mul_{next(w.ids)}_output_0" if normed else wrapper_name(path) + ".weight"
        if quantized and not transpose and path != "decoder.generator.conv_post":
            q, scale, zp = _quant_uint8(weight)
            wq = w.init(base + "_quantized", q)
            zp_name = w.shared_init(base + "_zero_point", zp)
            scale_name = w.shared_init(base + "_scale", scale)
            (out,) = w.node("ConvInteger", [act, wq, act_zp, zp_name], node_name + "_quant")
            (bias_scale,) = w.node("Mul", [act_scale, scale_name], wrapper_name(path) + ".bias_scale_node")
            (added,) = w.node("Add", [out, w.value()], wrapper_name(path) + ".bias_add")
            (cast,) = w.node("Cast", [added], node_name + "_cast", to=1)
            w.node("Mul", [cast, bias_scale], node_name + "_quant_output_scale_mul")
            for key in keys:
                step[key] = float(scale)
        else:
            inputs = [act, w.init(base, weight)]
            w.node("ConvTranspose" if transpose else "Conv", inputs, node_name)
            for key in keys:
                step[key] = 0.0

    def linear(path: str, module: nn.Linear, anonymous: bool, users: int = 1) -> None:
        weight = module.weight.detach().numpy().T  # [in, out]
        placed.add(f"{path}.weight")
        base = f"onnx::MatMul_{next(w.ids)}" if anonymous else wrapper_name(path) + ".weight"
        node_scope = scope(path)
        if quantized:
            q, scale = _quant_int8(weight, axis=1)
            wq = w.init(base + "_quantized", q)
            zp_name = w.shared_init(base + "_zero_point", np.zeros(q.shape[1], np.int8))
            scale_name = w.init(base + "_scale", scale)
            for k in range(users):  # ALBERT's one layer runs 12 times: attention_1/query_1, ...
                s = node_scope if k == 0 else "/".join(f"{p}_{k}" if p in ("attention", "query", "key", "value", "dense", "ffn", "ffn_output") else p for p in node_scope.split("/"))
                (out,) = w.node("MatMulInteger", [act, wq, act_zp, zp_name], f"{s}/MatMul_quant")
                (scales,) = w.node("Mul", [act_scale, scale_name], f"{s}/MatMul_quant_scales_mul")
                (cast,) = w.node("Cast", [out], f"{s}/MatMul_cast", to=1)
                w.node("Mul", [cast, scales], f"{s}/MatMul_quant_output_scale_mul")
            step[f"{path}.weight"] = float(scale.max())
        else:
            wf = w.init(base, weight)
            for _ in range(users):
                w.node("MatMul", [act, wf], f"{node_scope}/MatMul")
            step[f"{path}.weight"] = 0.0

    def embedding(path: str, module: nn.Embedding) -> None:
        table = module.weight.detach().numpy()
        placed.add(f"{path}.weight")
        base = wrapper_name(path) + ".weight"
        if quantized:
            q, scale = _quant_int8(table, axis=None)
            (out,) = w.node("Gather", [w.init(base + "_quantized", q), w.value()], f"{scope(path)}/Gather_quant")
            zp = w.shared_init(base + "_zero_point", np.int8(0))
            w.node("DequantizeLinear", [out, w.init(base + "_scale", scale), zp], f"{scope(path)}/Gather_quant_DequantizeLinear")
            step[f"{path}.weight"] = float(scale)
        else:
            w.node("Gather", [w.init(base, table), w.value()], f"{scope(path)}/Gather")
            step[f"{path}.weight"] = 0.0

    def lstm(path: str, module: nn.LSTM) -> None:
        dirs = ["_l0", "_l0_reverse"]
        get = lambda n: np.stack([getattr(module, n + d).detach().numpy() for d in dirs])  # noqa: E731
        W, R = _onnx_gates(get("weight_ih"), 1), _onnx_gates(get("weight_hh"), 1)  # [2, 4h, in]
        B = np.concatenate([_onnx_gates(get("bias_ih"), 1), _onnx_gates(get("bias_hh"), 1)], axis=1)
        keys = [f"{path}.{n}{d}" for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh") for d in dirs]
        placed.update(keys)
        n = next(w.ids)
        next(w.ids), next(w.ids)  # n + 1, n + 2 are this LSTM's too
        state = w.shared_init(f"{scope(path)}/ConstantOfShape_output_0", np.zeros((2, 1, module.hidden_size), np.float32))
        b = w.init(f"onnx::LSTM_{n}", B)
        if quantized:
            Wq, Ws = _quant_int8(np.swapaxes(W, 1, 2), axis=0)  # [2, in, 4h], per direction
            Rq, Rs = _quant_int8(np.swapaxes(R, 1, 2), axis=0)
            zp = w.shared_init(f"onnx::LSTM_{n + 1}_zero_point", np.zeros(2, np.int8))
            inputs = [act, w.init(f"onnx::LSTM_{n + 1}_quantized", Wq), w.init(f"onnx::LSTM_{n + 2}_quantized", Rq),
                      b, "", state, state, "", w.init(f"onnx::LSTM_{n + 1}_scale", Ws), zp,
                      w.init(f"onnx::LSTM_{n + 2}_scale", Rs), zp]
            w.node("DynamicQuantizeLSTM", inputs, f"{scope(path)}/LSTM_quant", outputs=3,
                   domain="com.microsoft", hidden_size=module.hidden_size, direction="bidirectional")
            for key in keys:
                step[key] = float(max(Ws.max(), Rs.max())) if "weight" in key else 0.0
        else:
            inputs = [act, w.init(f"onnx::LSTM_{n + 1}", W), w.init(f"onnx::LSTM_{n + 2}", R), b, "", state, state]
            w.node("LSTM", inputs, f"{scope(path)}/LSTM", outputs=3, hidden_size=module.hidden_size,
                   direction="bidirectional")
            for key in keys:
                step[key] = 0.0

    for path, module in model.named_modules():
        if isinstance(module, nn.Conv1d):
            conv(path, module)
        elif isinstance(module, nn.ConvTranspose1d):
            conv(path, module, transpose=True)
        elif isinstance(module, nn.Embedding):
            embedding(path, module)
        elif isinstance(module, nn.LSTM):
            lstm(path, module)
        elif isinstance(module, nn.Linear) and not path.startswith("bert.pooler"):
            named = path.endswith(".fc")  # AdaIN and AdaLayerNorm fc: named by path
            users = 2 if ".albert_layers." in path else 1
            linear(path, module, anonymous=not named, users=users)

    # Everything else that kokoro's output depends on is stored as float under its path.
    instance_norms = {p for p, m in model.named_modules() if isinstance(m, nn.InstanceNorm1d)}
    for key, value in model.state_dict().items():
        owner = key.rsplit(".", 1)[0]
        if key in placed or owner in instance_norms or owner.startswith("bert.pooler"):
            continue
        name = w.init(wrapper_name(key), value.detach().numpy())
        w.node("Add", [act, name], f"{scope(owner)}/Add")
        step[key] = 0.0
        if ".alpha" in key:  # Snake's 1 / alpha, constant-folded under a node name
            w.init(f"{scope(owner)}/Reciprocal_{next(w.ids)}_output_0", 1.0 / value.detach().numpy())
    # Graph constants that are no parameters.
    w.init("/encoder/bert/Constant_1_output_0", np.int64(1))
    w.init("/encoder/F0.0/norm1/Constant_10_output_0", np.float32(1e-5))
    w.init("splits", np.array([512, 512], np.int64))
    ones = w.init("/encoder/predictor/text_encoder/lstms.1/Constant_7_output_0", np.ones(512, np.float32))
    zeros = w.init("/encoder/predictor/text_encoder/lstms.1/Constant_8_output_0", np.zeros(512, np.float32))
    w.node("LayerNormalization", [act, ones, zeros], "/encoder/predictor/text_encoder/lstms.1/LayerNormalization")
    basis = w.init("decoder.decoder.generator.stft.istft.stft.inverse_basis", np.ones((22, 1, 20), np.float32))
    w.node("ConvTranspose", [act, basis], "/decoder/decoder/generator/istft/stft/ConvTranspose")
    w.init("decoder.decoder.generator.stft.istft.stft.window_sum", np.ones(2000, np.float32))
    write_model(w.nodes, w.inits, file)
    return step


def write_model(nodes: list, inits: dict[str, np.ndarray], path: Path) -> None:
    """An ONNX file of ``nodes`` and ``inits`` (not checked: it is not meant to run)."""
    graph = helper.make_graph(
        nodes, "kokoro", [], [], [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    )
    onnx.save(helper.make_model(graph), str(path))


def read_model(path: Path) -> tuple[list, dict[str, np.ndarray]]:
    """(nodes, initializers) of an ONNX file, to edit and write_model again."""
    proto = onnx.load(str(path))
    return list(proto.graph.node), {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def effective(model_or_state, key: str) -> torch.Tensor:
    """A parameter as the model computes with it: ``g * v / |v|`` for weight norm."""
    state = model_or_state if isinstance(model_or_state, dict) else model_or_state.state_dict()
    if key.endswith(".weight_v") or key.endswith(".weight_g"):
        base = key.rsplit(".", 1)[0]
        v, g = state[base + ".weight_v"].double(), state[base + ".weight_g"].double()
        return g * v / v.pow(2).sum(dim=tuple(range(1, v.dim())), keepdim=True).sqrt()
    return state[key].double()
