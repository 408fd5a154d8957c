"""``iteralab threshold PROTOCOL``: the protocol's model (every kind) on its tuning split, with the protocol's metric
and subgroups, and the threshold suggested by head train's rule; on a draft whose threshold is still "CHOOSE",
touching neither the protocol, its lock nor a campaign."""

import json

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score

from campaign_factory import TEXTS, write_corpus_csv
from iteralab.cli import main
from iteralab.plan.prepare import suggest_threshold
from strata_rows import STRATA, strata_rows, write_strata_csv

CLASSES = ["plot", "fresh", "rotten"]


def _draft(folder, model: str, metric: str = "accuracy", tuning: bool = True, subgroups: str = "") -> object:
    """A protocol as a user has it before choosing: threshold and tolerance still "CHOOSE"."""
    path = folder / "protocol.toml"
    path.write_text(f"""schema_version = 1
name = "draft"
question = "CHOOSE: which configuration?"

[corpus]
path = "final.csv"
{'tuning_path = "tuning.csv"' if tuning else ''}
classes = ["plot", "fresh", "rotten"]

[model]
{model}

[metric]
name = "{metric}"
threshold = "CHOOSE"
tolerance = "CHOOSE"
reference_variant = "b4"
{subgroups}
[run]
device = "cpu"

[[variants]]
name = "b4"
batch_size = 4
""", encoding="utf-8")
    return path


def _callable_folder(tmp_path):
    """final.csv = the factory corpus; tuning.csv = other texts, disjoint by id and text."""
    write_corpus_csv(tmp_path, name="final.csv")
    rows = [(f"t{i:02d}", f"{text} again", label) for i, (text, label) in enumerate(TEXTS)]
    write_corpus_csv(tmp_path, rows, name="tuning.csv")
    return rows


def _run(capsys, *args):
    rc = main(["threshold", *map(str, args)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_a_callable_on_a_draft_json_with_subgroups_and_nothing_written(tmp_path, capsys):
    from fake_models import keyword_classifier

    rows = _callable_folder(tmp_path)
    protocol = _draft(tmp_path, 'kind = "callable"\ncallable = "fake_models:keyword_classifier"',
                      subgroups='[[subgroups]]\nname = "class"\nby = "label"\n')
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    rc, out, err = _run(capsys, protocol, "--json")
    assert rc == 0, err
    data = json.loads(out)
    labels = [r[2] for r in rows]
    predicted = [CLASSES[int(np.argmax(p))] for p in keyword_classifier([r[1] for r in rows])]
    expected = accuracy_score(labels, predicted)
    assert data["metric_name"] == "accuracy" and data["metric"] == pytest.approx(expected, abs=1e-4)
    assert data["tuning_size"] == 12 and data["settings"]["batch_size"] == 4 and data["settings"]["variant"] == "b4"
    for name in CLASSES:  # a class group's figure is that class's recall, as in a campaign's verdict
        members = [i for i, label in enumerate(labels) if label == name]
        recall = sum(predicted[i] == name for i in members) / len(members)
        assert data["subgroups"][f"class:{name}"] == pytest.approx(recall, abs=1e-4)
    assert data["suggested_threshold"] == suggest_threshold(expected, "accuracy", "tuning.csv (12 texts)")[0]
    assert data["how"] == f"accuracy {expected:.4f} on tuning.csv (12 texts) minus 0.05, rounded down"
    # the step before choosing: the draft, the folder and any lock stay as they were
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_an_hf_classifier_on_the_draft_prepare_writes_names_the_command(tmp_path, tiny_classifier_dir, capsys):
    from iteralab.models.factory import WorkloadSpec, load_workload
    from iteralab.plan.corpus import load_corpus

    source = write_strata_csv(tmp_path / "src.csv", strata_rows())
    assert main(["prepare", str(source), "--model", str(tiny_classifier_dir), "--out", str(tmp_path / "p"),
                 "--strata", STRATA, "--sample", "short=12,long=8", "--max-length", "64"]) == 0
    capsys.readouterr()
    draft = tmp_path / "p" / "protocol.toml"
    text = draft.read_text()
    assert 'threshold = "CHOOSE"   # the minimum quality, fixed from the tuning split only: iteralab threshold ' \
           'protocol.toml suggests one' in text
    rc, out, err = _run(capsys, draft)
    assert rc == 0, err
    tuning = load_corpus(tmp_path / "p" / "tuning.csv", extra_columns=["stratum"])
    classes = ["plot", "fresh", "rotten"]  # the classifier's own order, as the draft declares it
    model = load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, classes=classes, max_length=64))
    probs = np.concatenate([model.predict(list(tuning.texts)[i:i + 8]) for i in range(0, len(tuning), 8)])
    predicted = [classes[i] for i in probs.argmax(axis=1)]
    macro = f1_score(list(tuning.labels), predicted, labels=classes, average="macro", zero_division=0)
    lines = out.splitlines()
    assert lines[0] == f"macro_f1 on tuning.csv ({len(tuning)} texts): {macro:.4f}"
    assert lines[1].startswith("  length: long ") and ", short " in lines[1]
    assert lines[2].startswith("  class: plot ")
    suggested, how = suggest_threshold(macro, "macro_f1", f"tuning.csv ({len(tuning)} texts)")
    assert lines[3] == f"suggested threshold {suggested:.2f}: {how}"
    assert draft.read_text() == text and not (tmp_path / "p" / "protocol.toml.lock.json").exists()


