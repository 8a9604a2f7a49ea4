"""A quantized copy of a Hugging Face model directory, in the formats vLLM 0.32's CPU backend serves.

numpy only (no torch, no safetensors package: the project's own environment has neither). The input is a
directory of bf16 or fp32 safetensors (what servebench/models/hf_model.py writes, or any local one); the
output is the same model with every decoder linear layer (`model.layers.N.....*_proj.weight`, dense MLPs and
each MoE expert alike) quantized, everything else (embeddings, norms, biases, the MoE router, `lm_head`)
copied as it is, `quantization_config` added to config.json, the tokenizer files copied. Each format is
written as the tool that makes real checkpoints writes it, so vLLM loads it by the same code path:

- `w8a8`: compressed-tensors `int-quantized`: int8 weights, one scale per output channel, activations
  quantized to int8 per token at run time. vLLM's CPU kernel: `CPUInt8ScaledMMLinearKernel` (oneDNN's
  `onednn_scaled_mm` on x86 without AMX; the AMX `int8_scaled_mm_with_quant` with it).
- `w4a16`: compressed-tensors `pack-quantized`: int4 symmetric, a scale per group of 128 inputs, 8 values an
  int32 along the input. `CPUWNA16LinearKernel` (`cpu_gemm_wna16`).
- `gptq`: AutoGPTQ (`quant_method: gptq`, 4 bits, sym, group 128), `qweight` packed along the input.
  `CPUWNA16LinearKernel`.
- `awq`: AutoAWQ GEMM (`quant_method: awq`, 4 bits, zero point, group 128), packed along the output in
  AWQ's nibble order. `CPUWNA16LinearKernel`, after vLLM repacks it GPTQ's way.

The quantization is round-to-nearest with each format's own scale rule (compressed-tensors' min-max
observer, AutoGPTQ's and AutoAWQ's quantizers without their calibration): the weights are random, so there
is nothing for GPTQ's error correction or AWQ's activation-aware scaling to improve; what a benchmark needs
is the format's bytes and kernels. Scales are rounded (up) to the model's dtype first and the integers
computed from the rounded scale, so dequantizing the file gives back each weight within half a step (one
step at a group's edge for AWQ's zero points).

Deterministic: the same input bytes and format give the same output bytes. `servebench-model.json` is
written last (the cache's marker).
"""

from __future__ import annotations

import json
import math
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from servebench.models.hf_model import MARKER_NAME, bfloat16_bits, read_safetensors_header

GENERATOR_NAME = "servebench-hf-quantized"
GROUP_SIZE = 128                       # the group size the int4 formats ship with (and vLLM's CPU kernels take)
MAX_SHARD_BYTES = 5 * 10**9            # as hf_model: transformers' default max_shard_size
COPY_CHUNK_BYTES = 1 << 26             # an unquantized tensor is copied 64 MB at a time
COMPRESSED_TENSORS_VERSION = "0.17.0"  # the compressed-tensors release vLLM 0.32's venv has (its config layout)
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)   # which of 8 output columns each nibble of an AWQ int32 holds, low first
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I8": 1, "I32": 4, "I64": 8}
SOURCE_DTYPES = ("BF16", "F32")


@dataclass(frozen=True)
class QuantizedFormat:
    """One format a generated model can be written in: its name in a campaign (`model.quantization`), its
    bits, its group size along the input (None: one scale per output channel) and whether it keeps a zero
    point per group (asymmetric)."""

    name: str
    quant_method: str
    bits: int
    group_size: int | None
    zero_point: bool = False


FORMATS = {
    "w8a8": QuantizedFormat("w8a8", "compressed-tensors", 8, None),
    "w4a16": QuantizedFormat("w4a16", "compressed-tensors", 4, GROUP_SIZE),
    "gptq": QuantizedFormat("gptq", "gptq", 4, GROUP_SIZE),
    "awq": QuantizedFormat("awq", "awq", 4, GROUP_SIZE, zero_point=True),
}


def is_hf_quantization(value: str | None) -> bool:
    """Whether a `model.quantization` value names one of these formats (not a GGUF type)."""
    return value in FORMATS


