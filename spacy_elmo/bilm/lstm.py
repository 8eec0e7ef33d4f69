"""The contextual layers: a stack of LSTMs with projection and clipping, run for the
forward and the backward direction at once (never mixing them).

Sequences are *packed* (as ``torch.nn.utils.rnn.PackedSequence`` lays them out):
sorted by decreasing length, step t holds the ``batch_sizes[t]`` sequences still
running, so padding never enters the recurrence and every sequence starts from a
zero state. The backward direction sees each sequence reversed by its own length,
so both directions share one packing and advance together with batched matrix
products.

Gate layout of ``weight_ih``, ``weight_hh`` and ``bias`` (last axis, 4 blocks of C):
input, forget, output, candidate. ``bias`` already includes the forget bias.
"""
from typing import List, Optional, Sequence

import torch
from torch import nn

from .precision import PRECISION_OF_AUTOCAST
from .products import default_kind, products_for


class ProjectedLstmLayer(nn.Module):
    """One LSTM layer with output projection for both directions.

    input_dim: width of the layer input.
    cell_dim: memory cell size C.
    projection_dim: width P of the projected (and recurrent) output h.
    cell_clip / proj_clip: clip c and h to +-value inside the recurrence (None: no clip).

    Parameters have a leading direction axis (0 forward, 1 backward) and are stored
    ``[in, out]``: ``weight_ih`` (2, input_dim, 4C), ``weight_hh`` (2, P, 4C),
    ``bias`` (2, 4C), ``weight_proj`` (2, C, P).
    """

    def __init__(
        self,
        *,
        input_dim: int,
        cell_dim: int,
        projection_dim: int,
        cell_clip: Optional[float],
        proj_clip: Optional[float],
    ) -> None:
        super().__init__()
        self.cell_dim = cell_dim
        self.projection_dim = projection_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.weight_ih = nn.Parameter(torch.empty(2, input_dim, 4 * cell_dim))
        self.weight_hh = nn.Parameter(torch.empty(2, projection_dim, 4 * cell_dim))
        self.bias = nn.Parameter(torch.zeros(2, 4 * cell_dim))
        self.weight_proj = nn.Parameter(torch.empty(2, cell_dim, projection_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for w in (self.weight_ih, self.weight_hh, self.weight_proj):
            nn.init.uniform_(w, -1.0 / w.shape[1] ** 0.5, 1.0 / w.shape[1] ** 0.5)
        with torch.no_grad():
            self.bias.zero_()
            self.bias[:, self.cell_dim : 2 * self.cell_dim] = 1.0  # forget bias

    def forward(self, x: torch.Tensor, batch_sizes: Sequence[int], products: Optional[str] = None) -> torch.Tensor:
        """x: packed input ``(2, M, input_dim)``; returns packed h ``(2, M, P)``.

        With autograd off this runs ``forward_inference`` (same numbers, no
        per-step allocations, bounded memory) with the matrix products of kind
        ``products`` (see ``bilm.products``; None: the fastest exact one); under a
        bfloat16 / float16 autocast, on copies of the weights in that type (the
        cell state stays float32).
        """
        if not torch.is_grad_enabled():
            device = x.device.type
            if not torch.is_autocast_enabled(device):
                return self.forward_inference(x, batch_sizes, products=products)
            low = PRECISION_OF_AUTOCAST.get(torch.get_autocast_dtype(device))
            if low is not None:
                with torch.autocast(device, enabled=False):
                    return self.forward_inference(x.to(torch.get_autocast_dtype(device)), batch_sizes, products=low)
        C = self.cell_dim
        # One product for every time step's input projection, both directions.
        x_gates = torch.baddbmm(self.bias.unsqueeze(1), x, self.weight_ih)
        h = x.new_zeros(2, batch_sizes[0], self.projection_dim)
        # The cell state stays in float32 (or wider) under autocast: it sums over steps.
        c = x.new_zeros(2, batch_sizes[0], C, dtype=torch.promote_types(x.dtype, torch.float32))
        outputs: List[torch.Tensor] = []
        # split (not slicing in the loop): its backward is one concatenation, where each
        # slice's backward would write a zero tensor the size of x_gates.
        for x_step in x_gates.split(list(batch_sizes), dim=1):
            n = x_step.shape[1]
            z = torch.baddbmm(x_step, h[:, :n], self.weight_hh)
            ifo = torch.sigmoid(z[..., : 3 * C])
            c = ifo[..., C : 2 * C] * c[:, :n] + ifo[..., :C] * torch.tanh(z[..., 3 * C :])
            if self.cell_clip is not None:
                c = torch.clamp(c, -self.cell_clip, self.cell_clip)
            h = torch.bmm((ifo[..., 2 * C :] * torch.tanh(c)).to(z.dtype), self.weight_proj)
            if self.proj_clip is not None:
                h = torch.clamp(h, -self.proj_clip, self.proj_clip)
            outputs.append(h)
        return torch.cat(outputs, dim=1)

    def forward_inference(
        self, x: torch.Tensor, batch_sizes: Sequence[int], chunk_size: int = 1 << 22, products: Optional[str] = None
    ) -> torch.Tensor:
        """``forward`` without autograd: in-place updates of preallocated buffers.

        The input projection still runs as a few large products, each over the
        steps whose packed rows fit a buffer of about ``chunk_size`` gate values
        per direction (at least one step), so memory stays bounded for any batch.
        ``products``: "dense" (plain torch products), "onednn" (CPU float32 on
        reordered weights), "int8" (dynamically quantized, CPU), or "bf16" / "fp16"
        (x in that type; weights copied to it); None picks "onednn" for large float32 weights on the CPU, else "dense".
        """
        mm = products_for(self, products or default_kind(self, x))
        C, P, B = self.cell_dim, self.projection_dim, batch_sizes[0]
        chunk_rows = chunk_size // (4 * C)
        out = x.new_empty(2, x.shape[1], P)  # h of every step; step t reads step t-1's rows
        c = x.new_zeros(2, B, C, dtype=torch.promote_types(x.dtype, torch.float32))  # float32 at least
        h0 = x.new_zeros(2, B, P)
        tanh_c = x.new_empty(2 * B * C)  # viewed as a contiguous (2, n, C) each step
        x_gates = x.new_empty(2, min(max(chunk_rows, B), x.shape[1]), 4 * C)
        start = chunk_start = chunk_end = 0
        prev = h0
        for i, n in enumerate(batch_sizes):
            if start + n > chunk_end:  # project the inputs of the next steps that fit
                chunk_start = chunk_end = start
                for m in batch_sizes[i:]:
                    if chunk_end + m - chunk_start > x_gates.shape[1]:
                        break
                    chunk_end += m
                for d in range(2):
                    mm.input(d, x[d, chunk_start:chunk_end], x_gates[d, : chunk_end - chunk_start])
            z = x_gates[:, start - chunk_start : start - chunk_start + n]
            for d in range(2):  # 2-D products on contiguous rows (batched ones copy here)
                mm.recurrent(d, prev[d, :n], z[d])
            ifo = z[..., : 3 * C].sigmoid_()
            g = z[..., 3 * C :].tanh_()
            cn = c[:, :n]
            cn.mul_(ifo[..., C : 2 * C]).addcmul_(ifo[..., :C], g)
            if self.cell_clip is not None:
                cn.clamp_(-self.cell_clip, self.cell_clip)
            t = tanh_c[: 2 * n * C].view(2, n, C)
            t = (torch.tanh(cn, out=t) if t.dtype == cn.dtype else t.copy_(cn).tanh_()).mul_(ifo[..., 2 * C :])
            h = out[:, start : start + n]
            for d in range(2):
                mm.project(d, t[d], h[d])
            if self.proj_clip is not None:
                h.clamp_(-self.proj_clip, self.proj_clip)
            prev = h
            start += n
        return out


class ProjectedLstmStack(nn.Module):
    """n_layers of ProjectedLstmLayer; layer l > 0 reads the output of layer l - 1 of
    the same direction, plus a residual connection when use_skip_connections.

    Returns the packed output of every layer (after the residual), each ``(2, M, P)``.
    """

    def __init__(
        self,
        *,
        input_dim: int,
        cell_dim: int,
        projection_dim: int,
        n_layers: int,
        cell_clip: Optional[float],
        proj_clip: Optional[float],
        use_skip_connections: bool,
    ) -> None:
        super().__init__()
        self.use_skip_connections = use_skip_connections
        self.layers = nn.ModuleList(
            ProjectedLstmLayer(
                input_dim=input_dim if i == 0 else projection_dim,
                cell_dim=cell_dim,
                projection_dim=projection_dim,
                cell_clip=cell_clip,
                proj_clip=proj_clip,
            )
            for i in range(n_layers)
        )

    def forward(self, x: torch.Tensor, batch_sizes: Sequence[int], products: Optional[str] = None) -> List[torch.Tensor]:
        """``products``: the kind of matrix products of inference (``ProjectedLstmLayer.forward``)."""
        outputs: List[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            h = layer(x, batch_sizes, products)
            if i > 0 and self.use_skip_connections:
                h = h + x
            outputs.append(h)
            x = h
        return outputs
