"""prepare_data on real dataset layouts: presets, local files, offline errors and bad input.

The presets run on small fixture copies of each dataset (tests/dataset_fixtures.py), loaded by the same
``datasets.load_dataset(folder, name, split=...)`` call that loads the Hub repository; nothing reaches the
network or the user's Hugging Face cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow
import pyarrow.parquet
import pytest
import yaml
from conftest import DEFAULT_CONFIG, REPO, job_counts, run_snakemake
from dataset_fixtures import (
    AIME24_TRAIN,
    GPQA_DIAMOND,
    GSM8K_TEST,
    GSM8K_TRAIN,
    HUMANEVAL_TEST,
    MATH500_TEST,
    MBPP_TEST,
    MMLU_TEST,
    WRITERS,
)

from snakeskills.data.prepare import prepare_split
from snakeskills.data.specs import PRESETS_DIR, known_presets, load_preset, local_source_files, resolve_benchmark_spec
from snakeskills.data.synthetic import arithmetic_splits
from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_jsonl


@pytest.fixture
def offline_hf(monkeypatch, tmp_path) -> Path:
    """An empty, temporary HF_HOME and offline mode, for this process and for the subprocesses it starts."""
    import datasets.config
    import huggingface_hub.constants

    home = tmp_path / "hf-home"
    home.mkdir()
    for name, value in {"HF_HOME": str(home), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    # datasets and huggingface_hub read the environment once, at import: patch what they read then
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")
    monkeypatch.setattr(datasets.config, "DOWNLOADED_DATASETS_PATH", home / "datasets/downloads")
    monkeypatch.setattr(datasets.config, "EXTRACTED_DATASETS_PATH", home / "datasets/downloads/extracted")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(home / "hub"))
    return home


def preset_on_fixture(preset: str, folder: Path, **overrides) -> dict:
    """The preset's spec with hf.path pointed at a fixture copy of the dataset (as a user would override it)."""
    WRITERS[preset](folder)
    return resolve_benchmark_spec(preset, {"preset": preset, "hf": {"path": str(folder)}, **overrides})


# ---------------------------------------------------------------- presets


def test_presets_ship_and_match_the_schema():
    import jsonschema

    assert known_presets() == [
        "aime24",
        "aime25",
        "gpqa-diamond",
        "gsm8k",
        "humaneval",
        "math-500",
        "mbpp",
        "mmlu",
        "mmlu-pro",
    ]
    schema = yaml.safe_load((REPO / "config/schema.yaml").read_text())
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for preset in known_presets():
        jsonschema.validate({**config, "benchmarks": {preset: load_preset(preset)}}, schema)
        assert load_preset(preset)["source"] == "hf"
    assert {path.name for path in PRESETS_DIR.glob("*.yaml")} == {f"{name}.yaml" for name in known_presets()}


def test_preset_overrides_merge_deeply():
    spec = resolve_benchmark_spec("mygsm", {"preset": "gsm8k", "hf": {"path": "/data/gsm8k", "revision": "abc"}})
    assert spec["hf"] == {
        "path": "/data/gsm8k",
        "name": "main",
        "revision": "abc",
        "splits": {"train": "train", "test": "test"},
    }
    assert spec["preset"] == "gsm8k"
    assert spec["field_map"]["problem"] == "question"
    assert load_preset("gsm8k")["hf"]["path"] == "openai/gsm8k", "the preset itself is unchanged"


def test_gsm8k_preset(offline_hf, tmp_path):
    spec = preset_on_fixture("gsm8k", tmp_path / "gsm8k")
    test_rows = prepare_split("gsm8k", spec, "test")
    assert [row["id"] for row in test_rows] == ["gsm8k-test-000000", "gsm8k-test-000001", "gsm8k-test-000002"]
    assert [row["expected_answer"] for row in test_rows] == ["18", "3", "531000"]  # `#### 531,000` -> 531000
    first = test_rows[0]
    assert list(first)[:3] == ["id", "problem", "expected_answer"]
    assert first["problem"] == GSM8K_TEST[0]["question"]
    assert first["reference_solution"] == (
        "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
        "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer’s market."
    )
    assert first["question"] == GSM8K_TEST[0]["question"] and first["answer"] == GSM8K_TEST[0]["answer"]
    train_rows = prepare_split("gsm8k", spec, "train")
    assert [(row["id"], row["expected_answer"]) for row in train_rows] == [
        ("gsm8k-train-000000", "72"),
        ("gsm8k-train-000001", "10"),
    ]
    assert train_rows[1]["problem"] == GSM8K_TRAIN[1]["question"]
    assert not (offline_hf / "hub").exists(), "nothing downloaded"


