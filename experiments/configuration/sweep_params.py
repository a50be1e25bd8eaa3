"""W&B sweep parameters: every distribution W&B's sweep config accepts, drawn the way W&B's engine draws it.

W&B's engine (the ``sweeps`` package behind ``wandb agent``) fills each parameter's type from its keys, then
draws a value as the distribution's percentage point function at ``random.uniform(0, 1)``; grid search
turns ``int_uniform`` into every integer in ``[min, max]`` and ``q_uniform`` into ``arange(min, max, q)``
(``max`` excluded). This module does the same with the same scipy functions, so a seeded local sweep
equals W&B's engine seeded alike (``tests/experiments/test_sweep_parity.py`` checks every distribution).
Values come back as Python ``int`` / ``float`` / the YAML value; quantized draws are integers when ``q``
is an integer, as in W&B.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from famlab.experiments.configuration.config import ConfigInputError

# distribution -> keys it requires (beyond ``distribution``); W&B's schema also accepts them without
# ``distribution`` for constant (value), categorical (values), int_uniform (integer min/max), uniform (min/max)
REQUIRED: dict[str, tuple[str, ...]] = {
    "constant": ("value",),
    "categorical": ("values",),
    "categorical_w_probabilities": ("values", "probabilities"),
    "int_uniform": ("min", "max"),
    "uniform": ("min", "max"),
    "log_uniform": ("min", "max"),  # min / max are exponents: exp(U(min, max))
    "log_uniform_values": ("min", "max"),  # min / max are the values
    "inv_log_uniform": ("min", "max"),
    "inv_log_uniform_values": ("min", "max"),
    "q_uniform": ("min", "max"),
    "q_log_uniform": ("min", "max"),
    "q_log_uniform_values": ("min", "max"),
    "normal": (),
    "q_normal": (),
    "log_normal": (),
    "q_log_normal": (),
    "beta": (),
    "q_beta": (),
}
DEFAULTS = {"q": 1.0, "mu": 0.0, "sigma": 1.0, "a": 1, "b": 1}  # W&B's schema defaults
GRID = ("constant", "categorical", "int_uniform", "q_uniform")  # what W&B's grid search accepts


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) or isinstance(x, float) and x.is_integer()


def distribution(name: str, p: object) -> str:
    """The parameter's distribution, explicit or filled in from its keys as W&B does; a bad spec fails."""
    if not isinstance(p, dict):
        raise ConfigInputError(f"parameter {name} must be a mapping (values / value / min+max / distribution)")
    dist = p.get("distribution")
    if dist is None:
        if "values" in p:
            dist = "categorical_w_probabilities" if "probabilities" in p else "categorical"
        elif "value" in p:
            dist = "constant"
        elif "min" in p and "max" in p:
            dist = "int_uniform" if _is_int(p["min"]) and _is_int(p["max"]) else "uniform"
        else:
            raise ConfigInputError(f"parameter {name} needs values, value, min+max or a distribution")
    if dist not in REQUIRED:
        raise ConfigInputError(f"parameter {name}: distribution={dist!r} is not one of: {', '.join(REQUIRED)}")
    missing = [k for k in REQUIRED[dist] if k not in p]
    if missing:
        raise ConfigInputError(f"parameter {name}: distribution={dist} needs {' and '.join(missing)}")
    if "min" in p and "max" in p and not p["min"] < p["max"]:
        raise ConfigInputError(f"parameter {name}: min={p['min']} must be below max={p['max']}")
    if dist == "categorical_w_probabilities" and not math.isclose(sum(p["probabilities"]), 1.0):
        raise ConfigInputError(f"parameter {name}: probabilities must sum to 1")
    return dist


def grid_values(name: str, p: dict[str, Any]) -> list[object]:
    """The values a grid takes for this parameter (W&B's grid search); other distributions fail."""
    import numpy as np

    dist = distribution(name, p)
    if dist == "constant":
        return [p["value"]]
    if dist == "categorical":
        return list(p["values"])
    if dist == "int_uniform":
        return list(range(int(p["min"]), int(p["max"]) + 1))
    if dist == "q_uniform":
        return np.arange(p["min"], p["max"], p.get("q", DEFAULTS["q"])).tolist()  # max excluded, as W&B
    raise ConfigInputError(f"parameter {name}: method=grid takes {', '.join(GRID)} parameters, not {dist}")


def _quantize(r: Any, q: Any) -> Any:
    import numpy as np

    out = np.round(r / q) * q
    return out.astype(int) if isinstance(q, int) else out


def ppf(name: str, p: dict[str, Any], x: float) -> object:
    """The parameter's value at percentile ``x`` in [0, 1] (W&B's ``HyperParameter.ppf``)."""
    import numpy as np
    from scipy import stats

    dist = distribution(name, p)
    get: Callable[[str], Any] = {**DEFAULTS, **p}.get  # a YAML value (any type), None where unset
    lo, hi, q = get("min"), get("max"), get("q")
    if dist == "constant":
        return p["value"]
    if dist == "categorical":
        return p["values"][int(np.atleast_1d(stats.randint.ppf(x, 0, len(p["values"]))).astype(int)[0])]
    if dist == "categorical_w_probabilities":
        return p["values"][int(np.argmin(x >= np.cumsum(p["probabilities"]), axis=-1))]
    if dist == "int_uniform":
        return stats.randint.ppf(x, lo, hi + 1).astype(int).tolist()
    if dist == "uniform":
        value = stats.uniform.ppf(x, lo, hi - lo)
    elif dist == "q_uniform":
        value = _quantize(stats.uniform.ppf(x, lo, hi - lo), q)
    elif dist in ("log_uniform", "log_uniform_values"):
        a, b = (lo, hi) if dist == "log_uniform" else (np.log(lo), np.log(hi))
        value = np.exp(stats.uniform.ppf(x, a, b - a))
    elif dist in ("inv_log_uniform", "inv_log_uniform_values"):
        a, b = (lo, hi) if dist == "inv_log_uniform" else (-np.log(hi), -np.log(lo))
        value = np.exp(-stats.uniform.ppf(1 - x, a, b - a))
    elif dist in ("q_log_uniform", "q_log_uniform_values"):
        a, b = (lo, hi) if dist == "q_log_uniform" else (np.log(lo), np.log(hi))
        value = _quantize(np.exp(stats.uniform.ppf(x, a, b - a)), q)
    elif dist in ("normal", "q_normal"):
        value = stats.norm.ppf(x, loc=get("mu"), scale=get("sigma"))
        value = _quantize(value, q) if dist == "q_normal" else value
    elif dist in ("log_normal", "q_log_normal"):
        value = stats.lognorm.ppf(x, s=get("sigma"), scale=np.exp(get("mu")))
        value = _quantize(value, q) if dist == "q_log_normal" else value
    else:  # beta, q_beta
        value = stats.beta.ppf(x, a=get("a"), b=get("b"))
        value = _quantize(value, q) if dist == "q_beta" else value
    return np.asarray(value).item()  # a Python int or float


def sample(name: str, p: dict[str, Any], rng: random.Random) -> object:
    """One draw: :func:`ppf` at ``rng.uniform(0, 1)`` (one uniform per parameter, as W&B draws)."""
    return ppf(name, p, rng.uniform(0.0, 1.0))
