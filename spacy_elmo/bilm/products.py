"""The three matrix products of an LSTM layer's inference loop, in interchangeable forms.

``ProjectedLstmLayer.forward_inference`` asks a ``Products`` object for

- ``input(d, x, out)``: ``out = bias[d] + x @ weight_ih[d]`` (many steps at once),
- ``recurrent(d, h, z)``: ``z += h @ weight_hh[d]`` (one step, few rows),
- ``project(d, t, out)``: ``out = t @ weight_proj[d]`` (one step),

for direction ``d``. Forms:

- ``DenseProducts``: plain torch products on the parameters (any device and dtype).
- ``OneDnnProducts`` (CPU, float32): the recurrent and output weights reordered once
  into oneDNN's blocked layout. A step's product has few rows, and a plain GEMM then
  spends much of its time re-packing the 512 x 16384 weight it reads; the reordered
  copy is read as is (about 1.3-2.5x faster at 4-64 rows on an AVX2 CPU). Float32
  throughout; it differs from the plain product by summation order only (~1e-6).
  Used by default for recurrent weights of at least ``ONEDNN_MIN_WEIGHTS`` values.
- ``DenseProducts`` on bfloat16 / float16 copies of the weights (kinds "bf16", "fp16":
  the reduced precisions on a GPU).
- ``Int8Products`` (CPU, the ``int8`` precision): ``torch.ao.quantization.quantize_dynamic``
  of the three products: int8 weights (one scale per output column), inputs quantized
  to int8 at each call with the range of that call's rows, float32 results. Not exact,
  and a row's result depends slightly on the other rows of its call.

Derived weights are cached per layer (outside the module, so copies, pickles and
state dicts never see them) and rebuilt when a parameter is replaced, moved or
updated in place.
"""
import warnings
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import nn


class DenseProducts:
    """Plain products on the layer's parameters, or with ``dtype`` on copies of them in
    that type (the ``bf16`` / ``fp16`` precisions)."""

    def __init__(self, layer: nn.Module, dtype: Optional[torch.dtype] = None) -> None:
        # Tensors only, never the layer: the cache holding this object is keyed weakly
        # by the layer, and a reference back would keep both alive for good.
        weights = (layer.weight_ih, layer.weight_hh, layer.weight_proj, layer.bias)
        if dtype is not None:
            weights = tuple(w.detach().to(dtype) for w in weights)
        self.weight_ih, self.weight_hh, self.weight_proj, self.bias = weights

    def input(self, d: int, x: torch.Tensor, out: torch.Tensor) -> None:
        torch.addmm(self.bias[d], x, self.weight_ih[d], out=out)

    def recurrent(self, d: int, h: torch.Tensor, z: torch.Tensor) -> None:
        z.addmm_(h, self.weight_hh[d])  # 2-D, contiguous rows: no hidden copy

    def project(self, d: int, t: torch.Tensor, out: torch.Tensor) -> None:
        torch.mm(t, self.weight_proj[d], out=out)


def onednn_available() -> bool:
    """Whether this torch has the oneDNN ops ``OneDnnProducts`` uses."""
    ops = getattr(torch.ops, "mkldnn", None)
    try:
        return bool(
            torch.backends.mkldnn.is_available()
            and hasattr(ops, "_linear_pointwise")
            and hasattr(ops, "_reorder_linear_weight")
        )
    except (AttributeError, RuntimeError):
        return False


