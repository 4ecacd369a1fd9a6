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


def _phrase(name, k, v):
    """One parameter in words ('' where it says nothing beside the family's name)."""
    if k == "chunks":
        return "MACT" if v == "auto" else f"{v} chunk{'s' if v != 1 else ''}"
    if k == "experts":
        return {"stored": "", "buffer_free": "buffer-free experts", "moe_act": "act recomputed"}.get(v, f"experts {v}")
    if k == "store_when_fits":
        return "store when it fits" if v else ""
    if k == "objective":
        return "planning for time" if v == "time" else ""
    if k == "keep_act":
        return "keeps act" if v else ""
    if k == "capacity_factor":
        return f"factor {v:g}" if name == "capacity" else f"capacity {v:g}"
    if k == "device_factor":
        return f"device {v:g}"
    if k == "drop_policy":
        return {"probs": "drops lowest prob.", "position": "drops by position"}.get(v, f"drops by {v}")
    if k == "pad":
        return "padded" if v else ""
    if k == "format":
        return {"fp8_e5m2": "FP8 E5M2", "fp8_e4m3": "FP8 E4M3", "bf16": "bf16"}.get(v, str(v))
    if k == "scale":
        return f"scale per {v.rstrip('s')}" if isinstance(v, str) else f"scale {v}"
    if k == "recompute":
        return "no recompute" if v == "none" else f"recompute {v}"
    if k == "skip_dead":
        return "skips unused fc2+combine" if v else ""
    if k == "modules":
        return _modules(v)
    if k in ("h2d_gbps", "d2h_gbps"):
        return f"{v:g} GB/s"
    return f"{k.replace('_', ' ')} {v}"


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
