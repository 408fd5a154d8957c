"""The generation job's protocol: [task] kind = "generation", [generation], [corpus] reference_column and a
relative tolerance, each mistake refused in one line naming the key."""

from __future__ import annotations

import pytest

from iteralab.campaign.kinds.generation import textmetrics
from iteralab.errors import ProtocolError
from iteralab.plan.metric import GENERATION_METRICS
from iteralab.plan.protocol import parse_protocol

GENERATION_PROTOCOL = """schema_version = 1
name = "gen"
question = "Which batch size answers the same for the least money?"

[task]
kind = "generation"

[generation]
max_new_tokens = 6

[corpus]
path = "corpus.csv"
classes = []
reference_column = "answer"

[model]
kind = "hf_causal_lm"
path = "model"
max_length = 64

[metric]
name = "token_f1"
threshold = 0.0
relative_tolerance = 0.01
reference_variant = "b1"

[[variants]]
name = "b1"
batch_size = 1

[[variants]]
name = "b4"
batch_size = 4
"""


def generation_protocol(*edits: tuple[str, str]) -> str:
    text = GENERATION_PROTOCOL
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    return text


def test_a_generation_protocol_reads_its_keys():
    p = parse_protocol(generation_protocol(
        ('max_new_tokens = 6', 'max_new_tokens = 6\nstop = ["\\n"]\nmax_length_share = 0.2\n'
                               'prompt = "Q: {text}\\nA:"')))
    assert p.task.kind == "generation"
    assert p.generation.max_new_tokens == 6 and p.generation.stop == ("\n",)
    assert p.generation.tokens_tolerance == pytest.approx(0.10) and not p.generation.allow_empty
    assert p.generation.render("why?") == "Q: why?\nA:"
    assert p.corpus.reference_column == "answer" and p.corpus.classes == ()
    assert p.metric.tolerance is None and p.metric.allowed_drop(0.8) == pytest.approx(0.008)


def test_a_prompt_may_name_other_corpus_columns():
    p = parse_protocol(generation_protocol(
        ('max_new_tokens = 6', 'max_new_tokens = 6\nprompt = "Summarise: {text}\\nTitle: {title} ({title}, {year})"')))
    assert p.generation.columns == ["title", "year"]
    assert p.generation.render("a day", title="Rain", year=None) == "Summarise: a day\nTitle: Rain (Rain, )"
    assert p.generation.render_all(["x", "y"], {"title": ["T1", "T2"], "year": ["1", ""]}) == [
        "Summarise: x\nTitle: T1 (T1, 1)", "Summarise: y\nTitle: T2 (T2, )"]
    # a header with a hyphen or a space is named as it is written
    p = parse_protocol(generation_protocol(
        ('max_new_tokens = 6', 'max_new_tokens = 6\nprompt = "{text}|{title-en}|{a b}"')))
    assert p.generation.columns == ["title-en", "a b"]
    assert p.generation.render("x", **{"title-en": "T", "a b": "B"}) == "x|T|B"


def test_data_parallel_and_ray_generation_variants_are_read():
    p = parse_protocol(generation_protocol(('batch_size = 4', 'batch_size = 4\ndata_parallel = 2\n\n'
                                            '[[variants]]\nname = "b4-ray"\nbatch_size = 4\nengine = "ray"')))
    assert [(v.name, v.data_parallel, v.engine) for v in p.variants] == [
        ("b1", 1, "local"), ("b4", 2, "local"), ("b4-ray", 1, "ray")]


def test_the_two_lists_of_generation_metrics_agree():
    assert GENERATION_METRICS == textmetrics.GENERATION_METRICS