def test_math500_preset_uses_unique_id(offline_hf, tmp_path):
    rows = prepare_split("math-500", preset_on_fixture("math-500", tmp_path / "math-500"), "test")
    assert [row["id"] for row in rows] == ["test/precalculus/807.json", "test/algebra/2584.json"]
    assert rows[0]["problem"] == MATH500_TEST[0]["problem"]
    assert rows[0]["expected_answer"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert rows[1]["reference_solution"] == MATH500_TEST[1]["solution"]
    assert rows[1]["level"] == 3 and rows[1]["subject"] == "Algebra"


def test_aime24_preset_maps_hub_train_to_our_test(offline_hf, tmp_path):
    spec = preset_on_fixture("aime24", tmp_path / "aime24")
    rows = prepare_split("aime24", spec, "test")
    assert [row["id"] for row in rows] == ["60", "61"]
    assert [row["expected_answer"] for row in rows] == ["204", "25"]
    assert rows[0]["reference_solution"] == AIME24_TRAIN[0]["solution"]
    assert rows[0]["url"].endswith("2024_AIME_I_Problems/Problem_1")
    with pytest.raises(SnakeskillsError, match=r"benchmarks\.aime24\.hf\.splits has no split 'train'"):
        prepare_split("aime24", spec, "train")


def test_aime25_preset_turns_int_answers_into_strings(offline_hf, tmp_path):
    rows = prepare_split("aime25", preset_on_fixture("aime25", tmp_path / "aime25"), "test")
    assert [row["id"] for row in rows] == ["aime25-test-000000", "aime25-test-000001"]
    assert [row["expected_answer"] for row in rows] == ["70", "16"]
    assert rows[0]["answer"] == 70 and rows[0]["problem_type"] == ["Number Theory"]


def test_mmlu_preset_letters_list_options_and_index_answers(offline_hf, tmp_path):
    spec = preset_on_fixture("mmlu", tmp_path / "mmlu")
    rows = prepare_split("mmlu", spec, "test")
    assert [row["expected_answer"] for row in rows] == ["B", "C"]  # ClassLabel 1 and 2
    assert rows[0]["problem"] == f"{MMLU_TEST[0]['question']}\nA. 0\nB. 4\nC. 2\nD. 6"
    assert rows[0]["options"] == "A. 0\nB. 4\nC. 2\nD. 6" and rows[0]["option_letters"] == "A, B, C, D"
    assert (rows[0]["B"], rows[0]["subject"], rows[0]["choices"]) == ("4", "abstract_algebra", ["0", "4", "2", "6"])
    assert [row["id"] for row in prepare_split("mmlu", spec, "train")] == ["mmlu-train-000000", "mmlu-train-000001"]
    assert spec["judge"]["extraction"] == "multichoice" and spec["prompt"]["template"] == "multiple-choice"


def test_mmlu_pro_preset_takes_up_to_ten_options_and_letter_answers(offline_hf, tmp_path):
    rows = prepare_split("mmlu-pro", preset_on_fixture("mmlu-pro", tmp_path / "mmlu-pro"), "test")
    assert [(row["id"], row["expected_answer"]) for row in rows] == [("70", "D"), ("71", "D")]
    assert rows[1]["option_letters"] == "A, B, C, D, E, F, G, H, I, J" and rows[1]["J"] == "57"
    assert rows[0]["problem"].endswith("\nE. 4\nF. 8") and "G" not in rows[0]


def test_gpqa_preset_shuffles_the_options_and_finds_the_correct_text(offline_hf, tmp_path):
    spec = preset_on_fixture("gpqa-diamond", tmp_path / "gpqa")
    rows = prepare_split("gpqa-diamond", spec, "test")
    assert [row["id"] for row in rows] == ["recTEST0001", "recTEST0002"]
    for row, source in zip(rows, GPQA_DIAMOND, strict=True):
        assert row[row["expected_answer"]] == source["Correct Answer"]
        assert sorted(row[letter] for letter in "ABCD") == sorted(
            source[column].strip() for column in spec["multiple_choice"]["options"]
        ), "every option once, stripped"
        assert row["problem"].startswith(source["Question"] + "\nA. ")
    assert rows == prepare_split("gpqa-diamond", spec, "test"), "the same order on every run"


def test_humaneval_preset_runs_the_check_function_with_the_prompt_as_starter(offline_hf, tmp_path):
    spec = preset_on_fixture("humaneval", tmp_path / "humaneval")
    rows = prepare_split("humaneval", spec, "test")  # the canonical solutions pass their tests while preparing
    assert [row["id"] for row in rows] == ["HumanEval/0", "HumanEval/2", "HumanEval/53"]
    for row, source in zip(rows, HUMANEVAL_TEST, strict=True):
        assert row["problem"] == row["starter_code"] == source["prompt"]
        assert row["tests"] == source["test"].rstrip("\n") + f"\ncheck({source['entry_point']})\n"
        assert row["reference_solution"] == source["canonical_solution"] and "expected_answer" not in row
    spec["code"]["reference"] = "prompt"  # a stub as the reference: the check catches the wrong column
    with pytest.raises(
        SnakeskillsError, match=r"3 of 3 reference solutions fail their own tests \(row HumanEval/0: fa"
    ):
        prepare_split("humaneval", spec, "test")


def test_mbpp_preset_shows_its_asserts_and_runs_its_setup(offline_hf, tmp_path):
    spec = preset_on_fixture("mbpp", tmp_path / "mbpp")
    rows = prepare_split("mbpp", spec, "test")
    assert [row["id"] for row in rows] == ["14", "17"]
    assert rows[1]["problem"] == (
        "Write a function to find the perimeter of a square.\nYour code should pass these tests:\n\n"
        + "\n".join(MBPP_TEST[1]["test_list"])
    )
    assert rows[1]["tests"] == "\n".join(MBPP_TEST[1]["test_list"]) + "\n", "an empty setup adds nothing"
    train = prepare_split("mbpp", spec, "train")
    assert train[1]["tests"].startswith("import re\nassert reverse_words('a b c') == 'c b a'")


def test_not_cached_and_offline_says_how_to_fix(offline_hf):
    spec = resolve_benchmark_spec("gsm8k", {"preset": "gsm8k"})
    with pytest.raises(SnakeskillsError) as error:
        prepare_split("gsm8k", spec, "test")
    message = str(error.value)
    assert "config key benchmarks.gsm8k.hf.path" in message
    assert "'openai/gsm8k' is not in the local Hugging Face cache and the Hub cannot be reached" in message
    assert "hf download --repo-type dataset openai/gsm8k --local-dir <folder>" in message
    assert "HF_HOME" in message


def test_wrong_config_name_and_missing_folder_name_the_key(offline_hf, tmp_path):
    spec = preset_on_fixture("gsm8k", tmp_path / "gsm8k", hf={"path": str(tmp_path / "gsm8k"), "name": "nope"})
    with pytest.raises(SnakeskillsError, match=r"config key benchmarks\.gsm8k\.hf .*'nope' not found"):
        prepare_split("gsm8k", spec, "test")
    spec = resolve_benchmark_spec("gsm8k", {"preset": "gsm8k", "hf": {"path": str(tmp_path / "absent")}})
    with pytest.raises(SnakeskillsError, match=r"benchmarks\.gsm8k\.hf\.path: local folder .*absent' does not exist"):
        prepare_split("gsm8k", spec, "test")


# ---------------------------------------------------------------- local files


def test_parquet_source(tmp_path):
    path = tmp_path / "test.parquet"
    rows = [{"question": "What is 2+2?", "answer": 4, "topic": "sums"}, {"question": "What is 3*3?", "answer": 9}]
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    spec = {
        "source": "parquet",
        "parquet": {"paths": {"test": str(path)}},
        "field_map": {"problem": "question", "expected_answer": "answer"},
    }
    prepared = prepare_split("mine", resolve_benchmark_spec("mine", spec), "test")
    assert prepared == [
        {"id": "mine-test-000000", "problem": "What is 2+2?", "expected_answer": "4", "question": "What is 2+2?"}
        | {"answer": 4, "topic": "sums"},
        {"id": "mine-test-000001", "problem": "What is 3*3?", "expected_answer": "9", "question": "What is 3*3?"}
        | {"answer": 9, "topic": None},
    ]
    assert local_source_files(spec, "test") == [str(path)]


def test_jsonl_source_with_extraction(tmp_path):
    path = tmp_path / "train.jsonl"
    write_jsonl(path, [{"id": "a1", "q": "Add 1,000 and 234.", "a": "1000 + 234 = 1234\n#### 1,234"}])
    spec = {
        "source": "jsonl",
        "jsonl": {"paths": {"train": str(path)}},
        "field_map": {
            "problem": "q",
            "expected_answer": {"column": "a", "regex": r"####\s*(.+?)\s*$", "remove": [","]},
            "reference_solution": {"column": "a", "regex": r"(?s)^(.*?)\s*####"},
        },
    }
    [row] = prepare_split("mine", resolve_benchmark_spec("mine", spec), "train")
    assert row["id"] == "a1" and row["expected_answer"] == "1234" and row["reference_solution"] == "1000 + 234 = 1234"
    assert local_source_files(spec, "train") == [str(path)]


def test_local_source_files_of_hf_folder_skip_hidden_files(tmp_path):
    folder = WRITERS["gsm8k"](tmp_path / "gsm8k")
    (folder / ".cache/huggingface").mkdir(parents=True)
    (folder / ".cache/huggingface/meta").write_text("x")
    files = local_source_files(resolve_benchmark_spec("g", {"preset": "gsm8k", "hf": {"path": str(folder)}}), "test")
    assert [Path(file).relative_to(folder).as_posix() for file in files] == [
        "README.md",
        "main/test-00000-of-00001.parquet",
        "main/train-00000-of-00001.parquet",
        "socratic/test-00000-of-00001.parquet",
        "socratic/train-00000-of-00001.parquet",
    ]
    assert local_source_files(resolve_benchmark_spec("g", {"preset": "gsm8k"}), "test") == [], "hub ids: none"
    missing = resolve_benchmark_spec("g", {"preset": "gsm8k", "hf": {"path": str(tmp_path / "absent")}})
    assert local_source_files(missing, "test") == [str(tmp_path / "absent")], "Snakemake reports it missing"


# ---------------------------------------------------------------- bad input


def test_row_missing_problem_or_expected_answer_names_file_and_row(tmp_path):
    path = tmp_path / "bad.parquet"
    rows = [{"problem": "1+1", "expected_answer": "2"}, {"problem": None, "expected_answer": "3"}]
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    spec = {"source": "parquet", "parquet": {"paths": {"test": str(path)}}}
    with pytest.raises(SnakeskillsError) as error:
        prepare_split("b", spec, "test")
    assert f"{path}: row 2 lacks required field 'problem'" in str(error.value)
    path = tmp_path / "bad.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": "2"}, {"problem": "2+2", "expected_answer": "4"}])
    with path.open("a") as handle:
        handle.write(json.dumps({"problem": "3+3"}) + "\n")
    with pytest.raises(SnakeskillsError) as error:
        prepare_split("b", {"source": "jsonl", "jsonl": {"paths": {"test": str(path)}}}, "test")
    assert f"{path}: row 3 lacks required field 'expected_answer'" in str(error.value)


