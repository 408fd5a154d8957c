"""Generation jobs the kinds, datasets, rerun and report tests share: a corpus of prompts, a protocol that compares
causal models on it, and a job written and run in a campaign folder."""

from __future__ import annotations

import csv
from pathlib import Path


WORDS = ("the cat sat on the mat", "what is the answer", "a good movie", "the dog and the cat",
         "one two three", "a short story of a day", "why is the sky blue", "red green blue")


def write_corpus(folder: Path, n: int = 16, long_row: int | None = None) -> Path:
    path = folder / "corpus.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "answer"])
        for i in range(n):
            text = WORDS[i % len(WORDS)]
            if i == long_row:
                text = " ".join([text] * 20)
            writer.writerow([f"d{i}", text, text.split()[-1]])
    return path


def generation_toml(model: str, *, max_new_tokens: int = 4, max_length: int = 40, metric: str = 'name = "token_f1"',
                    generation: str = "", variants: str = "", reproduction: str = "acceptable") -> str:
    variants = variants or ('[[variants]]\nname = "b1"\nbatch_size = 1\n\n'
                            '[[variants]]\nname = "b4"\nbatch_size = 4\n')
    return f"""schema_version = 1
name = "gen-test"
question = "Which batch size answers the same for the least money?"

[task]
kind = "generation"

[generation]
max_new_tokens = {max_new_tokens}
{generation}

[corpus]
path = "corpus.csv"
classes = []
reference_column = "answer"

[model]
{model}
max_length = {max_length}

[metric]
{metric}
threshold = 0.0
relative_tolerance = 0.5
reference_variant = "b1"

[reproduction]
target = "{reproduction}"

[warmup]
inputs = 2
passes = 1

[run]
passes = 2
isolation = "inprocess"
device = "cpu"

{variants}
"""


def write_job(folder: Path, model: str, **kwargs) -> Path:
    write_corpus(folder, long_row=kwargs.pop("long_row", None))
    path = folder / "protocol.toml"
    path.write_text(generation_toml(model, **kwargs), encoding="utf-8")
    return path


def causal(folder: Path) -> str:
    return f'kind = "hf_causal_lm"\npath = "{folder.as_posix()}"'


def run_job(folder: Path, model: str, **kwargs) -> Path:
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import lock

    protocol = write_job(folder, model, **kwargs)
    lock(protocol)
    out = folder / "camp"
    run_campaign(protocol, out)
    return out


def rows_of(out: Path) -> dict[str, object]:
    from iteralab.campaign.folder import read_raw_rows

    return {r.pass_id: r for r in read_raw_rows(out / "raw_table.csv")}
