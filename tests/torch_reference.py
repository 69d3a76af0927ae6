"""PyTorch's own modules holding our weights: the references of the parity tests (chapters 8-10).

Our parameter names become PyTorch's through `transformer.reference.torch_name` (chapter 8).
Every load is strict, so a parameter that maps nowhere fails the test instead of hiding.
"""

import warnings

from torch import nn

from transformer.decoder import Decoder, DecoderLayer
from transformer.encoder import Encoder, EncoderLayer
from transformer.model import Transformer
from transformer.reference import torch_name


def sizes(layer: EncoderLayer | DecoderLayer) -> tuple[int, int, int]:
    """(d_model, n_heads, d_ff) of one of our layers; PyTorch ties d_head to d_model // n_heads."""
    attn = layer.self_attn
    if attn.n_heads * attn.d_head != attn.d_model:
        raise ValueError("PyTorch's layers need d_head = d_model // n_heads")
    return attn.d_model, attn.n_heads, layer.feed_forward.d_ff


def torch_stack(
    ours: Encoder | EncoderLayer | Decoder | DecoderLayer, nested: bool = False
) -> nn.Module:
    """nn.TransformerEncoder(Layer) or nn.TransformerDecoder(Layer) with our weights, eval mode.

    nested: let nn.TransformerEncoder run post-LN stacks on nested tensors (its default).
    """
    part = "encoder" if isinstance(ours, Encoder | EncoderLayer) else "decoder"
    layer = ours.layers[0] if isinstance(ours, Encoder | Decoder) else ours
    norm_first = layer.ff_residual.norm_first
    dtype = layer.self_attn.in_proj.weight.dtype
    torch_layer, torch_stack_type = {
        "encoder": (nn.TransformerEncoderLayer, nn.TransformerEncoder),
        "decoder": (nn.TransformerDecoderLayer, nn.TransformerDecoder),
    }[part]
    theirs = torch_layer(*sizes(layer), batch_first=True, norm_first=norm_first, dtype=dtype)
    if isinstance(ours, Encoder | Decoder):
        norm = nn.LayerNorm(theirs.linear2.out_features, dtype=dtype) if norm_first else None
        options = {"enable_nested_tensor": nested} if part == "encoder" else {}
        theirs = torch_stack_type(theirs, len(ours.layers), norm=norm, **options)
    theirs.load_state_dict({torch_name(k, part): v for k, v in ours.state_dict().items()})
    return theirs.eval()


def torch_transformer(model: Transformer) -> nn.Transformer:
    """nn.Transformer with our encoder and decoder weights (embeddings stay outside it)."""
    c = model.config
    with warnings.catch_warnings():  # PyTorch warns that pre-LN rules out its nested tensors
        warnings.simplefilter("ignore")
        theirs = nn.Transformer(
            *(c.d_model, c.n_heads, c.n_layers, c.n_layers, c.d_ff),
            batch_first=True,
            norm_first=c.norm_first,
            dtype=model.generator.weight.dtype,
        )
    if not c.norm_first:  # nn.Transformer always ends with LayerNorms; the post-LN paper does not
        theirs.encoder.norm, theirs.decoder.norm = nn.Identity(), nn.Identity()
    state = model.state_dict()
    theirs.load_state_dict(
        {
            torch_name(k, k.split(".")[0]): v
            for k, v in state.items()
            if k.startswith(("encoder.", "decoder."))
        }
    )
    return theirs.eval()