def test_missing_expected_answer_in_a_dataset_names_dataset_and_row(offline_hf, tmp_path):
    folder = WRITERS["aime24"](tmp_path / "aime")
    data_file = folder / "data/train-00000-of-00001.parquet"
    table = pyarrow.parquet.read_table(data_file)
    rows = table.to_pylist()
    rows[1]["answer"] = None
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows, schema=table.schema), data_file)
    spec = resolve_benchmark_spec("aime24", {"preset": "aime24", "hf": {"path": str(folder)}})
    expected = r"dataset .*aime \(config default, split train\): row 2 lacks required field 'expected_answer'"
    with pytest.raises(SnakeskillsError, match=expected):
        prepare_split("aime24", spec, "test")


def test_field_map_naming_a_missing_column_names_key_and_columns(offline_hf, tmp_path):
    spec = preset_on_fixture("gsm8k", tmp_path / "gsm8k", field_map={"problem": "prompt"})
    with pytest.raises(SnakeskillsError) as error:
        prepare_split("gsm8k", spec, "test")
    message = str(error.value)
    assert "config key benchmarks.gsm8k.field_map.problem names column 'prompt'" in message
    assert "its columns are: question, answer" in message
    spec = preset_on_fixture("gsm8k", tmp_path / "gsm8k", field_map={"expected_answer": {"column": "final"}})
    with pytest.raises(SnakeskillsError, match=r"benchmarks\.gsm8k\.field_map\.expected_answer\.column names column"):
        prepare_split("gsm8k", spec, "test")


