"""The limits of the Messages API's models: output ceilings and context windows, from the dated table in
``data/models.yaml`` (its source and the date it was checked are in the file, as for the price table).

The scripted server states a scenario's limits relative to the model a request asks for: a ``max_tokens``
above *that* model's ceiling (``max_tokens_over_ceiling``, ``{ceiling}`` in an error message), a usage that
fills *that* model's window (``usage.window_share``, ``usage.fills_window``, ``{window}``), a request above
*that* model's ceiling or window answered with the API's 400, a prefill refused where *that* model refuses it.
A model the table does not list is answered with the limits of the table's ``default`` model, and
:attr:`ModelLimits.known` says so; such a model is not refused a prefill (nothing says it would be).

The table is also where the project's model names come from: :func:`default_model` is the model a run uses
unless told otherwise.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path


from ..core.errors import ConfigError
from ..core.paths import data_dir, read_dated_table

MODELS_FILE = data_dir() / "models.yaml"
_DATE_SUFFIX = re.compile(r"-\d{8}$")


@dataclass(frozen=True)
class ModelLimits:
    model: str             # the row of the table that was used
    context_window: int
    max_output: int
    known: bool = True     # False: the requested model is not in the table; these are the default's limits
    prefill: bool = True   # accepts a request that ends with an assistant message (see data/models.yaml)
    # None: no safety classifiers, no fallbacks; else the server-side chain ``fallbacks: "default"`` asks for
    # (empty: classifiers, but no server-side fallback; a list of fallbacks on it is a 400)
    fallbacks: tuple[str, ...] | None = None
    credit_targets: tuple[str, ...] = ()  # the models its refusals' fallback credit tokens may be redeemed on

    @property
    def classifiers(self) -> bool:
        """Whether its refusals carry fallback credit (it has safety classifiers and fallbacks, data/models.yaml)."""
        return self.fallbacks is not None


@dataclass(frozen=True)
class ModelTable:
    checked: str
    source: str
    default: str
    models: dict[str, ModelLimits]

    def limits(self, model: str | None) -> ModelLimits:
        """The limits of ``model`` (exact id, or the id without its date suffix), else the default's."""
        name = str(model or "")
        found = self.models.get(name) or self.models.get(_DATE_SUFFIX.sub("", name))
        if found is not None:
            return found
        default = self.models[self.default]
        return ModelLimits(default.model, default.context_window, default.max_output, known=False, prefill=True)


def load_models(path: str | Path = MODELS_FILE) -> ModelTable:
    """Read a model table; a malformed one raises ConfigError naming the file and the entry."""
    path = Path(path)
    raw = read_dated_table(path, "model table", ("checked", "source", "default"))
    models: dict[str, ModelLimits] = {}
    for model, row in raw["models"].items():
        values = [row.get(k) if isinstance(row, dict) else None for k in ("context_window", "max_output")]
        numbers = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        if len(numbers) != 2:
            raise ConfigError(f"{path}: models.{model}: expected context_window and max_output, whole numbers "
                              "above 0")
        prefill = row.get("prefill", True)
        if not isinstance(prefill, bool):
            raise ConfigError(f"{path}: models.{model}.prefill: expected true or false, got {prefill!r}")
        fallbacks = _model_list(path, model, row, "fallbacks")
        targets = _model_list(path, model, row, "credit_targets")
        models[str(model)] = ModelLimits(str(model), numbers[0], numbers[1], prefill=prefill, fallbacks=fallbacks,
                                         credit_targets=targets if targets is not None else fallbacks or ())
    for name, limits in models.items():
        unknown = [m for m in (*(limits.fallbacks or ()), *limits.credit_targets) if m not in models]
        if unknown:
            raise ConfigError(f"{path}: models.{name}: fallback {unknown[0]!r} is not one of the models")
    if raw["default"] not in models:
        raise ConfigError(f"{path}: default {raw['default']!r} is not one of the models")
    return ModelTable(str(raw["checked"]), str(raw["source"]), str(raw["default"]), models)


def _model_list(path: Path, model: str, row: dict, key: str) -> tuple[str, ...] | None:
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(m, str) and m for m in value):
        raise ConfigError(f"{path}: models.{model}.{key}: expected a list of model names, got {value!r}")
    return tuple(value)


@functools.lru_cache(maxsize=1)
def model_table() -> ModelTable:
    return load_models()


def model_limits(model: str | None) -> ModelLimits:
    """The limits of ``model`` in the project's table (``data/models.yaml``)."""
    return model_table().limits(model)


def default_model() -> str:
    """The model a run uses unless told otherwise: the table's ``default``."""
    return model_table().default
