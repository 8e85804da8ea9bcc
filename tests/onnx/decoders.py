"""The decoders the ONNX tests compare: greedy over the graphs with numpy alone (a K/V list
grown and trimmed by hand, or kvscribe's cache through OnnxEngine), and the transformers
backend's torch decoder under the same policies."""

from __future__ import annotations

import numpy as np
import torch


def onnx_decode(graphs, features, plan, prompt, forced=None, keep=None, count_kept=False):
    """Greedy (or `forced` tokens) with the ONNX graphs, numpy only. The K/V cache is a list
    of arrays grown by each step's new K/V and cut to the newest `keep` entries; positions
    count every token seen (or, with `count_kept`, restart at the kept count). Returns the
    tokens and each step's logits [vocab] (the first is the prompt's last position)."""
    encoder, step = graphs
    cross = encoder.run(None, {"features": features})
    rules = plan.setup.rules
    first, later = rules.first.numpy(), rules.later.numpy()
    past = [np.zeros((1, 6, 0, 64), np.float32) for _ in range(len(cross))]
    tokens, logits, fed, seen = [], [], list(prompt), 0
    for _ in range(plan.max_new(len(prompt))):
        start = past[0].shape[2] if count_kept else seen
        positions = np.arange(start, start + len(fed))[None]
        out = step.run(None, feed(step, np.array([fed]), positions, past, cross))
        seen += len(fed)
        past = [np.concatenate([p, n], axis=2) for p, n in zip(past, out[1:-1], strict=True)]
        if keep is not None:
            past = [p[:, :, -keep:] for p in past]
        logits.append(out[0][0, -1])
        if forced is not None:
            if len(tokens) == len(forced):
                break
            token = forced[len(tokens)]
        else:
            token = int(np.where(later if tokens else first, -np.inf, logits[-1]).argmax())
            if token == plan.setup.eot:
                break
        tokens.append(token)
        fed = [token]
    return tokens, logits


def feed(step, tokens, positions, past, cross) -> dict:
    names = [i.name for i in step.get_inputs()]
    values = [tokens.astype(np.int64), positions.astype(np.int64), *past, *cross]
    return dict(zip(names, values, strict=True))


def torch_greedy(backend, plan, window, specs=None, cross_spec=None) -> list[int]:
    """The transformers backend's own greedy search (kvscribe/stepped/search.py) on the window,
    under the plan's cache policies or `specs` and `cross_spec`."""
    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.stepped.search import search

    prompt = plan.prompt_for([])
    cross = CrossAttentionStore(cross_spec or plan.cross_spec, 1)
    with torch.inference_mode():
        cross.fill(backend.network.model.encoder(window), backend.network.model.decoder)
    cache = PolicyCache(specs or plan.self_specs)
    sot, most = plan.sot_index(prompt), plan.max_new(len(prompt))
    result = search(plan.setup, prompt, sot, cache, cross, 1, most)
    return result.tokens


def torch_logits(backend, window, prompt, tokens, policy: str) -> list[np.ndarray]:
    """Each step's logits from the backend's PolicyDecoder under `policy`, fed `tokens`."""
    from kvscribe.backends.transformers.decoder import PolicyDecoder
    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.kvcache.spec import parse_cross, parse_policy

    decoder = PolicyDecoder(backend.network)
    layers = backend.network.config.decoder_layers
    cross = CrossAttentionStore(parse_cross("shared"), 1)
    cache = PolicyCache(parse_policy(policy, layers))
    with torch.inference_mode():
        cross.fill(backend.network.model.encoder(window), backend.network.model.decoder)
        out = [decoder.logits(torch.tensor([prompt]), cache, cross)[0, -1].numpy()]
        for token in tokens:
            out.append(decoder.logits(torch.tensor([[token]]), cache, cross)[0, -1].numpy())
    return out


def engine_greedy(engine, features, plan, specs, cross_spec, on_step):
    """Greedy without timestamps through OnnxEngine; `on_step` hears (reported, walked)
    bytes after every step. Returns the tokens and the cache."""
    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from tests.kv_storage import reachable_storage_bytes

    prompt = plan.prompt_for([])
    cross = CrossAttentionStore(cross_spec, 1)
    cross.fill_projected(engine.encode(features))
    cache = PolicyCache(specs)
    first, later = plan.setup.rules.first.numpy(), plan.setup.rules.later.numpy()
    tokens, fed = [], list(prompt)
    for _ in range(plan.max_new(len(prompt))):
        logits = engine.step(np.array([fed]), cache, cross).logits[0, -1]
        on_step((cache.held_bytes, reachable_storage_bytes(cache)))
        token = int(np.where(later if tokens else first, -np.inf, logits).argmax())
        if token == plan.setup.eot:
            break
        tokens.append(token)
        fed = [token]
    return tokens, cache