def test_field_map_missing_column_in_one_jsonl_row(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"question": "1+1", "answer": "2"}, {"answer": "3"}])
    spec = {"source": "jsonl", "jsonl": {"paths": {"test": str(path)}}, "field_map": {"problem": "question"}}
    with pytest.raises(SnakeskillsError) as error:
        prepare_split("b", spec, "test")
    assert f"{path}: row 2: config key benchmarks.b.field_map.problem maps 'problem' from column 'question'" in str(
        error.value
    )


def test_regex_that_does_not_match_names_row_and_key(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "a": "#### 2"}, {"problem": "2+2", "a": "four"}])
    rule = {"column": "a", "regex": r"####\s*(.+)"}
    spec = {"source": "jsonl", "jsonl": {"paths": {"test": str(path)}}, "field_map": {"expected_answer": rule}}
    with pytest.raises(SnakeskillsError, match=r"row 2: config key benchmarks\.b\.field_map\.expected_answer\.regex"):
        prepare_split("b", spec, "test")
    with pytest.raises(SnakeskillsError, match=r"benchmarks\.b\.field_map\.expected_answer\.regex: invalid pattern"):
        resolve_benchmark_spec("b", {**spec, "field_map": {"expected_answer": {"column": "a", "regex": "(("}}})


def test_unknown_preset_and_missing_source_settings_name_the_key():
    with pytest.raises(SnakeskillsError) as error:
        resolve_benchmark_spec("mine", {"preset": "gsm9k"})
    assert "config key benchmarks.mine.preset: unknown preset 'gsm9k'" in str(error.value)
    assert "known presets: aime24, aime25, gpqa-diamond, gsm8k, humaneval, math-500, mbpp, mmlu, mmlu-pro" in str(
        error.value
    )
    with pytest.raises(SnakeskillsError, match=r"config key benchmarks\.mine\.parquet is required"):
        resolve_benchmark_spec("mine", {"source": "parquet"})


