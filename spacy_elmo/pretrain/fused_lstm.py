"""The training LSTM: one autograd function per ``ProjectedLstmLayer`` (both directions,
every time step of the packed batch) with a hand-written backward.

Plain autograd over the step loop of ``ProjectedLstmLayer.forward`` records some 20 nodes a
step and, in backward, materialises zero-filled gradients for every slice and concatenation.
Here the forward writes each step's gates, cells and outputs into buffers allocated once per
call, and the backward walks the steps in reverse, updating those buffers in place, with only
two small matrix products per direction and step; the weight gradients come from a few large
products over all steps at the end. Same arithmetic, same numbers as autograd (up to float
rounding; ``tests/test_fused_lstm.py`` checks in float64), except that on the CPU tanh is
computed as ``2 sigmoid(2x) - 1``.

Shapes (packed layout of ``bilm.lstm``: step t holds the first ``batch_sizes[t]`` rows of
step t - 1's sequences; M = sum(batch_sizes), B = batch_sizes[0]):

- ``x`` (2, M, I): the layer input of each packed row, both directions; or, with ``src``
  (2 * M,), a table (R, I) of distinct rows that the packed rows read (``fused_layer``);
- ``weight_ih`` (2, I, 4C), ``weight_hh`` (2, P, 4C), ``bias`` (2, 4C),
  ``weight_proj`` (2, C, P): the layer's parameters (gate order: input, forget, output,
  candidate);
- ``parents`` (2, M), optional: the row of step t - 1 (of its direction) that each row of step
  t continues, where rows stand for the distinct prefixes of sentences rather than for sentences
  (``lm_forward.training_plan``; any value at step 0). A row may have several successors or none:
  its state is read by each, and their gradients are summed. Without it, row j of step t continues
  row j of step t - 1, as in the packed layout;
- result (2, M, P): the (clipped) output h of every packed row.
"""
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..bilm.lstm import ProjectedLstmLayer, ProjectedLstmStack


def _steps(batch_sizes: Sequence[int]) -> List[Tuple[int, int, int]]:
    """(first row, rows, first row of the previous step) of every step."""
    out, start, prev = [], 0, 0
    for n in batch_sizes:
        out.append((start, int(n), prev))
        prev, start = start, start + int(n)
    return out


