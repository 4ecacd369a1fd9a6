"""Strategy labels, points and workloads as a figure's reader reads them: `memfine(chunks=4,experts=buffer_free)`
-> 'memfine, 4 chunks, buffer-free experts', the same words in every figure (tables keep the labels)."""
from . import records as R

_ATTENTION = ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"]
_MODULE = {"expert_fc1": "fc1", "expert_fc2": "fc2", "core_attn": "core_attn", "moe_act": "act"}


def _modules(mods):
    if len(mods) >= 8:
        return "all modules"
    if mods == _ATTENTION:
        return "attention-block modules"
    return "+".join(_MODULE.get(m, m) for m in mods) if mods else "no modules"


def _text(v):
    """A value as labels write it: the key of a parameter's declared phrases."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ",".join(map(_text, v)) + "]"
    return str(v)


def _phrase(name, k, v):
    """One parameter in words ('' where it says nothing beside the family's name), as the strategy
    declares it (Param::phrase and phrases, in `memfine schema --json`'s looks)."""
    said = R.SCHEMA.get("looks", {}).get(name, {}).get("params", {}).get(k)
    if said is not None and _text(v) in said["phrases"]:
        return said["phrases"][_text(v)]
    if said is None or not said["phrase"]:
        return f"{k.replace('_', ' ')} {v}"
    words = {"modules": _modules(v)} if "{modules}" in said["phrase"] else {}
    return said["phrase"].format(v=v, **words)


def strategy(label):
    """A strategy label in words: its family, then what its parameters change."""
    name, params = R.parse_label(label)
    words = []
    for k, v in params.items():
        w = _phrase(name, k, v)
        if w and w not in words:
            words.append(w)
    return ", ".join([name] + words)


def workload(config):
    """'zipf alpha 2.5, 32 experts top-4, EP 8' from a record's configuration."""
    m, w = config.get("model", {}), config.get("workload", {})
    kind = w.get("kind", "?")
    law = {"zipf": f"zipf alpha {w.get('alpha', '?')}", "lognormal": f"lognormal sigma {w.get('sigma', '?')}",
           "hot": "hot experts", "trace": "routing from a trace"}.get(kind, f"{kind} routing")
    if w.get("hot_placement") == "one_rank":
        law += " on one rank"
    parts = [law, f"{m.get('experts')} experts top-{m.get('topk')}", f"EP {config.get('parallel', {}).get('ep', 1)}"]
    return ", ".join(parts)


def swept(records):
    """'swept: zipf alpha 0, 0.5, 1.5' (a point's keys in words) or ''."""
    axes = R.sweep_axes(records)
    return "; ".join("swept: " + R.key_words(k) + " " + ", ".join(
        f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in vs) for k, vs in axes.items())
