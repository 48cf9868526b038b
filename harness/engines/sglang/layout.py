"""Where SGLang keeps what the harness loads, by release.

The rules moved once: 0.4.6 to 0.5.17 keep them in ``srt/managers/mm_utils.py``;
0.5.18 on in ``srt/managers/mm_schedule.py`` (``mm_utils.py`` keeps the per-image
splitter). The embedding cache is ``srt/mem_cache/multimodal_cache.py``, the
one-grid model is ``srt/models/kimi_k3.py`` (0.5.17 on). EVS (efficient video sampling, 0.5.8 on)
is the package ``srt/multimodal/evs/``: its ``EVSEmbeddingResult`` moves a pruned video's
placeholders (docs/rules.md, R3e). ``schedule_batch.py``
is never executed, only read: the fields of its ``MultimodalDataItem``
(``mmharness.engines.sglang.items``).
"""

from __future__ import annotations

from mmharness.targets.loader import Layout

PACKAGE = "sglang"
RULES_MODULES = ("sglang.srt.managers.mm_schedule", "sglang.srt.managers.mm_utils")
"""Where the rules live, newest layout first."""
SPLITTER_MODULE = "sglang.srt.managers.mm_utils"
CACHE_MODULE = "sglang.srt.mem_cache.multimodal_cache"
KIMI_MODULE = "sglang.srt.models.kimi_k3"
REQUEST_MODULE = "sglang.srt.managers.io_struct"
PROCESSOR_MODULE = "sglang.srt.multimodal.processors.base_processor"
EVS_PACKAGE = "sglang.srt.multimodal.evs"
EVS_MODULE = f"{EVS_PACKAGE}.evs_module"
"""Where the release's ``EVSEmbeddingResult`` is defined; the package's ``__init__`` re-exports it to
the rules, which import it by the package's name."""

ITEM_FILE = "srt/managers/schedule_batch.py"
"""Read (never run) for the fields of the release's ``MultimodalDataItem``."""
SETTINGS_FILE = "srt/environ.py"
"""Read (never run) for the settings the release declares (``mmharness.engines.sglang.settings``)."""
REQUEST_FILE = "srt/managers/io_struct.py"
PROCESSOR_FILE = "srt/multimodal/processors/base_processor.py"

FOLLOW = ("srt/managers", "srt/mem_cache", "srt/multimodal")
"""Where the scheduling code and its helpers live: a module a fork adds there (its chunked prefill moved
to a helper module of its own), imported at load time by a rules-side file, runs from the fork's tree
(``loader.Namespace.follows``). Model, layer, distributed and utility modules stay stubs."""
NEVER = frozenset({ITEM_FILE, SETTINGS_FILE, REQUEST_FILE, PROCESSOR_FILE})
"""Never followed: the files the harness reads (the item type, the settings) or loads as the payload
parsers, whose names the shims stand in for."""

RULES = Layout(
    package=PACKAGE,
    marker="srt",
    files={
        CACHE_MODULE: "srt/mem_cache/multimodal_cache.py",
        f"{EVS_PACKAGE}.evs_core": "srt/multimodal/evs/evs_core.py",
        EVS_MODULE: "srt/multimodal/evs/evs_module.py",
        "sglang.srt.managers.mm_schedule": "srt/managers/mm_schedule.py",
        SPLITTER_MODULE: "srt/managers/mm_utils.py",
        KIMI_MODULE: "srt/models/kimi_k3.py",
    },
    kind="multimodal scheduling rules",
    follow=FOLLOW,
    never=NEVER,
)
"""The scheduling targets: the cache first, so the rules find it loaded; then EVS's two modules, the
result type subclassing the cache's ``EmbeddingResult`` (``evs_module`` imports ``evs_core``, so
that comes first). ``evs_module`` reads ``MultimodalDataItem`` (a shim), ``transformers`` (a stub
where not installed) and ``BaseMultimodalProcessor.get_mm_items_offset`` (a shim,
``shims.get_mm_items_offset``: the processors' module is not loaded here). The package's
``__init__`` is not run (it also imports the EVS processor, which the rules never call): the rules'
import of ``EVSEmbeddingResult`` by the package's name is answered with ``evs_module``'s class
(``adapter._evs_type``)."""

PARSERS = Layout(
    package=PACKAGE,
    marker="srt",
    files={
        REQUEST_MODULE: REQUEST_FILE,
        PROCESSOR_MODULE: PROCESSOR_FILE,
    },
    kind="payload parsers",
)
"""The payload parsers the fuzzers load."""

RELEASE_MEMBERS = (
    *(f"{PACKAGE}/{rel}" for rel in (*RULES.files.values(), *PARSERS.files.values())),
    *(f"{PACKAGE}/{rel}" for rel in (ITEM_FILE, SETTINGS_FILE)),
    f"{PACKAGE}/_version.py",
    f"{PACKAGE}/version.py",
)
"""What is kept of a release's wheel: the files the loader runs or reads, and the version."""