@pytest.mark.parametrize("edit, expected", [
    (('max_new_tokens = 6', 'max_new_tokens = 6\ndecoding = "sampling"'), "decoding 'sampling' is refused"),
    (('max_new_tokens = 6', 'max_new_tokens = 6\nprompt = "{question}"'), "never names {text}"),
    (('max_new_tokens = 6', 'max_new_tokens = 6\nprompt = "{text} {0}"'), "never a position"),
    (('max_new_tokens = 6', 'max_new_tokens = 6\nprompt = "{text} {}"'), "never a position"),
    (('max_new_tokens = 6', 'max_new_tokens = 6\nprompt = "{text} {title[0]}"'), "an attribute or an index"),
    (('max_new_tokens = 6', 'max_new_tokens = 6\nprompt = "{text.upper}"'), "never a position, an attribute"),
    (('max_new_tokens = 6', 'max_new_tokens = 6\nprompt = "{text} {answer}"'), "the reference answers' column"),
    (('max_new_tokens = 6', 'max_new_tokens = 6\nprompt = "no text"'), "never names {text}"),
    (('max_new_tokens = 6', 'max_new_tokens = 0'), "generation.max_new_tokens"),
    (('max_new_tokens = 6', 'max_new_tokens = 6\nmax_length_share = 2'), "generation.max_length_share"),
    (('relative_tolerance = 0.01', 'relative_tolerance = 0.01\ntolerance = 0.02'), "exactly one of"),
    (('relative_tolerance = 0.01', ''), "exactly one of"),
    (('name = "token_f1"', 'name = "macro_f1"'), "a generation job's metric is one of"),
    (('reference_column = "answer"', ''), "declare corpus.reference_column"),
    (('classes = []', 'classes = ["a", "b"]'), "has references, not labels: remove corpus.classes"),
    (('kind = "hf_causal_lm"', 'kind = "encoder"'), "a generation job's model.kind"),
    (('[generation]\nmax_new_tokens = 6', ''), "needs a [generation] table"),
])
def test_generation_protocol_mistakes_are_one_line(edit, expected):
    with pytest.raises(ProtocolError) as info:
        parse_protocol(generation_protocol(edit), "protocol.toml")
    message = str(info.value)
    assert expected in message and "\n" not in message


def test_classes_belong_to_a_classification_job_only():
    """A generation protocol (and an embedding one) never needs corpus.classes; [] stays accepted; a
    classification protocol without it is refused in one line naming the key."""
    generation = parse_protocol(generation_protocol(('classes = []\n', '')))
    assert generation.corpus.classes == () and "classes" not in generation.corpus.model_fields_set
    assert parse_protocol(generation_protocol()).corpus.classes == ()
    from embedding_jobs import BATCH_VARIANTS, embedding_protocol

    embedding = embedding_protocol('kind = "callable"\ncallable = "fake_embedders:batch4_perturbed"',
                                   variants=BATCH_VARIANTS, reference="b2", metric='routine = "m:f"')
    assert 'classes = ["fresh", "rotten"]\n' in embedding
    assert parse_protocol(embedding.replace('classes = ["fresh", "rotten"]\n', '')).corpus.classes == ()
    classification = generation_protocol(('[task]\nkind = "generation"', ''), ('[generation]\nmax_new_tokens = 6', ''),
                                         ('classes = []\n', ''), ('relative_tolerance = 0.01', 'tolerance = 0.01'),
                                         ('name = "token_f1"', 'name = "accuracy"'),
                                         ('kind = "hf_causal_lm"', 'kind = "hf_classifier"'),
                                         ('reference_column = "answer"\n', ''))
    with pytest.raises(ProtocolError) as info:
        parse_protocol(classification, "protocol.toml")
    message = str(info.value)
    assert "corpus.classes is missing: a classification job declares its class names" in message
    assert "\n" not in message


def test_other_kinds_refuse_the_generation_keys():
    classification = generation_protocol(('[task]\nkind = "generation"', ''))
    with pytest.raises(ProtocolError, match=r"\[generation\] is for task.kind = 'generation'"):
        parse_protocol(classification)
    no_table = generation_protocol(('[task]\nkind = "generation"', ''), ('[generation]\nmax_new_tokens = 6', ''),
                                   ('classes = []', 'classes = ["a", "b"]'), ('name = "token_f1"', 'name = "accuracy"'),
                                   ('kind = "hf_causal_lm"', 'kind = "hf_classifier"'))
    with pytest.raises(ProtocolError, match="relative_tolerance is for a generation job"):
        parse_protocol(no_table)
