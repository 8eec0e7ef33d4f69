"""The fast pretraining path (fused LSTM, token layer once per type, no dead steps) against
plain autograd through ElmoBiLM.forward_with_boundaries, in float64."""
import numpy as np
import pytest
import torch

from spacy_elmo import ElmoBiLM
from spacy_elmo.bilm.lstm import ProjectedLstmLayer
from spacy_elmo.pretrain.batches import make_batch
from spacy_elmo.pretrain.corpus import Corpus
from spacy_elmo.pretrain.fused_lstm import fused_layer
from spacy_elmo.pretrain.lm_forward import fast_lm_loss, training_plan

OPTIONS = {
    "lstm": {"dim": 12, "projection_dim": 6, "n_layers": 2, "cell_clip": 1.0, "proj_clip": 0.8,
             "use_skip_connections": True},
    "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 4], [3, 8]], "n_highway": 2,
                 "activation": "relu", "n_characters": 262, "max_characters_per_token": 50},
}
WORDS = ["the", "bank", "river", "of", "a", "money", "x" * 60, "x" * 61, "é", ".", ",", "play"]


def _grads(module: torch.nn.Module):
    return {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}


def _assert_close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-6) -> None:
    scale = max(1.0, float(b.detach().abs().max()))
    assert float((a - b).detach().abs().max()) <= tol * scale


@pytest.mark.parametrize("clips", [(3.0, 3.0), (None, None), (0.3, 0.2)])
def test_fused_layer_equals_autograd(clips):
    torch.manual_seed(0)
    layer = ProjectedLstmLayer(input_dim=5, cell_dim=7, projection_dim=4, cell_clip=clips[0], proj_clip=clips[1]).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.mul_(3.0)  # drive the clipping
    batch_sizes = [5, 5, 3, 3, 1]
    x = torch.randn(2, sum(batch_sizes), 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, sum(batch_sizes), 4, dtype=torch.float64)
    expected = layer(x, batch_sizes)
    (expected * w).sum().backward()
    ref = {"x": x.grad.clone(), **_grads(layer)}
    x.grad = None
    layer.zero_grad()
    got = fused_layer(layer, x, batch_sizes)
    (got * w).sum().backward()
    _assert_close(got, expected)
    for name, grad in {"x": x.grad, **_grads(layer)}.items():
        _assert_close(grad, ref[name])


def test_fused_layer_on_a_table_of_distinct_rows_equals_autograd():
    """With ``src`` the layer reads rows of a table (the input products once per table row,
    their gradients summed per row): the same outputs and gradients as autograd on the
    gathered rows."""
    torch.manual_seed(1)
    layer = ProjectedLstmLayer(input_dim=5, cell_dim=7, projection_dim=4, cell_clip=0.5, proj_clip=0.4).double()
    batch_sizes = [4, 3, 3, 1]
    M = sum(batch_sizes)
    table = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    src = torch.randint(0, 3, (2 * M,))
    w = torch.randn(2, M, 4, dtype=torch.float64)
    expected = layer(table.index_select(0, src).view(2, M, 5), batch_sizes)
    (expected * w).sum().backward()
    ref = {"table": table.grad.clone(), **_grads(layer)}
    table.grad = None
    layer.zero_grad()
    got = fused_layer(layer, table, batch_sizes, src)
    (got * w).sum().backward()
    _assert_close(got, expected)
    for name, grad in {"table": table.grad, **_grads(layer)}.items():
        _assert_close(grad, ref[name])


def test_fused_layer_refuses_second_backward():
    layer = ProjectedLstmLayer(input_dim=3, cell_dim=4, projection_dim=2, cell_clip=None, proj_clip=None)
    out = fused_layer(layer, torch.randn(2, 3, 3), [2, 1]).sum()
    out.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="retain_graph"):
        out.backward()