# ---------------------------------------------------------------- through the real snakemake


def write_config(folder: Path, benchmarks: dict) -> Path:
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["benchmarks"].update(benchmarks)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def planned_jobs(workdir: Path, target: str, configfile: Path) -> dict[str, int]:
    process = run_snakemake(workdir, "--dry-run", "--quiet", "rules", "--cores", "1", target, configfile=configfile)
    assert process.returncode == 0, process.stdout + process.stderr
    return job_counts(process.stdout + process.stderr)


def test_gsm8k_preset_on_a_local_folder_through_snakemake(offline_hf, tmp_path):
    folder = WRITERS["gsm8k"](tmp_path / "datasets/gsm8k")
    configfile = write_config(tmp_path, {"gsm8k": {"preset": "gsm8k", "hf": {"path": str(folder)}}})
    target = "results/tiny-arithmetic/data/gsm8k/test.jsonl"
    process = run_snakemake(tmp_path, "--cores", "1", target, configfile=configfile, timeout=600)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / target).read_text().splitlines()]
    assert [(row["id"], row["expected_answer"]) for row in rows] == [
        ("gsm8k-test-000000", "18"),
        ("gsm8k-test-000001", "3"),
        ("gsm8k-test-000002", "531000"),
    ]
    assert rows[0]["reference_solution"].startswith("Janet sells 16 - 3 - 4")
    assert planned_jobs(tmp_path, target, configfile) == {}, "nothing to redo"
    spec = {"preset": "gsm8k", "hf": {"path": str(folder)}, "field_map": {"question_text": "question"}}
    changed = write_config(tmp_path / "changed", {"gsm8k": spec})
    assert planned_jobs(tmp_path, target, changed) == {"prepare_data": 1}, "a changed spec reruns it"
    edited = pyarrow.Table.from_pylist(GSM8K_TEST[:2])  # the dataset's files are inputs: an edit reruns it
    pyarrow.parquet.write_table(edited, folder / "main/test-00000-of-00001.parquet")
    assert planned_jobs(tmp_path, target, configfile) == {"prepare_data": 1}


def test_malformed_jsonl_line_stops_the_job_naming_file_and_line(tmp_path):
    source = tmp_path / "mine.jsonl"
    source.write_text('{"question": "1+1", "answer": "2"}\n{"question": "2+2", "answer": \n')
    spec = {
        "source": "jsonl",
        "jsonl": {"paths": {"test": str(source)}},
        "field_map": {"problem": "question", "expected_answer": "answer"},
    }
    configfile = write_config(tmp_path, {"mine": spec})
    target = "results/tiny-arithmetic/data/mine/test.jsonl"
    process = run_snakemake(tmp_path, "--cores", "1", target, configfile=configfile)
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert f"{source}:2" in output
    assert not (tmp_path / target).exists(), "no partial output is left"
    assert not list((tmp_path / "results").rglob("*.tmp"))


