"""An encoder folder's own pooling and normalisation (a sentence-transformers folder's ``modules.json`` and
``1_Pooling/config.json``, as the demo's all-MiniLM-L6-v2 ships them): ``lock`` refuses an ``[embedding]`` table
that contradicts them in one line naming both, and a protocol that omits ``embedding.pooling`` takes the folder's.
The folders are written here: the JSON files alone for the reading, the tiny encoder of ``conftest`` for a run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from iteralab.campaign.kinds.embedding.sink import embedding_record
from iteralab.errors import ProtocolError, WorkloadError
from iteralab.models.stfolder import folder_pooling, pooling_problem, resolved_pooling
from iteralab.plan.protocol import parse_protocol
from embedding_jobs import corpus_rows, embedding_protocol

VARIANTS = """
[[variants]]
name = "b1"
batch_size = 1

[[variants]]
name = "b4"
batch_size = 4
"""
MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]


def st_folder(folder: Path, mode: str = "mean", normalize: bool = True) -> Path:
    """The sentence-transformers files of all-MiniLM-L6-v2's folder, with another pooling mode or no Normalize."""
    folder.mkdir(parents=True, exist_ok=True)
    modules = MODULES if normalize else MODULES[:2]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2), encoding="utf-8")
    (folder / "1_Pooling").mkdir(exist_ok=True)
    config = {"word_embedding_dimension": 32, "pooling_mode_cls_token": mode == "cls",
              "pooling_mode_mean_tokens": mode == "mean", "pooling_mode_max_tokens": mode == "max",
              "pooling_mode_mean_sqrt_len_tokens": False}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder


def spec(embedding: str = 'pooling = "mean"\nnormalize = true\n'):
    text = embedding_protocol('kind = "encoder"\npath = "model"', variants=VARIANTS, reference="b1")
    text = text.replace('pooling = "mean"\nnormalize = true\n', embedding)
    return parse_protocol(text).embedding


def test_the_folder_says_its_pooling_and_normalisation(tmp_path):
    found = folder_pooling(st_folder(tmp_path / "m"))
    assert (found.pooling, found.normalize) == ("mean", True)
    assert found.pooling_file == tmp_path / "m" / "1_Pooling" / "config.json"
    found = folder_pooling(st_folder(tmp_path / "c", "cls", normalize=False))
    assert (found.pooling, found.normalize) == ("cls", False)
    assert folder_pooling(tmp_path) is None  # a plain Hugging Face folder declares nothing
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "modules.json").write_text("[{", encoding="utf-8")
    with pytest.raises(WorkloadError, match="modules.json: not a readable JSON file"):
        folder_pooling(tmp_path / "bad")


def test_a_pooling_that_contradicts_the_folder_is_a_problem_naming_both(tmp_path):
    folder = st_folder(tmp_path / "m")
    problem = pooling_problem(spec('pooling = "cls"\nnormalize = true\n'), folder)
    assert problem == (f"embedding.pooling = 'cls' contradicts the model folder: {folder / '1_Pooling' / 'config.json'} "
                       "declares mean pooling")
    problem = pooling_problem(spec('pooling = "mean"\nnormalize = false\n'), folder)
    assert problem == (f"embedding.normalize = false contradicts the model folder: {folder / 'modules.json'} lists a "
                       "Normalize module (its vectors are L2-normalised)")
    unnormalised = st_folder(tmp_path / "u", normalize=False)
    assert "embedding.normalize = true (the default) contradicts the model folder" in \
        pooling_problem(spec('pooling = "mean"\n'), unnormalised)
    assert pooling_problem(spec(), folder) is None and pooling_problem(spec(""), folder) is None
    assert pooling_problem(spec('pooling = "cls"\n'), tmp_path) is None  # nothing declared: the protocol's stands
    assert "declares max pooling, which the encoder does not compute" in pooling_problem(
        spec(""), st_folder(tmp_path / "x", "max"))


def test_a_protocol_that_omits_pooling_takes_the_folders(tmp_path):
    cls = st_folder(tmp_path / "c", "cls")
    omitted = spec("")
    assert resolved_pooling(omitted, cls) == "cls" and resolved_pooling(omitted, tmp_path) == "mean"
    assert resolved_pooling(spec('pooling = "mean"\n'), cls) == "mean"  # written: the protocol's (lock refuses it)
    protocol = parse_protocol(embedding_protocol('kind = "encoder"\npath = "model"', variants=VARIANTS,
                                                 reference="b1").replace('pooling = "mean"\n', ""))
    assert embedding_record(protocol, cls)["embedding"]["pooling"] == "cls"


def _protocol_file(tmp_path: Path, embedding: str) -> Path:
    from embedding_jobs import write_corpus

    write_corpus(tmp_path)
    one = VARIANTS.split("\n\n[[variants]]")[0]  # one variant: the vectors, not a comparison, are under test
    text = embedding_protocol('kind = "encoder"\npath = "model"', variants=one, reference="b1",
                              min_cosine=0.999, threshold=0.0)
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(text.replace('pooling = "mean"\nnormalize = true\n', embedding), encoding="utf-8")
    return protocol


def test_lock_refuses_a_pooling_that_contradicts_the_folder_in_one_line(tmp_path, tiny_encoder_dir, capsys):
    from iteralab.cli import main

    shutil.copytree(tiny_encoder_dir, tmp_path / "model")
    st_folder(tmp_path / "model", "mean")
    protocol = _protocol_file(tmp_path, 'pooling = "cls"\n')
    assert main(["lock", str(protocol)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"Error: {protocol}: embedding.pooling = 'cls' contradicts the model folder: "
                      f"{tmp_path / 'model' / '1_Pooling' / 'config.json'} declares mean pooling")
    assert err[1].startswith("Hint: ") and len(err) == 2
    assert not (tmp_path / "protocol.toml.lock.json").exists()


def test_a_campaign_whose_protocol_omits_pooling_runs_with_the_folders(tmp_path, tiny_encoder_dir):
    """A folder that declares cls pooling, a protocol that names none: the stored vectors are the first token's."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from iteralab.campaign.folder import read_raw_rows
    from iteralab.campaign.kinds.embedding.output import read_vectors
    from iteralab.evidence.run import run_campaign
    from iteralab.lock.inputs import check_inputs, lock

    shutil.copytree(tiny_encoder_dir, tmp_path / "model")
    st_folder(tmp_path / "model", "cls")
    protocol = _protocol_file(tmp_path, "normalize = true\n")
    lock(protocol)
    out = tmp_path / "camp"
    run_campaign(protocol, out)
    record = json.loads((out / "campaign.json").read_text(encoding="utf-8"))["model"]["embedding"]
    assert record["pooling"] == "cls"
    rows = {r.variant: r for r in read_raw_rows(out / "raw_table.csv")}
    tok = AutoTokenizer.from_pretrained(str(tiny_encoder_dir))
    model = AutoModel.from_pretrained(str(tiny_encoder_dir)).eval()
    with torch.inference_mode():
        first = model(**tok([corpus_rows()[0][1]], return_tensors="pt")).last_hidden_state[0, 0]
    stored = read_vectors(out / rows["b1"].prediction_file, normalize=True)
    assert np.allclose(stored.vectors[0], (first / first.norm()).numpy(), atol=1e-5)
    # the Pooling config is a model file: carried with the evidence, and an edit after the lock is refused
    assert (out / "inputs" / "model" / "1_Pooling" / "config.json").is_file()
    st_folder(tmp_path / "model", "mean")
    with pytest.raises(ProtocolError, match=r"model files: 1_Pooling/config.json changed since the lock"):
        check_inputs(protocol)