def test_an_encoder_head_trained_on_the_split_is_said_in_sample(tmp_path, tiny_encoder_dir, tiny_head_path, capsys):
    from iteralab.models.head import load_head, save_head

    _callable_folder(tmp_path)
    head = load_head(tiny_head_path)
    save_head(tmp_path / "head.safetensors", head.weight, head.bias, head.classes, normalize=True,
              extra_metadata={"trained_on": "tuning.csv", "tuning_cv_macro_f1": "0.5000"})
    protocol = _draft(tmp_path, f'kind = "encoder_head"\npath = "{tiny_encoder_dir}"\nhead = "head.safetensors"\n'
                                "max_length = 32", metric="macro_f1")
    rc, out, err = _run(capsys, protocol, "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert 0.0 <= data["metric"] <= 1.0 and data["settings"]["device"] == "cpu"
    assert data["notes"] == ["the head was trained on tuning.csv: this score is in-sample, so optimistic; "
                             "iteralab head train's cross-validated macro-F1 was 0.5000"]


def test_refusals_are_one_line(tmp_path, capsys):
    _callable_folder(tmp_path)
    protocol = _draft(tmp_path, 'kind = "callable"\ncallable = "fake_models:keyword_classifier"', tuning=False)
    rc, _, err = _run(capsys, protocol)
    assert rc == 2 and err.splitlines() == [
        f"Error: {protocol}: corpus.tuning_path is not declared: there is no tuning split to measure the model on",
        "Hint: declare the tuning split (iteralab prepare writes tuning.csv); the threshold is never chosen on the "
        "final corpus (P4)"]
    protocol = _draft(tmp_path, 'kind = "callable"\ncallable = "no_such_module_here:predict"')
    rc, _, err = _run(capsys, protocol)
    assert rc == 2 and err.splitlines()[0] == (
        f"Error: {protocol}: model (callable, no_such_module_here:predict) not loadable: callable: cannot import "
        "module 'no_such_module_here': No module named 'no_such_module_here'")
    protocol = _draft(tmp_path, 'kind = "hf_classifier"\npath = "missing-model"')
    rc, _, err = _run(capsys, protocol)
    assert rc == 2 and err.splitlines()[0] == (
        f"Error: {protocol}: model (hf_classifier, missing-model) not loadable: path: model folder "
        f"{tmp_path / 'missing-model'} does not exist")
    protocol = _draft(tmp_path, 'kind = "callable"\ncallable = "fake_models:keyword_classifier"', metric="auc")
    rc, _, err = _run(capsys, protocol)
    assert rc == 2 and err.splitlines()[0] == (
        f"Error: {protocol}: key 'metric.name': unknown metric 'auc'; known: accuracy, macro_f1, weighted_f1, "
        "balanced_accuracy, knn_accuracy, recall_at_k, mrr, ndcg_at_k, exact_match, token_f1, rouge_l, chrf")
    protocol = _draft(tmp_path, 'kind = "callable"\ncallable = "fake_models:keyword_classifier"')
    (tmp_path / "tuning.csv").write_bytes((tmp_path / "final.csv").read_bytes())  # P4: never the final corpus
    rc, _, err = _run(capsys, protocol)
    assert rc == 2 and err.splitlines()[0].startswith(
        f"Error: tuning data ({tmp_path / 'tuning.csv'}) and final corpus ({tmp_path / 'final.csv'}) overlap")


def test_the_suggestion_rounds_down_decimal_figures_not_their_binary_remainders():
    assert suggest_threshold(0.86, "macro_f1", "tuning.csv")[0] == 0.81  # 0.86 - 0.05 is 0.80999… in binary
    assert suggest_threshold(0.8649, "macro_f1", "tuning.csv")[0] == 0.81
    assert suggest_threshold(0.04, "macro_f1", "tuning.csv")[0] == 0.0


def _embedding_draft(folder, metric: str, extra: str = 'k = 3\ntuning_queries = "tuning_queries.csv"') -> object:
    path = folder / "protocol.toml"
    path.write_text(f"""schema_version = 1
name = "draft"
question = "CHOOSE: which configuration?"

[task]
kind = "embedding"

[embedding]
min_cosine = "CHOOSE"

[corpus]
path = "final.csv"
tuning_path = "tuning.csv"
classes = []

[model]
kind = "callable"
callable = "fake_embedders:word_embedder"

[metric]
name = "{metric}"
queries = "queries.csv"
{extra}
threshold = "CHOOSE"
tolerance = "CHOOSE"
reference_variant = "b4"

[run]
device = "cpu"

[[variants]]
name = "b4"
batch_size = 4
""", encoding="utf-8")
    return path


@pytest.mark.parametrize("metric", ["recall_at_k", "ndcg_at_k", "mrr"])
def test_an_embedding_draft_is_measured_by_its_ranking_metric_on_the_tuning_queries(tmp_path, capsys, metric):
    """A ranking metric on the tuning split (documents + tuning queries), never the final corpus, and a suggested
    threshold by head train's rule; every ranking value beside it."""
    from fake_embedders import word_embedder
    from embedding_jobs import corpus_rows
    from recall_jobs import QUERIES, write_queries

    docs = [(i, t) for i, t, _ in corpus_rows()]
    write_strata_csv(tmp_path / "tuning.csv", docs, header=("id", "text"))
    write_strata_csv(tmp_path / "final.csv", [(f"f{i}", f"{t} final") for i, t in docs], header=("id", "text"))
    write_queries(tmp_path / "tuning_queries.csv")
    protocol = _embedding_draft(tmp_path, metric)
    rc, out, err = _run(capsys, protocol, "--json")
    assert rc == 0, err
    data = json.loads(out)
    # independently: cosines by a full stable sort of the word embedder's vectors
    vectors = np.asarray(word_embedder([t for _, t in docs]), dtype=np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    values = []
    for _, text, relevant in QUERIES:
        q = np.asarray(word_embedder([text]), dtype=np.float64)[0]
        top = [docs[j][0] for j in np.argsort(-(vectors @ (q / np.linalg.norm(q))), kind="stable")[:3]]
        wanted = relevant.split(";")
        hits = [r for r, d in enumerate(top) if d in wanted]
        if metric == "recall_at_k":
            values.append(len(hits) / min(3, len(wanted)))
        elif metric == "mrr":
            values.append(1 / (hits[0] + 1) if hits else 0.0)
        else:
            ideal = sum(1 / np.log2(r + 2) for r in range(min(3, len(wanted))))
            values.append(sum(1 / np.log2(r + 2) for r in hits) / ideal)
    expected = float(np.mean(values))
    assert data["metric_name"] == metric and data["metric"] == pytest.approx(expected, abs=1e-4)
    where = f"tuning.csv ({len(docs)} texts, {len(QUERIES)} queries of tuning_queries.csv)"
    assert (data["suggested_threshold"], data["how"]) == suggest_threshold(expected, metric, where)
    assert data["notes"][0].startswith(f"ranking of {len(QUERIES)} queries: recall@3 = hits / min(k, relevant) ")
    assert data["tuning_size"] == len(docs) and data["subgroups"] == {}


def test_an_embedding_draft_without_tuning_queries_is_told_what_to_declare(tmp_path, capsys):
    write_strata_csv(tmp_path / "tuning.csv", [("d1", "good fun")], header=("id", "text"))
    protocol = _embedding_draft(tmp_path, "recall_at_k", extra="k = 3")
    rc, _, err = _run(capsys, protocol)
    assert rc == 2 and err.splitlines()[0] == (
        f"Error: {protocol}: metric 'recall_at_k' on the tuning split needs metric.tuning_queries (the tuning "
        "queries)")
    assert "prepare --task embedding --queries FILE" in err


def test_threshold_prints_the_corpus_size_the_tolerance_needs_and_records_it_for_lock(tmp_path, capsys):
    from scipy.stats import norm

    from fake_models import batch_odd_classifier
    from iteralab.plan.samplesize import SizeRecord, record_path

    rows = _callable_folder(tmp_path)
    protocol = _draft(tmp_path, 'kind = "callable"\ncallable = "fake_models:batch_odd_classifier"')
    text = protocol.read_text().replace('tolerance = "CHOOSE"', "tolerance = 0.5\nconfidence = 0.9\npower = 0.75")
    protocol.write_text(text + '\n[[variants]]\nname = "b3"\nbatch_size = 3\n\n[[variants]]\nname = "b4-again"\n'
                               'batch_size = 4\n')
    rc, out, err = _run(capsys, protocol)
    assert rc == 0, err
    texts, labels = [r[1] for r in rows], np.array([CLASSES.index(r[2]) for r in rows])

    def predicted(batch):
        return np.concatenate([np.argmax(batch_odd_classifier(texts[i:i + batch]), axis=1)
                               for i in range(0, len(texts), batch)])

    ours, theirs = predicted(4), predicted(3)  # batches of 3 are odd: their first text's class moves on
    d = (theirs == labels).astype(float) - (ours == labels)
    sd = d.std(ddof=1)
    n = int(np.ceil(((norm.ppf(0.95) + norm.ppf(0.75)) * sd / (0.5 - abs(d.mean()))) ** 2))
    lines = out.splitlines()
    assert f"b3 against the reference: difference {d.mean():+.4f}, {np.mean(ours != theirs):.1%} of the labels " \
           f"differ, sd {sd:.4f} per document (standard deviation of the 12 paired per-document differences)" in lines
    assert f"final corpus the tolerance 0.5 needs at 0.9 confidence, power 0.75: {n} documents (b3 needs most)" in lines
    assert not any("b4-again" in line for line in lines)  # the reference's own settings: not measured again
    record = SizeRecord.read(record_path(protocol))
    assert record is not None and [c.variant for c in record.candidates] == ["b3"]
    assert lines[-1] == f"written: {record_path(protocol)} (the disagreement lock compares the final corpus size with)"


def test_a_ranking_metrics_disagreement_is_per_query_and_identical_outputs_bound_nothing(tmp_path, capsys):
    """The word embedder's vectors do not depend on the batch: a variant with batches of 1 agrees with the reference
    on every tuning query, and threshold says that the tuning split gives no size (not a figure of 1)."""
    from embedding_jobs import corpus_rows
    from recall_jobs import QUERIES, write_queries

    docs = [(i, t) for i, t, _ in corpus_rows()]
    write_strata_csv(tmp_path / "tuning.csv", docs, header=("id", "text"))
    write_strata_csv(tmp_path / "final.csv", [(f"f{i}", f"{t} final") for i, t in docs], header=("id", "text"))
    write_queries(tmp_path / "tuning_queries.csv")
    protocol = _embedding_draft(tmp_path, "mrr")
    protocol.write_text(protocol.read_text() + '\n[[variants]]\nname = "b1"\nbatch_size = 1\n')
    rc, out, err = _run(capsys, protocol, "--json")
    assert rc == 0, err
    sizes = json.loads(out)["sample_size"]
    [candidate] = sizes["candidates"]
    assert (candidate["variant"], candidate["unit"], candidate["units"]) == ("b1", "queries", len(QUERIES))
    assert candidate["difference"] == 0.0 and candidate["sd"] == 0.0 and candidate["discordant"] is None
    assert sizes["lines"][-1] == ("corpus size the tolerance needs: not bounded by the tuning split (no variant "
                                  f"disagrees with the reference on its {len(QUERIES)} queries)")