def _corpus(seed: int) -> Corpus:
    rng = np.random.default_rng(seed)
    lengths = [0, 1, 7, 3, 12, 7, 2]
    ids = rng.integers(0, len(WORDS), size=sum(lengths)).astype(np.int32)
    return Corpus(types=list(WORDS), ids=ids, offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


SOFTMAXES = [{"type": "adaptive", "cutoffs": [4, 8], "div_value": 2.0}, {"type": "full"}]


def _check_fast_against_plain(corpus: Corpus, sentences: np.ndarray, softmax) -> None:
    """fast_lm_loss and its gradients against plain autograd through every layer, float64."""
    torch.manual_seed(0)
    bilm = ElmoBiLM(OPTIONS, vocab_size=10, softmax_options=softmax).double()
    with torch.no_grad():
        for p in bilm.lstm.parameters():
            p.mul_(4.0)  # drive the clipping
    targets = np.arange(len(WORDS)) % 10
    batch = make_batch(corpus, corpus.offsets, sentences, corpus.char_table(bilm.max_chars), targets)
    assert batch.type_char_ids.shape[0] < sum(batch.lengths)  # repeated types
    # plain autograd: every layer at every row, then the rows BiLMLoss reads
    top = bilm.forward_with_boundaries(batch.char_ids, batch.lengths)[-1]
    P = top.shape[1] // 2
    nll_f = bilm.softmax.nll(top[batch.fwd_rows, :P], batch.fwd_targets)
    nll_b = bilm.softmax.nll(top[batch.bwd_rows, P:], batch.bwd_targets)
    (nll_f + 2 * nll_b).backward()
    ref = _grads(bilm)
    bilm.zero_grad()
    fast_f, fast_b = fast_lm_loss(bilm, batch, 0.0, True)
    (fast_f + 2 * fast_b).backward()
    got = _grads(bilm)
    _assert_close(fast_f, nll_f)
    _assert_close(fast_b, nll_b)
    assert set(got) == set(ref)
    for name in ref:
        _assert_close(got[name], ref[name])


@pytest.mark.parametrize("softmax", SOFTMAXES)
def test_fast_loss_and_gradients_equal_plain_autograd(softmax):
    _check_fast_against_plain(_corpus(0), np.array([4, 0, 2, 1, 6, 3, 5]), softmax)


@pytest.mark.parametrize("softmax", SOFTMAXES)
def test_shared_prefixes_and_suffixes_give_plain_autograd(softmax):
    """Sentences that begin or end alike (one repeated whole, one a prefix of others, one
    empty) share LSTM rows in the plan; the loss and every gradient are still autograd's."""
    texts = ["the bank of the river .", "the bank of a money .", "the bank of the river .", "a river .",
             "the bank", "", "play the river .", "the bank of"]
    ids = [[WORDS.index(w) for w in t.split()] for t in texts]
    lengths = [len(s) for s in ids]
    corpus = Corpus(types=list(WORDS), ids=np.array([i for s in ids for i in s], dtype=np.int32),
                    offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    sentences = np.array([3, 0, 5, 1, 7, 2, 6, 4])
    batch = make_batch(corpus, corpus.offsets, sentences, corpus.char_table(50), np.arange(len(WORDS)) % 10)
    plan = training_plan(np.asarray(batch.lengths), batch.token_types, batch.type_char_ids.shape[0])
    # rows a step: the distinct suffixes (forward prefixes: 1, 3, 3, 3, 3, 2, 2), 19 rows a
    # direction for the 38 (sentence, step) pairs
    assert plan.batch_sizes == [1, 3, 4, 4, 3, 2, 2] and sum(n + 1 for n in lengths) == 38
    _check_fast_against_plain(corpus, sentences, softmax)


def test_training_plan_reads_and_predicts():
    lengths = np.array([2, 0, 3])
    types = np.array([10, 11, 12, 13, 14])  # token rows of the table; <S> = 20, </S> = 21
    plan = training_plan(lengths, types, 20)
    # one row a distinct prefix (forward) or suffix (backward) at each step, the larger count of
    # the two: step 0 is <S> / </S> for every sentence, then the two non-empty ones part
    assert plan.batch_sizes == [1, 2, 2, 1]
    M = 6
    fwd, bwd = plan.src.numpy()[:M], plan.src.numpy()[M:]
    # a step's rows in the order of (parent row, token read)
    assert list(fwd) == [20, 10, 12, 11, 13, 14]
    assert list(bwd) == [21, 11, 14, 10, 13, 12]
    assert plan.parents[0, 1:].tolist() == [0, 0, 1, 2, 4]
    assert plan.parents[1, 1:].tolist() == [0, 0, 1, 2, 4]
    # forward: tokens (sentence order), then </S> of each sentence; backward: tokens, then <S>
    rows = plan.targets_rows.tolist()
    assert rows[:8] == [0, 1, 0, 2, 4, 3, 0, 5]
    assert rows[8:] == [M + r for r in [1, 0, 4, 2, 0, 3, 0, 5]]


@pytest.mark.parametrize("with_bias", [True, False])
def test_fused_softmax_equals_autograd_across_chunks(monkeypatch, with_bias):
    """The chunked softmax loss (gradient made in forward, scaled in backward) against
    torch's AdaptiveLogSoftmaxWithLoss under plain autograd, with chunks of a few rows
    that straddle neither segment (forward / backward direction) nor cluster."""
    from spacy_elmo.pretrain import fused_softmax

    monkeypatch.setattr(fused_softmax, "CHUNK_ELEMENTS", 40)  # 3 head rows a chunk
    monkeypatch.setattr(fused_softmax, "MIN_CHUNK_ROWS", 0)
    assert fused_softmax.chunk_rows(13) == 3
    torch.manual_seed(0)
    asm = torch.nn.AdaptiveLogSoftmaxWithLoss(6, 30, [10, 20], div_value=2.0, head_bias=with_bias).double()
    hidden = torch.randn(23, 6, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 30, (23,))
    segments = [9, 14]
    logp = asm(hidden, targets).output
    (-logp[:9].sum() - 3.0 * logp[9:].sum()).backward()
    ref = {"hidden": hidden.grad.clone(), **_grads(asm)}
    hidden.grad = None
    asm.zero_grad()
    nll = fused_softmax.adaptive_nll(asm, hidden, targets, segments)
    (nll[0] + 3.0 * nll[1]).backward()
    _assert_close(nll[0], -logp[:9].sum())
    _assert_close(nll[1], -logp[9:].sum())
    got = {"hidden": hidden.grad, **_grads(asm)}
    assert set(got) == set(ref)
    for name in ref:
        _assert_close(got[name], ref[name])
    with torch.no_grad():  # no gradient work without autograd; the same values
        _assert_close(fused_softmax.adaptive_nll(asm, hidden, targets, segments), nll)


def test_softmax_chunk_rows():
    """About a million logits a chunk, at least 256 rows unless that passes 16M logits."""
    from spacy_elmo.pretrain.fused_softmax import chunk_rows

    assert chunk_rows(2002) == 523  # en_cpu's head: the million-logit bound
    assert chunk_rows(10001) == chunk_rows(10000) == 256  # small's head and tail: the row floor
    assert chunk_rows(100000) == (1 << 24) // 100000 == 167  # a wide softmax: the buffer bound
    assert chunk_rows(10**9) == 1 and chunk_rows(0) == 1 << 20


def test_conv_max_pool_gives_autograd_gradients():
    """The char CNN's training node (``bilm.conv_pool.ConvMaxPool``: gradients summed per
    character of each chosen window) gives autograd's gradients through the plain modules,
    with the max-pool through ``amax`` (ties split) and through ``max`` (one window each): ties
    come from windows that see the same characters (the padding windows of short tokens,
    repeated letters), so every parameter gradient is the same, padding row included."""
    from spacy_elmo.bilm import conv_pool
    from spacy_elmo.bilm.chars import tokens_to_char_ids

    torch.manual_seed(0)
    encoder = ElmoBiLM(OPTIONS, vocab_size=10).double().token_encoder
    chars = torch.from_numpy(tokens_to_char_ids(WORDS + ["aaaa", "zzzzzzzz", "a", "Ünïcödé🙂"], 50)).long()
    chars = torch.cat([chars, torch.zeros_like(chars[:1])])  # a padding token: every id 0
    weights = torch.randn(chars.shape[0], encoder.n_filters, dtype=torch.float64)
    table = encoder.char_embedding.weight
    conv_params = [p for conv in encoder.convs for p in (conv.weight, conv.bias)]

    def plain(pool):
        emb = encoder.char_embedding(chars).transpose(1, 2)
        return torch.cat([pool(conv(emb)) for conv in encoder.convs], dim=1)

    outputs = {
        "amax": plain(lambda x: x.amax(dim=2)),
        "max": plain(lambda x: x.max(dim=2).values),
        "fused": conv_pool.ConvMaxPool.apply(chars, table, 0, *conv_params),
        "encoder": conv_pool.conv_max_pool(chars, encoder.char_embedding, encoder.convs),
    }
    assert type(outputs["encoder"].grad_fn).__name__ == "ConvMaxPoolBackward"  # the CPU training path
    grads = {k: torch.autograd.grad((torch.relu(v) * weights).sum(), [table, *conv_params]) for k, v in outputs.items()}
    for name in ("max", "fused", "encoder"):
        _assert_close(outputs[name], outputs["amax"], 1e-12)
        for got, ref in zip(grads[name], grads["amax"]):
            assert got.shape == ref.shape
            _assert_close(got, ref, 1e-10)
    assert grads["fused"][0][0].abs().max() == 0  # the padding row gets no gradient
    with torch.no_grad():  # without autograd: the amax forward, the same values
        _assert_close(conv_pool.conv_max_pool(chars, encoder.char_embedding, encoder.convs), outputs["amax"], 1e-12)


def test_conv_max_pool_with_no_tokens():
    """An empty batch of types under autograd: an empty output and zero gradients."""
    encoder = ElmoBiLM(OPTIONS, vocab_size=10).token_encoder
    out = encoder(torch.zeros(0, 50, dtype=torch.long))
    assert out.shape == (0, encoder.projection.out_features)
    out.sum().backward()
    assert all(float(conv.weight.grad.abs().max()) == 0 for conv in encoder.convs)
    assert float(encoder.char_embedding.weight.grad.abs().max()) == 0


def test_fused_softmax_float32_error_is_autograds():
    """In float32 the fused loss (logits in base 2, ``exp2``) is as close to the float64 result as
    plain float32 autograd, at logits of realistic size (up to about 25)."""
    from spacy_elmo.pretrain import fused_softmax

    torch.manual_seed(0)
    x64, w64 = torch.randn(600, 64, dtype=torch.float64), 0.4 * torch.randn(3001, 64, dtype=torch.float64)
    b64, targets = torch.randn(3001, dtype=torch.float64), torch.randint(0, 3001, (600,))

    def run(dtype, fused):
        x, w = x64.to(dtype, copy=True).requires_grad_(), w64.to(dtype, copy=True).requires_grad_()
        if fused:
            loss = fused_softmax.linear_nll(x, w, b64.to(dtype), targets, [600]).sum()
        else:
            loss = torch.nn.functional.cross_entropy(x @ w.t() + b64.to(dtype), targets, reduction="sum")
        loss.backward()
        return [t.double() for t in (loss.detach(), x.grad, w.grad)]

    exact = run(torch.float64, False)
    assert float((exact[0] - run(torch.float64, True)[0]).abs()) < 1e-9 * float(exact[0])
    errors = {fused: [float((a - b).abs().max() / b.abs().max()) for a, b in zip(run(torch.float32, fused), exact)]
              for fused in (False, True)}
    for fused_error, plain_error in zip(errors[True], errors[False]):
        assert fused_error <= 3 * plain_error + 1e-7


def test_conv_max_pool_window_index_past_256_windows():
    """Tokens with more than 256 windows (a long ``max_characters_per_token``): the window index
    that training keeps does not wrap around, so the gradients still equal autograd's."""
    from spacy_elmo.bilm import conv_pool

    torch.manual_seed(0)
    embedding = torch.nn.Embedding(262, 4, padding_idx=0).double()
    convs = [torch.nn.Conv1d(4, 3, 2).double()]
    chars = torch.randint(1, 262, (2, 300))
    chars[:, 280] = 7
    with torch.no_grad():  # every filter's max lies in window 279 or 280, past 256
        convs[0].weight.abs_()
        embedding.weight[7] = 10.0
    params = [embedding.weight, convs[0].weight, convs[0].bias]
    fused = conv_pool.ConvMaxPool.apply(chars, embedding.weight, 0, *params[1:])
    plain = convs[0](embedding(chars).transpose(1, 2)).amax(dim=2)
    weights = torch.randn_like(plain)
    got = torch.autograd.grad((fused * weights).sum(), params)
    expected = torch.autograd.grad((plain * weights).sum(), params)
    _assert_close(fused, plain, 1e-12)
    assert bool((conv_pool._a_max_window(conv_pool._window_products(embedding(chars), *params[1:]), fused) >= 256).all())
    for a, b in zip(got, expected):
        _assert_close(a, b, 1e-10)