class OneDnnProducts(DenseProducts):
    """Recurrent and output products on weights reordered for oneDNN (CPU, float32)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__(layer)
        reorder = torch.ops.mkldnn._reorder_linear_weight
        self.hh = [reorder(layer.weight_hh[d].detach().t().contiguous(), None) for d in range(2)]
        self.proj = [reorder(layer.weight_proj[d].detach().t().contiguous(), None) for d in range(2)]

    def recurrent(self, d: int, h: torch.Tensor, z: torch.Tensor) -> None:
        z.add_(torch.ops.mkldnn._linear_pointwise(h, self.hh[d], None, "none", [], ""))

    def project(self, d: int, t: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(torch.ops.mkldnn._linear_pointwise(t, self.proj[d], None, "none", [], ""))


class Int8Products:
    """Dynamically quantized (int8) products, built with ``quantize_dynamic``."""

    def __init__(self, layer: nn.Module) -> None:
        try:
            with warnings.catch_warnings():  # torch marks its eager quantization API as deprecated
                warnings.simplefilter("ignore")
                from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
        except ImportError as err:
            raise RuntimeError(
                "precision 'int8' needs torch.ao.quantization.quantize_dynamic, which this torch lacks"
            ) from err
        if not torch.backends.quantized.supported_engines or torch.backends.quantized.engine == "none":
            raise RuntimeError("precision 'int8': this torch build has no quantized CPU engine (fbgemm/x86/qnnpack)")

        def linear(weight: torch.Tensor, bias: Any) -> nn.Linear:
            lin = nn.Linear(weight.shape[0], weight.shape[1], bias=bias is not None)
            with torch.no_grad():
                lin.weight.copy_(weight.detach().t())
                if bias is not None:
                    lin.bias.copy_(bias.detach())
            return lin

        float_products = nn.ModuleList(
            nn.ModuleList([
                linear(layer.weight_ih[d], layer.bias[d]),
                linear(layer.weight_hh[d], None),
                linear(layer.weight_proj[d], None),
            ])
            for d in range(2)
        ).float().cpu()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.q = quantize_dynamic(float_products, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)

    def input(self, d: int, x: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(self.q[d][0](x))

    def recurrent(self, d: int, h: torch.Tensor, z: torch.Tensor) -> None:
        z.add_(self.q[d][1](h))

    def project(self, d: int, t: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(self.q[d][2](t))


_KINDS: Dict[str, Callable[[nn.Module], Any]] = {
    "onednn": OneDnnProducts,
    "int8": Int8Products,
    "bf16": lambda layer: DenseProducts(layer, torch.bfloat16),
    "fp16": lambda layer: DenseProducts(layer, torch.float16),
}
_CACHE: "weakref.WeakKeyDictionary[nn.Module, Dict[str, Tuple[Tuple, Any]]]" = weakref.WeakKeyDictionary()


def _stamp(layer: nn.Module) -> Tuple:
    return tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in layer.parameters())


def products_for(layer: nn.Module, kind: str) -> Any:
    """The products of ``kind`` ("dense", "onednn", "int8", "bf16" or "fp16") for ``layer``, cached
    until its parameters change."""
    if kind == "dense":
        return DenseProducts(layer)
    if kind not in _KINDS:
        raise ValueError(f"unknown LSTM products {kind!r} (expected 'dense' or one of {sorted(_KINDS)})")
    if kind == "onednn" and not onednn_available():
        raise ValueError("LSTM products 'onednn': this torch build has no oneDNN (mkldnn) linear ops")
    entries = _CACHE.setdefault(layer, {})
    stamp = _stamp(layer)
    cached = entries.get(kind)
    if cached is None or cached[0] != stamp:
        entries.pop(kind, None)  # free the old copy before building the new one
        with torch.inference_mode(False), torch.no_grad():
            cached = (stamp, _KINDS[kind](layer))
        entries[kind] = cached
    return cached[1]


# Below this many recurrent weights a direction (4 MB in float32: they fit the L2
# cache of common CPUs) the plain products are as fast or faster.
ONEDNN_MIN_WEIGHTS = 1 << 20


def default_kind(layer: nn.Module, x: torch.Tensor) -> str:
    """"onednn" for float32 on the CPU with a recurrent weight of at least
    ``ONEDNN_MIN_WEIGHTS`` values a direction (where available), else "dense"."""
    weights = [layer.weight_ih, layer.weight_hh, layer.weight_proj]
    if (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and all(w.dtype == torch.float32 for w in weights)
        and layer.weight_hh[0].numel() >= ONEDNN_MIN_WEIGHTS
        and onednn_available()
    ):
        return "onednn"
    return "dense"
