"""A plain, step-by-step ELMo biLM: the yardstick the benchmark measures against.

It computes what the fixture README (section 3) describes, the way AllenNLP's
``_ElmoBiLm`` does it: batches of sentences in file order padded to the longest,
the character CNN on every padded slot, then every LSTM cell (per direction and
layer, one after another) as a Python loop over time steps on the rows still
inside their sentence, with the full state cloned at each step. Stateless: every
batch starts from zero state. It shares no code with ``spacy_elmo.bilm``; it only
reads an ``ElmoBiLM`` state_dict for its weights.
"""
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from torch.nn import functional as F

BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260


def char_ids(token: str, max_chars: int = 50) -> List[int]:
    """The 50 character ids (+1 shifted) of a token, as the fixture README defines them."""
    if token in ("<S>", "</S>"):
        raw = [BOW_CHAR, BOS_CHAR if token == "<S>" else EOS_CHAR, EOW_CHAR] + [PAD_CHAR] * (max_chars - 3)
    else:
        data = list(token.encode("utf-8", "ignore")[: max_chars - 2])
        raw = [BOW_CHAR] + data + [EOW_CHAR] + [PAD_CHAR] * (max_chars - 2 - len(data))
    return [i + 1 for i in raw]


class ReferenceElmo:
    """Step-by-step ELMo with weights taken from an ``ElmoBiLM`` state_dict.

    options: the biLM options (``ElmoBiLM.options``).
    state: ``ElmoBiLM.state_dict()`` (LSTM matrices stored ``[in, out]``); gate
        blocks are reordered from the module's (i, f, o, j) to AllenNLP's (i, f, j, o).
    """

    def __init__(self, options: Dict[str, Any], state: Dict[str, torch.Tensor]) -> None:
        self.options = options
        cnn, lstm = options["char_cnn"], options["lstm"]
        self.max_chars = int(cnn["max_characters_per_token"])
        self.cell_clip: Optional[float] = lstm.get("cell_clip") or None
        self.proj_clip: Optional[float] = lstm.get("proj_clip") or None
        self.skip = bool(lstm.get("use_skip_connections", True))
        self.activation = torch.tanh if cnn.get("activation", "relu") == "tanh" else torch.relu
        sd = {k: v.detach().float().clone() for k, v in state.items()}
        self.char_table = sd["token_encoder.char_embedding.weight"]
        self.convs = [
            (sd[f"token_encoder.convs.{i}.weight"], sd[f"token_encoder.convs.{i}.bias"])
            for i in range(len(cnn["filters"]))
        ]
        self.highways = [
            tuple(sd[f"token_encoder.highways.{k}.{name}.{part}"] for name in ("transform", "gate") for part in ("weight", "bias"))
            for k in range(int(cnn.get("n_highway", 0)))
        ]
        self.proj_w = sd["token_encoder.projection.weight"]
        self.proj_b = sd["token_encoder.projection.bias"]
        self.cells: List[List[Dict[str, torch.Tensor]]] = [[], []]  # [direction][layer]
        for layer in range(int(lstm["n_layers"])):
            for d in range(2):

                def reorder(w: torch.Tensor) -> torch.Tensor:
                    i, f, o, j = w.chunk(4, dim=-1)
                    return torch.cat([i, f, j, o], dim=-1)

                base = f"lstm.layers.{layer}"
                self.cells[d].append(
                    {
                        "input_linearity": reorder(sd[f"{base}.weight_ih"][d]).contiguous(),
                        "state_linearity": reorder(sd[f"{base}.weight_hh"][d]).contiguous(),
                        "state_bias": reorder(sd[f"{base}.bias"][d]).contiguous(),
                        "state_projection": sd[f"{base}.weight_proj"][d].contiguous(),
                    }
                )

    # Token layer --------------------------------------------------------------------

    def token_layer(self, ids: torch.Tensor) -> torch.Tensor:
        """(n, max_chars) char ids -> (n, P): char CNN, highway, projection on every row."""
        emb = F.embedding(ids, self.char_table).transpose(1, 2)
        feats = [torch.max(F.conv1d(emb, w, b), dim=-1)[0] for w, b in self.convs]
        x = self.activation(torch.cat(feats, dim=-1))
        for w_t, b_t, w_g, b_g in self.highways:
            g = torch.sigmoid(F.linear(x, w_g, b_g))
            x = g * torch.relu(F.linear(x, w_t, b_t)) + (1 - g) * x
        return F.linear(x, self.proj_w, self.proj_b)

    # LSTM ---------------------------------------------------------------------------

    def cell(self, inputs: torch.Tensor, lengths: List[int], params: Dict[str, torch.Tensor], forward: bool) -> torch.Tensor:
        """One LSTM cell over ``inputs`` (B, T, P), rows sorted by decreasing length."""
        batch, total, _ = inputs.shape
        C = params["state_bias"].shape[0] // 4
        P = params["state_projection"].shape[1]
        out = inputs.new_zeros(batch, total, P)
        memory = inputs.new_zeros(batch, C)
        state = inputs.new_zeros(batch, P)
        active = batch - 1 if forward else 0
        for step in range(total):
            index = step if forward else total - step - 1
            if forward:
                while active >= 0 and lengths[active] <= index:
                    active -= 1
            else:
                while active < batch - 1 and lengths[active + 1] > index:
                    active += 1
            n = active + 1
            prev_memory = memory[:n].clone()
            prev_state = state[:n].clone()
            x = inputs[:n, index]
            proj_in = x @ params["input_linearity"]
            proj_state = prev_state @ params["state_linearity"] + params["state_bias"]
            gates = proj_in + proj_state
            i = torch.sigmoid(gates[:, :C])
            f = torch.sigmoid(gates[:, C : 2 * C])
            g = torch.tanh(gates[:, 2 * C : 3 * C])
            o = torch.sigmoid(gates[:, 3 * C :])
            c = i * g + f * prev_memory
            if self.cell_clip is not None:
                c = torch.clamp(c, -self.cell_clip, self.cell_clip)
            h = (o * torch.tanh(c)) @ params["state_projection"]
            if self.proj_clip is not None:
                h = torch.clamp(h, -self.proj_clip, self.proj_clip)
            memory = memory.clone()
            state = state.clone()
            memory[:n] = c
            state[:n] = h
            out[:n, index] = h
        return out

    @torch.no_grad()
    def run_batch(self, sentences: Sequence[Sequence[str]]) -> List[np.ndarray]:
        """Layers of each sentence without boundaries: list of ``(L, n_tokens, 2P)``."""
        lengths = [len(s) + 2 for s in sentences]
        total = max(lengths)
        ids = torch.zeros(len(sentences), total, self.max_chars, dtype=torch.long)
        for b, sent in enumerate(sentences):
            for t, tok in enumerate(["<S>", *sent, "</S>"]):
                ids[b, t] = torch.tensor(char_ids(tok, self.max_chars))
        tokens = self.token_layer(ids.view(-1, self.max_chars)).view(len(sentences), total, -1)
        mask = (torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]).unsqueeze(-1)
        tokens = tokens * mask
        order = sorted(range(len(sentences)), key=lambda b: -lengths[b])
        sorted_lengths = [lengths[b] for b in order]
        layers = [torch.cat([tokens, tokens], dim=-1)]
        inputs = [tokens[order], tokens[order]]
        for layer in range(len(self.cells[0])):
            outputs = []
            for d in range(2):
                h = self.cell(inputs[d], sorted_lengths, self.cells[d][layer], forward=d == 0)
                if layer > 0 and self.skip:
                    h = h + inputs[d]
                outputs.append(h)
            inputs = outputs
            unsorted = [torch.empty_like(h) for h in outputs]
            for d in range(2):
                unsorted[d][order] = outputs[d]
            layers.append(torch.cat(unsorted, dim=-1))
        stacked = torch.stack(layers, dim=1).numpy()  # (B, L, T, 2P)
        return [stacked[b, :, 1 : lengths[b] - 1] for b in range(len(sentences))]

    def embed_sentences(self, sentences: Sequence[Sequence[str]], batch_size: int = 32) -> List[np.ndarray]:
        """All sentences in file order, ``batch_size`` sentences a batch."""
        result: List[np.ndarray] = []
        for start in range(0, len(sentences), batch_size):
            result.extend(self.run_batch(sentences[start : start + batch_size]))
        return result