def packed_parents(batch_sizes: Sequence[int], device: torch.device) -> torch.Tensor:
    """``parents`` of the packed layout, where each row continues the row of the same sequence
    one step earlier: ``(2, M)`` int64 (0 at step 0)."""
    sizes = np.asarray(batch_sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n = sizes[1:]
    offset_in_step = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    prev = np.concatenate([np.zeros(sizes[0] if len(sizes) else 0, np.int64), np.repeat(starts[:-1], n) + offset_in_step])
    return torch.from_numpy(np.stack([prev, prev])).to(device)


class FusedProjectedLstm(torch.autograd.Function):
    """``ProjectedLstmLayer.forward`` as one autograd node (see the module docstring)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight_ih: torch.Tensor, weight_hh: torch.Tensor, bias: torch.Tensor,
                weight_proj: torch.Tensor, batch_sizes: Sequence[int], cell_clip: Optional[float],
                proj_clip: Optional[float], src: Optional[torch.Tensor], parents: torch.Tensor) -> torch.Tensor:
        C, P = weight_hh.shape[2] // 4, weight_proj.shape[2]
        M = x.shape[1] if src is None else src.shape[0] // 2
        steps = _steps(batch_sizes)
        # rows of the previous step as rows of the (2 * M)-row views of h and c
        flat_parents = parents + torch.arange(0, 2 * M, M, device=parents.device).unsqueeze(1)
        B_max = max(batch_sizes)
        h_prev_buf, c_prev_buf = x.new_empty(2 * B_max, P), x.new_empty(2 * B_max, C)
        # on the CPU torch.tanh is about 5x slower than sigmoid; tanh(x) = 2 sigmoid(2x) - 1 is within
        # 2e-7 in float32 (not used for 16-bit types, whose resolution near 1/2 is too coarse)
        fast_tanh = x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
        # gates: activated i, f, o, g of every row (overwritten by dL/dz in backward)
        # (bmm, then the bias added in place: baddbmm with a broadcast bias and no ``out`` is
        # several times slower on the CPU)
        if src is None:
            gates = torch.bmm(x, weight_ih).add_(bias.unsqueeze(1))
        else:  # x is a table (R, I) of distinct input rows: its products once, then gathered
            table_gates = torch.bmm(x.expand(2, *x.shape), weight_ih).add_(bias.unsqueeze(1))
            gates = x.new_empty(2, M, 4 * C)
            for d in range(2):
                torch.index_select(table_gates[d], 0, src[d * M : (d + 1) * M], out=gates[d])
            del table_gates
        c = x.new_empty(2, M, C)  # cell after clipping
        c_raw = x.new_empty(2, M, C) if cell_clip is not None else c  # before clipping
        tanh_c = x.new_empty(2, M, C)
        m = x.new_empty(2, M, C)  # o * tanh(c), the projection's input
        h = x.new_empty(2, M, P)
        h_raw = x.new_empty(2, M, P) if proj_clip is not None else h
        for t, (s, n, ps) in enumerate(steps):
            z = gates[:, s : s + n]
            if t > 0:
                rows = flat_parents[:, s : s + n].reshape(-1)
                h_prev = torch.index_select(h.view(2 * M, P), 0, rows, out=h_prev_buf[: 2 * n]).view(2, n, P)
                for d in range(2):  # 2-D products on contiguous rows
                    z[d].addmm_(h_prev[d], weight_hh[d])
            i, f, o, g = z.split(C, dim=2)
            if fast_tanh:  # all four gates in one sigmoid pass, tanh(g) = 2 sigmoid(2 g) - 1
                g.mul_(2.0)
                z.sigmoid_()
                g.mul_(2.0).sub_(1.0)
            else:
                z[..., : 3 * C].sigmoid_()
                g.tanh_()
            cr = torch.mul(i, g, out=c_raw[:, s : s + n])
            if t > 0:
                c_prev = torch.index_select(c.view(2 * M, C), 0, rows, out=c_prev_buf[: 2 * n]).view(2, n, C)
                cr.addcmul_(f, c_prev)
            if cell_clip is not None:
                torch.clamp(cr, -cell_clip, cell_clip, out=c[:, s : s + n])
            if fast_tanh:
                tc = torch.mul(c[:, s : s + n], 2.0, out=tanh_c[:, s : s + n]).sigmoid_().mul_(2.0).sub_(1.0)
            else:
                tc = torch.tanh(c[:, s : s + n], out=tanh_c[:, s : s + n])
            mt = torch.mul(o, tc, out=m[:, s : s + n])
            for d in range(2):
                torch.mm(mt[d], weight_proj[d], out=h_raw[d, s : s + n])
            if proj_clip is not None:
                torch.clamp(h_raw[:, s : s + n], -proj_clip, proj_clip, out=h[:, s : s + n])
        ctx.batch_sizes, ctx.cell_clip, ctx.proj_clip = list(batch_sizes), cell_clip, proj_clip
        ctx.gathered = src is not None
        ctx.save_for_backward(x, weight_ih, weight_hh, weight_proj, gates, c, c_raw, tanh_c, m, h, h_raw,
                              src if src is not None else x.new_empty(0, dtype=torch.long), flat_parents)
        ctx.used = False
        return h

    @staticmethod
    def backward(ctx, grad_h: torch.Tensor):  # type: ignore[override]
        if ctx.used:
            raise RuntimeError("FusedProjectedLstm: backward ran twice (its buffers are reused in place); "
                               "retain_graph is not supported")
        ctx.used = True
        with torch.autocast(grad_h.device.type, enabled=False):
            return FusedProjectedLstm._backward(ctx, grad_h)

    @staticmethod
    def _backward(ctx, grad_h: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        x, weight_ih, weight_hh, weight_proj, gates, c, c_raw, tanh_c, m, h, h_raw, src, flat_parents = ctx.saved_tensors
        cell_clip, proj_clip, batch_sizes = ctx.cell_clip, ctx.proj_clip, ctx.batch_sizes
        C, P, M, B = c.shape[2], h.shape[2], c.shape[1], batch_sizes[0]
        B_max = max(batch_sizes)
        dh = grad_h.to(x.dtype).contiguous().clone()  # dL/dh of every row, recurrence added step by step
        # clamp passes the gradient where lo <= value <= hi, that is where it left the value as it
        # was; the values before clipping are read only here, so their buffers become the 1/0 masks
        # (``eq_`` in place: about 3.5x faster on the CPU than ``eq`` into a new float tensor)
        if proj_clip is not None:
            h_pass = h_raw.eq_(h)
        if cell_clip is not None:
            c_pass = c_raw.eq_(c)
        # dL/dc of the step's rows, summed over their successors (each step sums into dc_prev for the one before)
        dc, dc_prev = x.new_zeros(2, B_max, C), x.new_empty(2, B_max, C)
        dm_buf, t1_buf, t2_buf = x.new_empty(2, B_max, C), x.new_empty(2, B_max, C), x.new_empty(2, B_max, C)
        c_prev_buf, dh_prev_buf = x.new_empty(2 * B_max, C), x.new_empty(2, B_max, P)
        steps = _steps(batch_sizes)
        for t in range(len(steps) - 1, -1, -1):
            s, n, ps = steps[t]
            dht = dh[:, s : s + n]
            if proj_clip is not None:
                dht.mul_(h_pass[:, s : s + n])
            dm, t1, t2 = dm_buf[:, :n], t1_buf[:, :n], t2_buf[:, :n]
            for d in range(2):
                torch.mm(dht[d], weight_proj[d].t(), out=dm[d])
            i, f, o, g = gates[:, s : s + n].split(C, dim=2)
            tc, dcn = tanh_c[:, s : s + n], dc[:, :n]
            # dc += dm * o * (1 - tanh(c)^2)
            torch.mul(dm, o, out=t1)
            dcn.add_(t1)
            t1.mul_(tc)
            dcn.addcmul_(t1, tc, value=-1.0)
            if cell_clip is not None:
                dcn.mul_(c_pass[:, s : s + n])
            # dz_o = dm * tanh(c) * o * (1 - o)
            torch.mul(dm, tc, out=t1)
            o.addcmul_(o, o, value=-1.0).mul_(t1)
            # dz_i = dc * g * i * (1 - i); dz_g = dc * i * (1 - g^2)
            torch.mul(dcn, i, out=t1)
            torch.mul(dcn, g, out=t2)
            i.addcmul_(i, i, value=-1.0).mul_(t2)
            g.mul_(g)
            torch.addcmul(t1, t1, g, value=-1.0, out=g)
            # dz_f = dc * c_prev * f * (1 - f); dc carried back = dc * f, summed into each row's parent
            if t > 0:
                rows = flat_parents[:, s : s + n]
                c_prev = torch.index_select(c.view(2 * M, C), 0, rows.reshape(-1), out=c_prev_buf[: 2 * n]).view(2, n, C)
                torch.mul(dcn, c_prev, out=t2)
                dcn.mul_(f)
                n_prev = batch_sizes[t - 1]
                dc_prev[:, :n_prev].zero_()
                f.addcmul_(f, f, value=-1.0).mul_(t2)
                dz = gates[:, s : s + n]
                for d in range(2):
                    parent = rows[d] - d * M  # the parents' rows within this direction
                    dc_prev[d].index_add_(0, parent - ps, dcn[d])  # dc_prev holds the previous step's rows only
                    dh_prev = torch.mm(dz[d], weight_hh[d].t(), out=dh_prev_buf[d, :n])
                    dh[d].index_add_(0, parent, dh_prev)
                dc, dc_prev = dc_prev, dc
            else:
                f.zero_()
        dz = gates  # now dL/dz of every row
        grads: List[Optional[torch.Tensor]] = [None] * 10
        needs = ctx.needs_input_grad
        x_in, dz_in = x, dz  # the input rows and their dL/dz (summed per table row when gathered)
        if ctx.gathered:
            M = dz.shape[1]
            dz_in = dz.new_zeros(2, x.shape[0], dz.shape[2])
            for d in range(2):
                dz_in[d].index_add_(0, src[d * M : (d + 1) * M], dz[d])
            x_in = x.expand(2, *x.shape)
        if needs[0]:
            grads[0] = torch.bmm(dz_in, weight_ih.transpose(1, 2))
            if ctx.gathered:
                grads[0] = grads[0].sum(dim=0)
        if needs[1]:
            grads[1] = torch.bmm(x_in.transpose(1, 2), dz_in)
        if needs[2]:
            grads[2] = x.new_zeros(weight_hh.shape)
            if len(batch_sizes) > 1:
                h_prev = h.view(2 * M, P).index_select(0, flat_parents[:, B:].reshape(-1)).view(2, M - B, P)
                torch.bmm(h_prev.transpose(1, 2), dz[:, B:], out=grads[2])
        if needs[3]:
            grads[3] = dz_in.sum(dim=1)
        if needs[4]:
            grads[4] = torch.bmm(m.transpose(1, 2), dh)
        return tuple(grads)


def fused_layer(layer: ProjectedLstmLayer, x: torch.Tensor, batch_sizes: Sequence[int],
                src: Optional[torch.Tensor] = None, parents: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``layer(x, batch_sizes)`` through ``FusedProjectedLstm``: x ``(2, M, I)`` -> ``(2, M, P)``.

    With ``src`` (``(2 * M,)`` int64), x is a table ``(R, I)`` of distinct input rows and packed
    row j of direction d reads ``x[src[d * M + j]]``: the input products are then computed
    once per table row (fewer rows when the table holds each word type of the batch once)
    and their gradients summed per table row. With ``parents`` (``(2, M)`` int64, see the module
    docstring) a row continues the given row of the previous step rather than its own."""
    if len(batch_sizes) == 0:
        return x.new_zeros(2, 0, layer.projection_dim)
    params = (layer.weight_ih, layer.weight_hh, layer.bias, layer.weight_proj)
    device = x.device.type
    if torch.is_autocast_enabled(device):  # run in the autocast dtype (the casts carry the gradient back)
        dtype = torch.get_autocast_dtype(device)
        x, params = x.to(dtype), tuple(p.to(dtype) for p in params)
    if parents is None:
        parents = packed_parents(batch_sizes, x.device)
    with torch.autocast(device, enabled=False):
        return FusedProjectedLstm.apply(x, *params, [int(b) for b in batch_sizes], layer.cell_clip, layer.proj_clip, src,
                                        parents.to(x.device))


def fused_stack(stack: ProjectedLstmStack, x: torch.Tensor, batch_sizes: Sequence[int],
                src: Optional[torch.Tensor] = None, parents: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
    """``stack(x, batch_sizes)`` with every layer fused: the packed output of each layer
    (after the residual connection), each ``(2, M, P)``. With ``src``, x is a table of
    distinct input rows read by the first layer as in ``fused_layer``; ``parents`` as there, for
    every layer."""
    outputs: List[torch.Tensor] = []
    for i, layer in enumerate(stack.layers):
        h = fused_layer(layer, x, batch_sizes, src if i == 0 else None, parents)
        if i > 0 and stack.use_skip_connections:
            h = h + x
        outputs.append(h)
        x = h
    return outputs
