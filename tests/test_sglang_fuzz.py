"""Engine payload-parser fuzz targets: the guard, the payloads, the seeds, and SGLang 0.5.23.

A small fake engine, written here (not SGLang's code), proves the guard offline:
a bare ``KeyError`` from inside a parser is saved as a finding with its payload,
a mixed-format request that a validator accepts is caught, hangs and messageless
errors are findings, a baseline lets known findings through. The release itself
(``network``: downloaded once per cache) runs every seed: plain seeds must pass,
and each ``known-*.json`` seed (a saved finding) must still reproduce its engine
bug, so a fix upstream shows up as a failing test to retire the seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mmharness import cli
from mmharness.engines.sglang import fuzz as sp
from mmharness.engines.sglang import layout, parsers
from mmharness.fuzz import FINDING_FORMAT, FuzzBaseline, Hang, SilentAcceptance
from mmharness.fuzz import payloads as fuzz_payloads
from mmharness.targets import loader
from mmharness.targets.base import TargetError

ROOT = Path(__file__).parent.parent
BASELINE = ROOT / "corpus" / "fuzz-baseline.json"
SEEDS = [(name, seed) for name in sp.TARGETS for seed in sorted((ROOT / "corpus" / name).glob("*.json"))]


@pytest.fixture
def findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "findings"
    monkeypatch.setenv("MMHARNESS_FINDINGS", str(directory))
    return directory


def saved(directory: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]


def data(payload: dict) -> bytes:
    return json.dumps(payload).encode()


# A fake engine -----------------------------------------------------------------------------

FAKE_IO_STRUCT = '''
"""A fake request type for mmharness tests: each prompt picks a way to fail."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from sglang.srt.managers.schedule_batch import Modality


@dataclass
class GenerateReqInput:
    text: Optional[Any] = None
    image_data: Optional[Any] = None

    def normalize_batch_and_arguments(self):
        if self.text == "bare-key-error":
            return {}["image_data"]
        if self.text == "no-message":
            raise ValueError()
        if self.text == "len":
            return len(5)
        if self.text == "documented":
            raise ValueError("text: documented error")
        if self.text == "spin":
            while True:
                pass
        self.is_single = isinstance(self.text, str)
        self.batch_size = 1 if self.is_single else len(self.text)
        if not self.is_single and isinstance(self.image_data, list):
            self.image_data = [i if isinstance(i, list) else [i] for i in self.image_data]

    def __getitem__(self, i):
        return GenerateReqInput(text=self.text[i], image_data=self.image_data[i])
'''

FAKE_BASE_PROCESSOR = '''
"""A fake processor for mmharness tests: a validator that accepts anything, a naive collector."""
from sglang.srt.managers.schedule_batch import Modality, MultimodalDataItem


class BaseMultimodalProcessor:
    def __init__(self, hf_config):
        self.ATTR_NAME_TO_MODALITY = {"pixel_values": Modality.IMAGE}
        self.FEATURE_NAMES = ["pixel_values"]

    @staticmethod
    def validate_mm_data(image_data=None, video_data=None, audio_data=None):
        return None

    def collect_mm_items_from_processor_output(self, data_dict, modality=None):
        item = MultimodalDataItem(modality=modality or Modality.IMAGE)
        for key, value in data_dict.items():
            if key in self.FEATURE_NAMES:
                item.set("feature", value)
            elif key == "precomputed_embeddings":
                item.set(key, value)
        return [item]