def quantized_format(name: str) -> QuantizedFormat:
    if name not in FORMATS:
        raise ValueError(f"quantization {name!r}: not a Hugging Face quantized format ({', '.join(FORMATS)})")
    return FORMATS[name]


# --- what gets quantized --------------------------------------------------------------------------------

def is_quantized_linear(name: str, shape: tuple[int, ...]) -> bool:
    """A decoder layer's linear projection (attention, dense MLP, every expert): what llm-compressor,
    AutoGPTQ and AutoAWQ quantize. The MoE router (`mlp.gate`), embeddings, norms, biases and `lm_head`
    are not."""
    if len(shape) != 2 or not name.startswith("model.layers.") or not name.endswith(".weight"):
        return False
    module = name[: -len(".weight")].rsplit(".", 1)[-1]
    return module.endswith("_proj")


def check_shape(fmt: QuantizedFormat, name: str, shape: tuple[int, ...]) -> None:
    """Refuse a layer the format cannot hold: the group must divide the input, 8 values fill an int32."""
    out_features, in_features = shape
    if fmt.group_size and in_features % fmt.group_size:
        raise ValueError(f"{name}: input size {in_features} is not a multiple of {fmt.name}'s group size "
                         f"{fmt.group_size}")
    if fmt.bits == 4 and in_features % 8:
        raise ValueError(f"{name}: input size {in_features}: 4-bit packing needs a multiple of 8")
    if fmt.quant_method in ("gptq", "awq") and out_features % 8:
        raise ValueError(f"{name}: output size {out_features}: {fmt.name} packs outputs 8 to an int32")


# --- quantizers (float32 in, [out, in] as the checkpoint stores a linear weight) -----------------------------

def as_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to what a tensor of `dtype` (BF16 or F32) holds, still as float32."""
    if dtype == "F32":
        return values.astype(np.float32)
    bits = bfloat16_bits(np.array(values, dtype=np.float32, copy=True)).astype(np.uint32)
    return (bits << 16).view(np.float32)


def scale_in_dtype(scale: np.ndarray, dtype: str) -> np.ndarray:
    """Positive scales as `dtype` holds them, rounded up where rounding to nearest went down (one bf16 step
    more): a smaller scale would push the largest weights past the integer range, a larger one keeps every
    weight within half a step of what it dequantizes to."""
    rounded = as_dtype(scale, dtype)
    if dtype == "F32":
        return rounded
    below = rounded < scale
    bumped = ((rounded.view(np.uint32) >> 16) + 1) << 16
    return np.where(below, bumped.view(np.float32), rounded)


def _grouped(weight: np.ndarray, group_size: int | None) -> np.ndarray:
    """[out, in] as [out, groups, group] (one group spanning the input when per channel)."""
    out_features, in_features = weight.shape
    size = group_size or in_features
    return weight.reshape(out_features, in_features // size, size)


def quantize_symmetric(weight: np.ndarray, bits: int, group_size: int | None,
                       scale_dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Signed integers in [-2^(b-1), 2^(b-1) - 1] and a scale per (output, group): scale = max|w| / ((2^b - 1)
    / 2), compressed-tensors' symmetric rule (127.5 for int8, 7.5 for int4; AutoGPTQ's sym gives the same),
    clamped to float32's eps, in `scale_dtype` (`scale_in_dtype`). Every weight dequantizes within half a
    step of itself. Returns (int8 [out, in], float32 scales [out, groups] in `scale_dtype`'s values)."""
    groups = _grouped(weight.astype(np.float32, copy=False), group_size)
    largest = np.abs(groups).max(axis=2)
    scale = scale_in_dtype(np.maximum(largest / np.float32((2**bits - 1) / 2), np.finfo(np.float32).eps),
                           scale_dtype)
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    quantized = np.clip(np.rint(groups / scale[:, :, None]), low, high).astype(np.int8)
    return quantized.reshape(weight.shape), scale


