"""A generation job from the corpus to a locked protocol: ``prepare --task generation`` drafts the prompt and the
length rules from the data, ``threshold`` measures the model on the tuning split, and the pages that describe
generation jobs say what the code does."""

from __future__ import annotations

import csv
import json
import re
import tomllib
from pathlib import Path

import pytest

from campaign_factory import write_tokenizer
from iteralab.cli import main
from iteralab.errors import ProtocolError
from iteralab.models.tokens import load_tokenizer, token_counter

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["good", "bad", "story", "movie", "fun", "dull", "great", "plot", "mess", "fine"]
STRATA = "short=0-39,long=40-"  # the rendered prompts have 34..46 tokens by the tiny tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer")


def write_answers(path: Path, n: int = 60, header=("id", "text", "question", "answer"), newline_answer=False) -> Path:
    """Texts of 1..12 words, a question per text, and its answer: the text's last word (two words for some)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for i in range(n):
            words = [WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 12)]
            answer = " ".join(words[-2:]) if i % 5 == 0 else words[-1]
            if newline_answer and i == 7:
                answer = "first line\nsecond line"
            w.writerow([f"doc-{i:03d}", " ".join(words) + f" {i}", "which word ends it?", answer][:len(header)])
    return path


@pytest.fixture
def answerer(tmp_path, monkeypatch) -> str:
    """A generator module of the test's own: the text's last word (right but for the two-word answers)."""
    (tmp_path / "gen_answerer.py").write_text(
        "def answer(prompts):\n    return [p.split('\\n')[0].split()[-2] for p in prompts]\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "gen_answerer:answer"


def last_word(prompts: list[str]) -> list[str]:
    return [p.split("\n")[0].split()[-2] for p in prompts]


def prepare(capsys, source, tok, out, *extra, strata=STRATA):
    rc = main(["prepare", str(source), "--model", str(tok), "--out", str(out), "--strata", strata,
               "--sample", "short=20,long=10", "--task", "generation", *extra])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_prepare_drafts_the_prompt_and_the_length_rules_from_the_corpus(tmp_path, tok, capsys, answerer):
    out = tmp_path / "prep"
    rc, stdout, err = prepare(capsys, write_answers(tmp_path / "answers.csv"), tok, out)
    assert rc == 0, err
    data = tomllib.loads((out / "protocol.toml").read_text(encoding="utf-8"))
    gen = data["generation"]
    assert data["task"]["kind"] == "generation" and gen["prompt"] == "{text}\nQuestion: {question}\nAnswer:"
    assert data["corpus"]["reference_column"] == "answer" and "classes" not in data["corpus"]
    count = token_counter(load_tokenizer(tok))
    record = json.loads((out / "prepare.json").read_text(encoding="utf-8"))
    kept = {}
    for name in ("final.csv", "tuning.csv"):
        with open(out / name, newline="", encoding="utf-8") as fh:
            kept.update({r["id"]: r for r in csv.DictReader(fh)})
    answers = [r["answer"] for r in kept.values()]
    specials = count([""])[0]
    longest = max(n - specials for n in count(answers))
    assert gen["max_new_tokens"] == longest + max(4, -(-longest // 4)) and gen["stop"] == ["\n"]
    prompts = [f"{r['text']}\nQuestion: {r['question']}\nAnswer:" for r in kept.values()]
    counts = dict(zip(kept, count(prompts)))
    assert data["model"]["max_length"] == max(counts.values())  # the longest rendered prompt
    # every row's stratum is its rendered prompt's, so that lock's check of the strata holds
    assert all((r["stratum"] == "short") == (counts[i] <= 39) for i, r in kept.items())
    assert data["model"]["kind"] == "callable" and data["model"]["callable"].startswith("CHOOSE")
    assert data["metric"]["name"] == "exact_match" and data["metric"]["threshold"] == "CHOOSE"
    assert record["task"] == "generation" and record["answers"]["max_new_tokens"] == gen["max_new_tokens"]
    assert 'prompt: "{text}\\nQuestion: {question}\\nAnswer:" (drafted from the corpus columns' in stdout
    # the choices made, the callable named: the draft locks
    from iteralab.lock.inputs import lock

    text = (out / "protocol.toml").read_text(encoding="utf-8")
    text = re.sub(r'callable = "CHOOSE[^\n]*', f'callable = "{answerer}"', text)
    text = text.replace('question = "CHOOSE: ', 'question = "').replace('threshold = "CHOOSE"', "threshold = 0.0")
    (out / "protocol.toml").write_text(text.replace('relative_tolerance = "CHOOSE"', "relative_tolerance = 0.5"),
                                       encoding="utf-8")
    lock(out / "protocol.toml")
    assert (out / "protocol.toml.lock.json").is_file()


def test_a_given_prompt_a_multiline_answer_and_a_model_folder_shape_the_draft(tmp_path, tok, capsys):
    out = tmp_path / "prep"
    source = write_answers(tmp_path / "answers.csv", newline_answer=True)
    rc, _, err = prepare(capsys, source, tok, out, "--prompt", "Answer briefly: {text}", strata="short=0-22,long=23-")
    assert rc == 0, err
    data = tomllib.loads((out / "protocol.toml").read_text(encoding="utf-8"))
    assert data["generation"]["prompt"] == "Answer briefly: {text}" and data["generation"]["stop"] == []
    with open(out / "final.csv", newline="", encoding="utf-8") as fh:
        assert "question" not in next(csv.reader(fh))  # only the columns the prompt names travel


@pytest.mark.parametrize("extra, header, message", [
    ((), ("id", "text", "question"), "no column 'answer' for the reference answers"),
    (("--prompt", "{text} {answer}"), ("id", "text", "question", "answer"),
     "--prompt names {answer}, the reference answers' column"),
    (("--prompt", "{text} {title}"), ("id", "text", "question", "answer"), "--prompt names {title}: "),
    (("--prompt", "Summarise it"), ("id", "text", "question", "answer"), "--prompt: the template never names {text}"),
])
def test_refusals_are_one_line(tmp_path, tok, capsys, extra, header, message):
    rc, out, err = prepare(capsys, write_answers(tmp_path / "a.csv", header=header), tok, tmp_path / "p", *extra)
    assert rc != 0 and message in err and "Traceback" not in err
    assert not (tmp_path / "p" / "protocol.toml").exists()


def test_generation_options_are_refused_for_another_task(tmp_path, tok, capsys):
    rc = main(["prepare", str(write_answers(tmp_path / "a.csv")), "--model", str(tok), "--out", str(tmp_path / "p"),
               "--prompt", "{text}"])
    assert rc != 0 and "--prompt is for --task generation (this is --task classification)" in capsys.readouterr().err


def test_a_draft_callable_still_marked_choose_is_refused_in_one_line():
    from iteralab.plan.protocol import parse_protocol
    from protocol_factory import protocol_toml

    with pytest.raises(ProtocolError, match=r"^p\.toml: key 'model': model\.callable is still marked CHOOSE"):
        parse_protocol(protocol_toml(model='kind = "callable"\ncallable = "CHOOSE: package.module:function"'),
                       "p.toml")


GENERATION_DRAFT = """schema_version = 1
name = "answers"
question = "CHOOSE: which configuration?"