'''


def fake_release(root: Path, *, processor: str = FAKE_BASE_PROCESSOR) -> Path:
    files = {
        "sglang/srt/managers/io_struct.py": FAKE_IO_STRUCT,
        "sglang/srt/multimodal/processors/base_processor.py": processor,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def fake(tmp_path: Path) -> parsers.Parsers:
    return parsers.resolve(str(fake_release(tmp_path / "release")))


def test_a_bare_key_error_from_a_parser_is_saved_with_its_payload(fake, findings):
    entry = sp.entry(sp.IMAGE_DATA, fake)
    payload = {"text": "bare-key-error", "image_data": "https://example.com/a.png"}
    with pytest.raises(KeyError):
        entry(data(payload))
    (finding,) = saved(findings)
    assert finding["format"] == FINDING_FORMAT
    assert finding["parser"] == sp.IMAGE_DATA
    assert finding["exception"] == "KeyError: 'image_data'"
    assert finding["where"] == "io_struct.py:GenerateReqInput.normalize_batch_and_arguments"
    assert finding["location"]["file"] == "sglang/srt/managers/io_struct.py"
    assert finding["payload"] == payload
    assert finding["target"]["spec"] == fake.name
    assert "Traceback" in finding["traceback"]


def test_a_saved_finding_replays_as_an_input(fake, findings):
    entry = sp.entry(sp.IMAGE_DATA, fake)
    with pytest.raises(KeyError):
        entry(data({"text": "bare-key-error"}))
    (path,) = findings.glob("*.json")
    record = path.read_bytes()
    path.unlink()
    with pytest.raises(KeyError):
        entry(record)
    (again,) = saved(findings)
    assert again["payload"] == {"text": "bare-key-error"}


def test_documented_errors_pass_but_not_without_a_message(fake, findings):
    entry = sp.entry(sp.IMAGE_DATA, fake)
    entry(data({"text": "documented"}))
    assert not findings.exists()
    with pytest.raises(ValueError):
        entry(data({"text": "no-message"}))
    (finding,) = saved(findings)
    assert finding["reason"] == "ValueError without a message"


def test_strict_makes_an_error_python_raised_inside_the_parser_a_finding(fake, findings):
    sp.entry(sp.IMAGE_DATA, fake)(data({"text": "len"}))
    assert not findings.exists()
    with pytest.raises(TypeError):
        sp.entry(sp.IMAGE_DATA, fake, strict=True)(data({"text": "len"}))
    (finding,) = saved(findings)
    assert "not by a raise of the parser" in finding["reason"]
    sp.entry(sp.IMAGE_DATA, fake, strict=True)(data({"text": "documented"}))


def test_a_hang_is_a_finding(fake, findings):
    with pytest.raises(Hang):
        sp.entry(sp.IMAGE_DATA, fake, deadline_s=0.3)(data({"text": "spin"}))
    (finding,) = saved(findings)
    assert finding["exception"].startswith("Hang: the input ran past its deadline")


def test_mixed_format_acceptance_is_detected(fake, findings):
    entry = sp.entry(sp.MM_DATA, fake)
    precomputed = {"format": "precomputed_embedding", "feature": {"tensor": [4, 8]}}
    entry(data({"image_data": [precomputed], "video_data": [precomputed]}))
    entry(data({"image_data": ["https://example.com/a.png"], "audio_data": ["https://example.com/a.wav"]}))
    assert not findings.exists()
    with pytest.raises(SilentAcceptance, match="mixed-format: precomputed_embedding at image_data"):
        entry(data({"image_data": [precomputed, "https://example.com/b.png"]}))
    (finding,) = saved(findings)
    assert finding["where"] == "mixed-format"
    assert finding["payload"]["image_data"][0] == precomputed


def test_an_item_holding_a_feature_and_precomputed_embeddings_is_detected(fake, findings):
    entry = sp.entry(sp.MM_ITEMS, fake)
    entry(data({"data_dict": {"pixel_values": {"tensor": [4, 8]}}, "modality": "IMAGE"}))
    mixed = {"pixel_values": {"tensor": [4, 8]}, "precomputed_embeddings": {"tensor": [4, 8]}}
    with pytest.raises(SilentAcceptance, match=r"item 0 \(IMAGE\) carries both"):
        entry(data({"data_dict": mixed}))


def test_a_data_dict_that_builds_into_a_tensor_is_outside_the_engines_inputs(fake, findings):
    entry = sp.entry(sp.MM_ITEMS, fake)
    entry(data({"data_dict": {"tensor": [4, 8]}}))  # the engine only ever passes a dict here
    assert not findings.exists()


def test_mixed_nesting_in_a_batch_is_detected(fake, findings):
    entry = sp.entry(sp.IMAGE_DATA, fake)
    entry(data({"text": ["a", "b"], "image_data": [["https://a.png"], None]}))
    with pytest.raises(SilentAcceptance, match="mixed-nesting"):
        entry(data({"text": ["a", "b"], "image_data": [["https://a.png"], "https://b.png"]}))


def test_a_baseline_lets_known_findings_through_and_only_those(fake, findings, tmp_path, capsys):
    path = tmp_path / "baseline.json"
    known = {
        "parser": sp.IMAGE_DATA,
        "exception": "KeyError",
        "where": "io_struct.py:GenerateReqInput.normalize_batch_and_arguments",
    }
    path.write_text(json.dumps({"format": "mmharness.fuzz-baseline/1", "known": [known]}))
    entry = sp.entry(sp.IMAGE_DATA, fake, baseline=FuzzBaseline.load(path))
    entry(data({"text": "bare-key-error"}))
    entry(data({"text": "bare-key-error", "image_data": None}))
    assert capsys.readouterr().err.count("known finding") == 1
    assert not findings.exists()
    with pytest.raises(ValueError):
        entry(data({"text": "no-message"}))


def test_a_bad_baseline_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "baseline.json"
    path.write_text('{"known": []}')
    assert cli.main(["fuzz", "case-parser", "--baseline", str(path)]) == cli.USAGE_ERROR
    assert "not a baseline" in capsys.readouterr().err


def test_a_release_without_the_function_gets_one_line(tmp_path):
    release = fake_release(tmp_path / "old", processor="class BaseMultimodalProcessor:\n    pass\n")
    loaded = parsers.resolve(str(release))
    with pytest.raises(
        TargetError, match=r"has no BaseMultimodalProcessor\.validate_mm_data; sglang-mm-data needs it"
    ):
        sp.entry(sp.MM_DATA, loaded)
    sp.entry(sp.IMAGE_DATA, loaded)  # the other file is fine
    with pytest.raises(TargetError, match=r"io_struct\.py is not part of"):
        sp.entry(
            sp.IMAGE_DATA,
            parsers.resolve(str(release / "sglang/srt/multimodal/processors/base_processor.py")),
        )


def test_the_cli_describes_an_engine_target(tmp_path, capsys):
    release = fake_release(tmp_path / "release")
    assert cli.main(["fuzz", sp.MM_ITEMS, "--target", str(release), "--describe"]) == 0
    out = capsys.readouterr().out
    assert "calls: BaseMultimodalProcessor.collect_mm_items_from_processor_output" in out
    assert "sglang.srt.managers.schedule_batch.MultimodalDataItem" in out
    assert cli.main(["fuzz", "case-parser", "--describe"]) == cli.USAGE_ERROR
    assert cli.main(["fuzz", sp.MM_DATA, "--target", "reference", "--describe"]) == cli.USAGE_ERROR


# The loader's third-party stubs ------------------------------------------------------------


def test_a_missing_third_party_package_is_stubbed_only_when_asked(tmp_path):
    module = tmp_path / "sglang" / "srt" / "managers" / "io_struct.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        textwrap.dedent(
            """
            import mmharness_no_such_package
            import mmharness_no_such_package.wire
            from mmharness_no_such_package.images import Image

            class Struct(mmharness_no_such_package.Struct, tag=True, kw_only=True):
                pass

            ENCODER = mmharness_no_such_package.wire.Encoder()
            """
        )
    )
    source = parsers.parsers_source(tmp_path)
    before = set(sys.modules)
    engine = loader.load(
        source, layout.PARSERS, stub_packages=("mmharness_no_such_package", "mmharness_unused"), loud=False
    )
    assert engine.errors == {}
    assert engine.record.packages == {"mmharness_no_such_package"}
    assert {
        "mmharness_no_such_package.Struct",
        "mmharness_no_such_package.images.Image",
    } <= engine.record.stubbed
    assert not {m for m in set(sys.modules) - before if "no_such" in m or m.startswith("sglang")}
    refused = loader.load(source, layout.PARSERS)
    assert "ModuleNotFoundError" in refused.errors["sglang.srt.managers.io_struct"]


# Payloads ------------------------------------------------------------------------------


def test_tensor_markers_become_tensors_within_limits():
    torch = pytest.importorskip("torch")
    value = fuzz_payloads.with_tensors(
        {"a": [{"tensor": [2, 3]}, {"tensor": [1], "dtype": "int64"}], "b": {"tensor": "x"}}
    )
    first, second = value["a"]
    assert first.shape == (2, 3) and first.dtype == torch.float32 and second.dtype == torch.int64
    assert value["b"] == {"tensor": "x"}  # not a marker: passed on as a dict
    with pytest.raises(fuzz_payloads.OutsideLimits):
        fuzz_payloads.with_tensors({"tensor": [1000, 1000]})


def test_json_inputs_and_saved_findings_decode_to_payloads():
    assert fuzz_payloads.decode_json(b'{"image_data": []}') == {"image_data": []}
    assert fuzz_payloads.decode_json(b"[1]") is None
    assert fuzz_payloads.decode_json(b"{bad") is None
    record = {"format": FINDING_FORMAT, "payload": {"text": "x"}, "exception": "KeyError: 'x'"}
    assert fuzz_payloads.decode_json(data(record)) == {"text": "x"}


@pytest.mark.fuzz
def test_structured_inputs_give_payloads_of_each_target(fake):
    vocab = sp.vocabulary(fake)
    assert vocab.features == ("pixel_values",)
    for name, keys in (
        (sp.IMAGE_DATA, set(sp.REQUEST_FIELDS)),
        (sp.MM_DATA, set(sp.MEDIA_FIELDS)),
        (sp.MM_ITEMS, {"data_dict", "modality"}),
    ):
        for seed in range(50):
            raw = bytes((seed * 37 + i * 11) % 256 for i in range(64))
            payload = sp.TARGETS[name].generate(fuzz_payloads.Draw(raw), vocab)
            assert set(payload) <= keys
            assert payload == sp.TARGETS[name].generate(fuzz_payloads.Draw(raw), vocab)
            json.dumps(payload)


def test_importing_the_engine_fuzzers_never_imports_torch():
    code = (
        "import sys, mmharness.engines.sglang.fuzz, mmharness.engines.sglang.parsers;"
        " print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# Seeds and the baseline ------------------------------------------------------------------


def test_every_engine_target_has_seeds_with_both_founding_scenarios():
    for name in sp.TARGETS:
        names = [seed.name for target, seed in SEEDS if target == name]
        assert len(names) >= 8, name
        for scenario in ("partial-precomputed-multi-image", "aggregated-grid-item"):
            assert any(f"founding-{scenario}" in n for n in names), (name, scenario)


def test_the_baseline_lists_exactly_the_known_seeds():
    baseline = FuzzBaseline.load(BASELINE)
    seeded = set()
    for name, seed in SEEDS:
        record = json.loads(seed.read_text())
        if record.get("format") == FINDING_FORMAT:
            assert seed.name.startswith("known-"), seed
            assert record["parser"] == name
            seeded.add((name, record["exception"].split(":")[0], record["where"]))
    assert {(k.parser, k.exception, k.where) for k in baseline.known} == seeded


# Against SGLang 0.5.23 ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def release_parsers(harness_cache) -> parsers.Parsers:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MMHARNESS_CACHE", str(harness_cache))
        return parsers.resolve(sp.DEFAULT_TARGET)


@pytest.mark.network
@pytest.mark.parametrize(("parser", "seed"), SEEDS, ids=[f"{n}/{s.name}" for n, s in SEEDS])
def test_every_seed_against_sglang_0_5_23(parser, seed, release_parsers, findings):
    record = json.loads(seed.read_text())
    entry = sp.entry(parser, release_parsers)
    if record.get("format") != FINDING_FORMAT:
        entry(seed.read_bytes())
        assert not findings.exists(), f"{seed.name}: unexpected finding {saved(findings)}"
        run = sp.TARGETS[parser].runner(release_parsers)
        if seed.name.startswith("near-"):  # near misses meet the parser's documented error
            with pytest.raises(sp.EXPECTED):
                run(record)
        else:
            run(record)
        return
    with pytest.raises(BaseException) as raised:
        entry(seed.read_bytes())
    (finding,) = saved(findings)
    assert (type(raised.value).__name__, finding["where"]) == (
        record["exception"].split(":")[0],
        record["where"],
    ), (
        f"{seed.name}: the known engine bug changed or is fixed ({finding['exception']});"
        " update or retire the seed"
    )
    assert finding["payload"] == record["payload"]


@pytest.mark.fuzz
@pytest.mark.network
@pytest.mark.parametrize("parser", sorted(sp.TARGETS))
def test_structured_inputs_find_nothing_new_against_sglang_0_5_23(parser, release_parsers, findings):
    entry = sp.entry(parser, release_parsers, baseline=FuzzBaseline.load(BASELINE))
    for seed in range(400):
        entry(bytes((seed * 131 + i * i * 7 + i) % 256 for i in range(16 + seed % 200)))
    assert not findings.exists(), saved(findings)


@pytest.mark.fuzz
@pytest.mark.network
def test_the_cli_fuzzes_an_engine_target_by_run_count(release_parsers, harness_cache, tmp_path):
    command = [
        sys.executable, "-m", "mmharness.cli", "fuzz", sp.MM_DATA, "--baseline", str(BASELINE),
        "--findings", str(tmp_path / "findings"), "--", "-atheris_runs=300",
    ]  # fmt: skip
    env = {**os.environ, "MMHARNESS_CACHE": str(harness_cache)}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Done 300 in" in done.stderr
    assert "stubbed packages" in done.stderr