def quantize_asymmetric(weight: np.ndarray, bits: int, group_size: int | None,
                        scale_dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unsigned integers in [0, 2^b - 1] with a zero point a group, AutoAWQ's rule: scale = (max - min) /
    (2^b - 1) (at least 1e-5), zero = clamp(-round(min / scale)), q = clamp(round(w / scale) + zero).
    The zero point's rounding may put a group's extreme weight half a step past the range: within one step
    there, half a step elsewhere. Returns (uint8 [out, in], float32 scales [out, groups], uint8 zeros
    [out, groups])."""
    groups = _grouped(weight.astype(np.float32, copy=False), group_size)
    top = np.float32(2**bits - 1)
    low, high = groups.min(axis=2), groups.max(axis=2)
    scale = scale_in_dtype(np.maximum((high - low) / top, np.float32(1e-5)), scale_dtype)
    zero = np.clip(-np.rint(low / scale), 0, top)
    quantized = np.clip(np.rint(groups / scale[:, :, None]) + zero[:, :, None], 0, top).astype(np.uint8)
    return quantized.reshape(weight.shape), scale, zero.astype(np.uint8)


def dequantize(quantized: np.ndarray, scale: np.ndarray, group_size: int | None,
               zero: np.ndarray | None = None) -> np.ndarray:
    """The float32 weight the integers and scales stand for ([out, in]): what a kernel multiplies by."""
    groups = _grouped(quantized.astype(np.float32), group_size)
    if zero is not None:
        groups = groups - zero.astype(np.float32)[:, :, None]
    return (groups * scale[:, :, None]).reshape(quantized.shape)


# --- packing --------------------------------------------------------------------------------------------

def pack_nibbles(values: np.ndarray, axis: int, order: tuple[int, ...] = tuple(range(8))) -> np.ndarray:
    """Unsigned 4-bit values (0-15) packed 8 to an int32 along `axis`, the first of `order` in the lowest
    bits (int32 holding the uint32 bit pattern, as torch packs them)."""
    moved = np.moveaxis(values.astype(np.uint32), axis, -1)
    lanes = moved.reshape(*moved.shape[:-1], moved.shape[-1] // 8, 8)
    packed = np.zeros(lanes.shape[:-1], dtype=np.uint32)
    for slot, lane in enumerate(order):
        packed |= lanes[..., lane] << np.uint32(4 * slot)
    return np.ascontiguousarray(np.moveaxis(packed, -1, axis)).view(np.int32)


def unpack_nibbles(packed: np.ndarray, axis: int, order: tuple[int, ...] = tuple(range(8))) -> np.ndarray:
    """The inverse of `pack_nibbles`: uint8 values 0-15, 8 times as many along `axis`."""
    moved = np.moveaxis(packed.view(np.uint32), axis, -1)
    lanes = np.zeros((*moved.shape, 8), dtype=np.uint8)
    for slot, lane in enumerate(order):
        lanes[..., lane] = (moved >> np.uint32(4 * slot)) & np.uint32(0xF)
    return np.moveaxis(lanes.reshape(*moved.shape[:-1], moved.shape[-1] * 8), -1, axis)


# --- one linear layer in each format ----------------------------------------------------------------------

@dataclass(frozen=True)
class OutputTensor:
    """A tensor of the quantized checkpoint: its name, safetensors dtype and shape (known before any value
    is computed, so the header is written first)."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


def quantized_tensors(fmt: QuantizedFormat, name: str, shape: tuple[int, ...], dtype: str) -> list[OutputTensor]:
    """The tensors that replace the linear weight `name` ([out, in], `dtype`): the names and layouts vLLM's
    loaders for the format register (CompressedTensorsW8A8Int8, CompressedTensorsWNA16, AutoGPTQLinearMethod,
    AutoAWQMarlinLinearMethod)."""
    prefix = name[: -len(".weight")]
    out_features, in_features = shape
    groups = in_features // (fmt.group_size or in_features)
    if fmt.name == "w8a8":
        return [OutputTensor(f"{prefix}.weight", "I8", shape),
                OutputTensor(f"{prefix}.weight_scale", dtype, (out_features, 1))]
    if fmt.name == "w4a16":
        return [OutputTensor(f"{prefix}.weight_packed", "I32", (out_features, in_features // 8)),
                OutputTensor(f"{prefix}.weight_scale", dtype, (out_features, groups)),
                OutputTensor(f"{prefix}.weight_shape", "I64", (2,))]
    if fmt.name == "gptq":
        return [OutputTensor(f"{prefix}.qweight", "I32", (in_features // 8, out_features)),
                OutputTensor(f"{prefix}.qzeros", "I32", (groups, out_features // 8)),
                OutputTensor(f"{prefix}.scales", dtype, (groups, out_features)),
                OutputTensor(f"{prefix}.g_idx", "I32", (in_features,))]
    return [OutputTensor(f"{prefix}.qweight", "I32", (in_features, out_features // 8)),
            OutputTensor(f"{prefix}.qzeros", "I32", (groups, out_features // 8)),
            OutputTensor(f"{prefix}.scales", dtype, (groups, out_features))]


def quantized_values(fmt: QuantizedFormat, weight: np.ndarray, dtype: str) -> list[np.ndarray]:
    """The values of `quantized_tensors`, in its order, as numpy arrays in the file's dtypes (scales as
    float32 here: encoded on writing)."""
    if fmt.zero_point:  # awq: [in, out / 8] along the output in AWQ's order; zeros alike
        quantized, scale, zero = quantize_asymmetric(weight, fmt.bits, fmt.group_size, dtype)
        return [pack_nibbles(quantized.T, axis=1, order=AWQ_ORDER), pack_nibbles(zero.T, axis=1, order=AWQ_ORDER),
                np.ascontiguousarray(scale.T)]
    signed, scale = quantize_symmetric(weight, fmt.bits, fmt.group_size, dtype)
    if fmt.name == "w8a8":
        return [signed, scale]
    unsigned = (signed.astype(np.int16) + 2 ** (fmt.bits - 1)).astype(np.uint8)  # the offset binary both use
    if fmt.name == "w4a16":
        return [pack_nibbles(unsigned, axis=1), scale, np.array(weight.shape, dtype=np.int64)]
    # gptq: [in / 8, out]; qzeros hold zero - 1 = 7 (AutoGPTQ's v1 layout; vLLM ignores them when sym)
    groups, in_features = scale.shape[1], weight.shape[1]
    zeros = np.full((groups, weight.shape[0]), 2 ** (fmt.bits - 1) - 1, dtype=np.uint8)
    g_idx = (np.arange(in_features) // (fmt.group_size or in_features)).astype(np.int32)
    return [pack_nibbles(unsigned.T, axis=0), pack_nibbles(zeros, axis=1), np.ascontiguousarray(scale.T), g_idx]


# --- config ---------------------------------------------------------------------------------------------

def router_modules(tensors: list[SourceTensor]) -> list[str]:
    """An MoE model's routers (`model.layers.N.mlp.gate`), which stay unquantized."""
    return [t.name[: -len(".weight")] for t in tensors if t.name.endswith(".mlp.gate.weight")]


def quantization_config(fmt: QuantizedFormat, routers: list[str]) -> dict[str, Any]:
    """config.json's `quantization_config` as llm-compressor (compressed-tensors), AutoGPTQ and AutoAWQ
    write it. `lm_head` and an MoE model's routers stay unquantized: compressed-tensors names them by a
    regex; AWQ's `modules_to_not_convert` is matched as a substring, so each router by its full name
    (`mlp.gate` alone would also match a dense layer's `mlp.gate_proj`)."""
    moe = bool(routers)
    if fmt.quant_method == "gptq":
        return {"quant_method": "gptq", "bits": fmt.bits, "group_size": fmt.group_size, "desc_act": False,
                "sym": True, "lm_head": False, "damp_percent": 0.01, "true_sequential": True,
                "static_groups": False, "checkpoint_format": "gptq"}
    if fmt.quant_method == "awq":
        return {"quant_method": "awq", "bits": fmt.bits, "group_size": fmt.group_size, "zero_point": True,
                "version": "gemm", "modules_to_not_convert": routers or None}
    weights = {"num_bits": fmt.bits, "type": "int", "symmetric": True, "dynamic": False,
               "strategy": "group" if fmt.group_size else "channel", "group_size": fmt.group_size,
               "block_structure": None, "actorder": None, "observer": "minmax", "observer_kwargs": {}}
    inputs = None if fmt.bits == 4 else {
        "num_bits": 8, "type": "int", "symmetric": True, "dynamic": True, "strategy": "token",
        "group_size": None, "block_structure": None, "actorder": None, "observer": None, "observer_kwargs": {}}
    layout = "int-quantized" if fmt.bits == 8 else "pack-quantized"
    return {"quant_method": "compressed-tensors", "format": layout, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": inputs,
                                          "output_activations": None, "format": layout}},
            "ignore": ["lm_head", *(["re:.*mlp.gate$"] if moe else [])],
            "kv_cache_scheme": None, "sparsity_config": {}, "transform_config": {},
            "global_compression_ratio": None, "version": COMPRESSED_TENSORS_VERSION}


# --- reading the source ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SourceTensor:
    """A tensor of the input directory: where its bytes are."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    path: Path
    offset: int          # of its first byte in the file

    @property
    def values(self) -> int:
        return math.prod(self.shape)

    def float32(self) -> np.ndarray:
        """Its values as float32, shaped (bf16 widened exactly)."""
        raw = np.fromfile(self.path, dtype="<u2" if self.dtype == "BF16" else "<f4", count=self.values,
                          offset=self.offset)
        values = (raw.astype(np.uint32) << 16).view(np.float32) if self.dtype == "BF16" else raw
        return values.astype(np.float32, copy=False).reshape(self.shape)

    def raw_chunks(self) -> Iterator[bytes]:
        with self.path.open("rb") as file:
            file.seek(self.offset)
            left = self.values * DTYPE_BYTES[self.dtype]
            while left:
                chunk = file.read(min(left, COPY_CHUNK_BYTES))
                if not chunk:
                    raise ValueError(f"{self.path}: tensor {self.name} is cut short")
                left -= len(chunk)
                yield chunk


def source_tensors(source: Path) -> list[SourceTensor]:
    """Every tensor of the directory's safetensors, in file order (the index's files, or model.safetensors)."""
    index = source / "model.safetensors.index.json"
    if index.exists():
        files = list(dict.fromkeys(json.loads(index.read_text())["weight_map"].values()))
    elif (source / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise ValueError(f"{source}: no model.safetensors or model.safetensors.index.json")
    tensors = []
    for file_name in files:
        path = source / file_name
        with path.open("rb") as file:
            (length,) = struct.unpack("<Q", file.read(8))
        for name, entry in read_safetensors_header(path).items():
            if name == "__metadata__":
                continue
            if entry["dtype"] not in DTYPE_BYTES:
                raise ValueError(f"{path}: tensor {name} is {entry['dtype']}: only {', '.join(DTYPE_BYTES)} are read")
            tensors.append(SourceTensor(name, entry["dtype"], tuple(entry["shape"]), path,
                                        8 + length + entry["data_offsets"][0]))
    return tensors


# --- writing --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PlannedTensor:
    """An output tensor and where it comes from: a source tensor copied, or one output of a quantized one."""

    out: OutputTensor
    source: SourceTensor
    part: int | None     # index in quantized_values(...); None: copied as it is


def plan_tensors(fmt: QuantizedFormat, tensors: list[SourceTensor], dtype: str) -> list[PlannedTensor]:
    planned = []
    for tensor in tensors:
        if not is_quantized_linear(tensor.name, tensor.shape):
            planned.append(PlannedTensor(OutputTensor(tensor.name, tensor.dtype, tensor.shape), tensor, None))
            continue
        check_shape(fmt, tensor.name, tensor.shape)
        outputs = quantized_tensors(fmt, tensor.name, tensor.shape, dtype)
        planned += [PlannedTensor(out, tensor, part) for part, out in enumerate(outputs)]
    return planned


def safetensors_header(outputs: list[OutputTensor]) -> bytes:
    """As hf_model's: the 8-byte length, the JSON header, padded with spaces to 8 bytes."""
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for out in outputs:
        entries[out.name] = {"dtype": out.dtype, "shape": list(out.shape),
                             "data_offsets": [offset, offset + out.nbytes]}
        offset += out.nbytes
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header


def encode(values: np.ndarray, dtype: str) -> bytes:
    """An array in the file's dtype, little-endian."""
    if dtype == "BF16":
        return bfloat16_bits(np.array(values, dtype=np.float32, copy=True)).tobytes()
    little = {"F32": "<f4", "F16": "<f2", "I8": "i1", "I32": "<i4", "I64": "<i8"}[dtype]
    return np.ascontiguousarray(values).astype(little, copy=False).tobytes()


def write_file(path: Path, fmt: QuantizedFormat, planned: list[PlannedTensor], dtype: str) -> None:
    """One safetensors file: the header, then each tensor; a quantized source tensor is read and quantized
    once for all its outputs (they are consecutive)."""
    with path.open("wb") as file:
        file.write(safetensors_header([p.out for p in planned]))
        cache: tuple[str, list[np.ndarray]] | None = None
        for item in planned:
            if item.part is None:
                _copy(file, item.source)
                continue
            if cache is None or cache[0] != item.source.name:
                cache = (item.source.name, quantized_values(fmt, item.source.float32(), dtype))
            file.write(encode(cache[1][item.part], item.out.dtype))


def _copy(file: BinaryIO, tensor: SourceTensor) -> None:
    for chunk in tensor.raw_chunks():
        file.write(chunk)


def shards(planned: list[PlannedTensor], max_bytes: int) -> list[list[PlannedTensor]]:
    """Files of at most `max_bytes`, never splitting the outputs of one quantized tensor."""
    units: list[list[PlannedTensor]] = []
    for item in planned:
        if item.part in (None, 0):
            units.append([])
        units[-1].append(item)
    groups: list[list[PlannedTensor]] = [[]]
    size = 0
    for unit in units:
        unit_bytes = sum(p.out.nbytes for p in unit)
        if groups[-1] and size + unit_bytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1] += unit
        size += unit_bytes
    return groups


def write_weights(into: Path, fmt: QuantizedFormat, planned: list[PlannedTensor], dtype: str,
                  max_shard_bytes: int = MAX_SHARD_BYTES) -> list[str]:
    """The safetensors file(s) and, for several, the index; returns the file names."""
    groups = shards(planned, max_shard_bytes)
    if len(groups) == 1:
        write_file(into / "model.safetensors", fmt, planned, dtype)
        return ["model.safetensors"]
    names = [f"model-{i:05d}-of-{len(groups):05d}.safetensors" for i in range(1, len(groups) + 1)]
    for name, group in zip(names, groups):
        write_file(into / name, fmt, group, dtype)
    index = {"metadata": {"total_size": sum(p.out.nbytes for p in planned)},
             "weight_map": {p.out.name: name for name, group in zip(names, groups) for p in group}}
    _write_json(into / "model.safetensors.index.json", index)
    return [*names, "model.safetensors.index.json"]


def model_dtype(tensors: list[SourceTensor], source: Path) -> str:
    """The dtype of the linear weights (bf16 or fp32): the scales are written in it, as the tools do."""
    dtypes = {t.dtype for t in tensors if is_quantized_linear(t.name, t.shape)}
    if len(dtypes) != 1 or not dtypes <= set(SOURCE_DTYPES):
        raise ValueError(f"{source}: linear weights must all be one of {', '.join(SOURCE_DTYPES)}, found "
                         f"{sorted(dtypes) or 'none'}")
    return dtypes.pop()


def write_quantized_model(source: Path, into: Path, quantization: str,
                          max_shard_bytes: int = MAX_SHARD_BYTES) -> None:
    """The quantized copy of `source` in a new directory `into`; the marker last."""
    fmt = quantized_format(quantization)
    config = json.loads((source / "config.json").read_text())
    if "quantization_config" in config:
        raise ValueError(f"{source}/config.json: the model is quantized already")
    tensors = source_tensors(source)
    dtype = model_dtype(tensors, source)
    planned = plan_tensors(fmt, tensors, dtype)
    into.mkdir(parents=True)
    settings = quantization_config(fmt, router_modules(tensors))
    _write_json(into / "config.json", {**config, "quantization_config": settings})
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copyfile(source / name, into / name)
    files = write_weights(into, fmt, planned, dtype, max_shard_bytes)
    source_marker = source / MARKER_NAME
    _write_json(into / MARKER_NAME, {
        "generator": GENERATOR_NAME, "quantization": fmt.name, "source": str(source),
        "source_marker": json.loads(source_marker.read_text()) if source_marker.exists() else None,
        "quantized_layers": sum(1 for t in tensors if is_quantized_linear(t.name, t.shape)),
        "weight_bytes": sum(p.out.nbytes for p in planned), "weights": files})


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