def jsonl_spec(path: Path, field_map: dict | None = None, split: str = "test") -> dict:
    return {"source": "jsonl", "jsonl": {"paths": {split: str(path)}}, "field_map": field_map or {}}


def test_prepare_split_jsonl_with_field_map(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(
        path,
        [
            {"id": "q1", "question": "What is 2+2?", "answer": 4},
            {"question": "What is 3+3?", "answer": "6", "level": 2},
        ],
    )
    rows = prepare_split("mybench", jsonl_spec(path, {"problem": "question", "expected_answer": "answer"}), "test")
    assert rows == [
        {"id": "q1", "question": "What is 2+2?", "answer": 4, "problem": "What is 2+2?", "expected_answer": "4"},
        {
            "question": "What is 3+3?",
            "answer": "6",
            "level": 2,
            "problem": "What is 3+3?",
            "expected_answer": "6",
            "id": "mybench-test-000001",
        },
    ]


def test_prepare_split_missing_expected_answer_names_row(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": "2"}, {"problem": "2+2"}])
    with pytest.raises(SnakeskillsError) as error:
        prepare_split("b", jsonl_spec(path), "test")
    assert "row 2" in str(error.value)
    assert "'expected_answer'" in str(error.value)
    assert str(path) in str(error.value)


def test_prepare_split_blank_expected_answer_raises(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": "  "}])
    with pytest.raises(SnakeskillsError, match="row 1 lacks required field 'expected_answer'"):
        prepare_split("b", jsonl_spec(path), "test")


def test_prepare_split_field_map_missing_column(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"question": "1+1", "answer": "2"}, {"answer": "3"}])
    with pytest.raises(SnakeskillsError, match="column 'question'"):
        prepare_split("b", jsonl_spec(path, {"problem": "question", "expected_answer": "answer"}), "test")


def test_prepare_split_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("", encoding="utf-8")
    with pytest.raises(SnakeskillsError, match="split 'test' of benchmark 'b' is empty"):
        prepare_split("b", jsonl_spec(path), "test")


def test_prepare_split_duplicate_ids(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(
        path,
        [
            {"id": "a", "problem": "1+1", "expected_answer": "2"},
            {"id": "b", "problem": "1+2", "expected_answer": "3"},
            {"id": "a", "problem": "1+3", "expected_answer": "4"},
        ],
    )
    with pytest.raises(SnakeskillsError, match="row 3 repeats id 'a'"):
        prepare_split("b", jsonl_spec(path), "test")


def test_prepare_split_unknown_split_and_source(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": "2"}])
    with pytest.raises(SnakeskillsError, match="no split 'train'"):
        prepare_split("b", jsonl_spec(path), "train")
    with pytest.raises(SnakeskillsError, match="unknown source 'csv'"):
        prepare_split("b", {"source": "csv"}, "test")


def test_prepare_split_synthetic_matches_generator():
    synthetic = {"operations": ["+"], "max_operand": 5, "split_sizes": {"train": 4, "test": 3}, "seed": 11}
    rows = prepare_split("arith", {"source": "synthetic", "synthetic": synthetic}, "test")
    assert (
        rows == arithmetic_splits(operations=["+"], max_operand=5, split_sizes={"train": 4, "test": 3}, seed=11)["test"]
    )
    assert [row["id"] for row in rows] == ["test-000000", "test-000001", "test-000002"]


@pytest.mark.parametrize(
    ("answer", "kind"), [(["22", "twenty-two"], "list"), ({"value": 22}, "dict"), (True, "bool")], ids=str
)
def test_prepare_split_non_scalar_expected_answer_is_refused_not_stringified(tmp_path, answer, kind):
    """A list of accepted answers used to become the string "['22', 'twenty-two']", which never matches."""
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": "2"}, {"problem": "11+11", "expected_answer": answer}])
    with pytest.raises(SnakeskillsError, match=rf"src\.jsonl.*row 2: field 'expected_answer' is a {kind} "):
        prepare_split("b", jsonl_spec(path), "test")


def test_prepare_split_numeric_expected_answer_becomes_its_string(tmp_path):
    path = tmp_path / "src.jsonl"
    write_jsonl(path, [{"problem": "1+1", "expected_answer": 2}, {"problem": "1/2", "expected_answer": 0.5}])
    assert [row["expected_answer"] for row in prepare_split("b", jsonl_spec(path), "test")] == ["2", "0.5"]
