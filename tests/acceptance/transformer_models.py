"""The issue-34 networks at the sizes the acceptance names (width 32, 2 heads, feed-forward 64, sequence 16)
or smaller: nn.TransformerEncoderLayer (batch first or sequence first, ReLU or GELU, post- or pre-norm), a
2-layer nn.TransformerEncoder, and a hand-written causal attention block (fused q/k/v projection Split into
heads, a constant causal mask through Where/Expand, Softmax, LayerNorm, GELU in its tanh form)."""
from __future__ import annotations

import pytest

D_MODEL, HEADS, FEEDFORWARD, SEQUENCE = 32, 2, 64, 16


def encoder(layers=1, activation="gelu", batch_first=True, norm_first=False, d_model=D_MODEL, heads=HEADS,
            feedforward=FEEDFORWARD, seed=0):
    """torch's encoder layer (or a stack of ``layers``), no dropout, behind a forward that takes x only."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(d_model, heads, feedforward, dropout=0.0, activation=activation,
                                             batch_first=batch_first, norm_first=norm_first)
    inner = layer if layers == 1 else torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    class OnlyX(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

    return OnlyX().eval()


def causal_attention(d_model=D_MODEL, heads=HEADS, feedforward=FEEDFORWARD, sequence=SEQUENCE, seed=0):
    """A hand-written decoder-style block: softmax(q k^T / sqrt(d) masked causally) v with q, k, v split from one
    projection, a residual, LayerNorm, and a GELU (tanh form) feed-forward with its residual."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)

    class CausalBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(d_model, 3 * d_model), torch.nn.Linear(d_model, d_model)
            self.norm = torch.nn.LayerNorm(d_model)
            self.up, self.down = torch.nn.Linear(d_model, feedforward), torch.nn.Linear(feedforward, d_model)
            self.register_buffer("causal", torch.tril(torch.ones(sequence, sequence, dtype=torch.bool)))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = (t.view(b, s, heads, d // heads).transpose(1, 2) for t in self.qkv(x).split(d, dim=-1))
            scores = q @ k.transpose(-2, -1) / (d // heads) ** 0.5
            scores = torch.where(self.causal[:s, :s].expand(b, heads, s, s), scores, torch.tensor(float("-inf")))
            attended = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, d)
            h = self.norm(x + self.out(attended))
            return h + self.down(torch.nn.functional.gelu(self.up(h), approximate="tanh"))

    return CausalBlock().eval()


def gpt_block(d_model=D_MODEL, heads=HEADS, sequence=SEQUENCE, seed=0):
    """A GPT-2-style pre-norm block: one LayerNorm before attention and the MLP, q/k/v split from one projection,
    ``scaled_dot_product_attention(..., is_causal=True)`` (its mask built by the exporter), tanh GELU."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = torch.nn.LayerNorm(d_model), torch.nn.LayerNorm(d_model)
            self.qkv, self.out = torch.nn.Linear(d_model, 3 * d_model), torch.nn.Linear(d_model, d_model)
            self.up, self.down = torch.nn.Linear(d_model, 4 * d_model), torch.nn.Linear(4 * d_model, d_model)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = (t.view(b, s, heads, d // heads).transpose(1, 2) for t in self.qkv(self.norm1(x)).split(d, -1))
            attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(attended.transpose(1, 2).reshape(b, s, d))
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x)), approximate="tanh"))

    return Block().eval()


def vit(d_model=D_MODEL, heads=HEADS, feedforward=FEEDFORWARD, image=16, patch=4, classes=10, seed=0):
    """A small vision transformer: a patch-embedding Conv (stride = kernel), a learned position embedding, one
    encoder layer (GELU), the mean over the patches and a linear head; input (1, 1, image, image)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    patches = (image // patch) ** 2

    class ViT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = torch.nn.Conv2d(1, d_model, patch, patch)
            self.position = torch.nn.Parameter(0.1 * torch.randn(1, patches, d_model))
            self.encoder = torch.nn.TransformerEncoderLayer(d_model, heads, feedforward, dropout=0.0,
                                                            activation="gelu", batch_first=True)
            self.head = torch.nn.Linear(d_model, classes)

        def forward(self, x):
            tokens = self.patch(x).flatten(2).transpose(1, 2) + self.position
            return self.head(self.encoder(tokens).mean(dim=1))

    return ViT().eval()


def sample_shape(batch_first=True, sequence=SEQUENCE, d_model=D_MODEL) -> tuple:
    """The exported file's input: (1, sequence, width) batch first, (sequence, 1, width) sequence first."""
    return (1, sequence, d_model) if batch_first else (sequence, 1, d_model)


def example(shape):
    torch = pytest.importorskip("torch")
    return torch.zeros(*shape)


def data_shape(make, shape) -> tuple:
    """The sample shape a user's data has: the whole fixed input of torch's encoder modules (their batch of 1 a
    sample axis), (sequence, width) for the hand-written block (its batch axis read as the batch), an image
    (1, H, W) for the ViT and (sequence, width) for the GPT block (the user's batch, without the file's batch axis
    of 1)."""
    return shape[1:] if make in (causal_attention, vit, gpt_block) else shape