[task]
kind = "generation"

[generation]
prompt = "{text}\\nQuestion: {question}\\nAnswer:"
max_new_tokens = 6
stop = ["\\n"]

[corpus]
path = "final.csv"
tuning_path = "tuning.csv"
classes = []
reference_column = "answer"

[model]
kind = "callable"
callable = "CALLABLE"

[metric]
name = "token_f1"
threshold = "CHOOSE"
relative_tolerance = "CHOOSE"
reference_variant = "b4"

[[subgroups]]
name = "length"
by = "stratum"

[[variants]]
name = "b4"
batch_size = 4
"""


def test_threshold_measures_a_generation_job_on_its_tuning_split(tmp_path, capsys, answerer):
    from iteralab.campaign.kinds.generation.textmetrics import corpus_score
    from iteralab.plan.prepare import suggest_threshold

    source = write_answers(tmp_path / "answers.csv", n=30)
    with open(source, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for name, part in (("final.csv", rows[:10]), ("tuning.csv", rows[10:])):
        with open(tmp_path / name, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "text", "question", "answer", "stratum"])
            w.writerows([r["id"], r["text"], r["question"], r["answer"], "short" if i % 2 else "long"]
                        for i, r in enumerate(part))
    draft = tmp_path / "protocol.toml"
    draft.write_text(GENERATION_DRAFT.replace("CALLABLE", answerer), encoding="utf-8")
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()}
    assert main(["threshold", str(draft), "--json"]) == 0, capsys.readouterr().err
    data = json.loads(capsys.readouterr().out)
    tuning = rows[10:]
    outputs = last_word([f"{r['text']}\nQuestion: {r['question']}\nAnswer:" for r in tuning])
    expected = corpus_score("token_f1", outputs, [r["answer"] for r in tuning])
    assert 0.5 < expected < 1  # right but for the two-word answers: a real score, neither 0 nor 1
    assert data["metric_name"] == "token_f1" and data["metric"] == pytest.approx(expected, abs=1e-4)
    long = [i for i in range(len(tuning)) if i % 2 == 0]
    assert data["subgroups"]["length:long"] == pytest.approx(corpus_score(
        "token_f1", [outputs[i] for i in long], [tuning[i]["answer"] for i in long]), abs=1e-4)
    assert data["tuning_size"] == 20 and data["settings"]["batch_size"] == 4
    assert data["suggested_threshold"] == suggest_threshold(expected, "token_f1", "tuning.csv (20 texts)")[0]
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()} == before  # nothing written
    # a variant with batches of 1: its answers scored per document against the reference's (the same answerer:
    # no disagreement, so the tuning split bounds no size), recorded beside the protocol for lock
    draft.write_text(draft.read_text() + '\n[[variants]]\nname = "b1"\nbatch_size = 1\n', encoding="utf-8")
    assert main(["threshold", str(draft), "--json"]) == 0, capsys.readouterr().err
    [candidate] = json.loads(capsys.readouterr().out)["sample_size"]["candidates"]
    assert (candidate["variant"], candidate["unit"], candidate["units"], candidate["sd"]) == ("b1", "documents", 20, 0)
    assert (tmp_path / "protocol.toml.samplesize.json").is_file()


# ------------------------------------------------------------------------------------------------------- pages


def test_the_protocol_reference_says_classes_belong_to_classification_jobs():
    page = (ROOT / "docs" / "reference" / "protocol.md").read_text(encoding="utf-8")
    [line] = [line for line in page.splitlines() if line.startswith("| `classes` |")]
    assert "A classification job's class names" in line and "Absent (or []) for a generation job" in line
    assert "only for an embedding job's corpus" not in line


def test_the_campaign_folder_page_lists_the_generation_files_columns():
    from iteralab.campaign.kinds.generation.output import COLUMNS

    page = (ROOT / "docs" / "campaign-folder.md").read_text(encoding="utf-8")
    [row] = [line for line in page.splitlines() if line.startswith("| `predictions/*.parquet` |")]
    assert "a generation pass: " + ", ".join(f"`{c}`" for c in COLUMNS) in row


def test_the_generation_page_says_the_threshold_needs_a_tuning_split_and_where_work_runs():
    page = (ROOT / "docs" / "generation.md").read_text(encoding="utf-8")
    assert "## The threshold comes from a tuning split" in page
    assert "corpus.tuning_path" in page and "iteralab threshold protocol.toml" in page
    assert "prepare CORPUS --task generation" in page and 'runs_on = "remote"' in page


@pytest.mark.parametrize("config, kind", [
    ({"architectures": ["GPT2LMHeadModel"]}, "hf_causal_lm"),
    ({"architectures": ["LlamaForCausalLM"]}, "hf_causal_lm"),
    ({"architectures": ["T5ForConditionalGeneration"], "is_encoder_decoder": True}, "hf_seq2seq"),
    ({"architectures": ["BertModel"]}, "callable"),  # a tokenizer folder: the generator is a callable to name
    (None, "callable"),
])
def test_the_drafted_model_kind_follows_the_folders_config(tmp_path, config, kind):
    from iteralab.models.tokens import generation_kind

    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert generation_kind(tmp_path) == kind
