"""The kind of job a protocol judges (``[task]``), its metric (``[metric]``) and an embedding job's own rules
(``[embedding]``), validated when the protocol is read.

``[task] kind`` is ``"classification"`` (the default: a protocol without ``[task]`` reads as before),
``"embedding"`` or ``"generation"``; a later kind adds its name to :data:`TASK_KINDS`, its row to
:data:`KIND_RULES`, its metrics and its table here.

An embedding job (a corpus turned into one vector per document) is judged by:

- the **tolerance** against the reference variant, per document: the cosine of the document's vector with the
  reference pass's vector must be at least ``embedding.min_cosine`` for every document, overall and inside each
  gating subgroup; optionally the ``cosine_quantile`` lower quantile of those cosines must be at least
  ``min_cosine_at_quantile``;
- the **threshold**, the job's own metric: ``knn_accuracy`` (leave-one-out label accuracy of the ``metric.k``
  nearest documents by cosine; needs the corpus's labels), ``recall_at_k``, ``mrr`` or ``ndcg_at_k`` (over
  ``metric.queries``, a file of query id, query text and relevant document ids, which each pass embeds with its own
  variant: ``campaign.kinds.ranking``) or the user's ``metric.routine`` (called on the pass's vectors, and on the
  queries' with ``metric.queries``: ``campaign.kinds.embedding.verdict``); ``metric.tolerance`` bounds how far that metric may move the wrong way from
  the reference pass's, as for a classifier.

``corpus.classes`` belongs to a classification job (at least two); an embedding job's corpus may declare its labels
too, or none (``classes`` absent or ``[]``: the label column is optional, and empty where the file has one). Then neither ``knn_accuracy`` nor a subgroup by label can be computed, and a routine is
handed ``references = None``.

A generation job (a prompt per document in, a generated text out) declares ``[generation]``
(:class:`GenerationSpec`): the prompt template, ``max_new_tokens``, greedy decoding only (sampling is refused: an
offline comparison of configurations needs one output per prompt), optional stop strings, and the bounds on the
outputs (empty texts, the share ended on ``length``, the mean generated tokens against the reference variant's).
Its corpus has references, not labels (no ``corpus.classes``, or ``[]``; ``corpus.reference_column``); its metric is one of
:data:`~iteralab.plan.metric.GENERATION_METRICS` or a routine, with exactly one of ``metric.tolerance`` (absolute)
and ``metric.relative_tolerance`` (a share of the reference variant's score, as MLPerf states it).

An embedding job's model is an ``encoder`` folder (Hugging Face ``AutoModel`` + tokenizer, pooled by
``embedding.pooling``, L2-normalised when ``embedding.normalize``, cut at ``model.max_length``) or a ``callable``
returning ``[n, d]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from iteralab.errors import CorpusError, ProtocolError
from iteralab.plan.metric import EMBEDDING_METRICS, GENERATION_METRICS, QUERY_METRICS
from iteralab.plan.prompting import TEXT_FIELD, render_prompts, template_fields
from iteralab.plan.values import Flag, Number, Strict, Text, Whole

#: Job kinds (the names of :data:`KIND_RULES`, in its order).
TASK_KINDS = ("classification", "embedding", "generation", "scoring")
#: The model kinds an embedding job accepts: an encoder folder, or a callable returning vectors.
EMBEDDING_MODELS = ("encoder", "callable")
#: The model kinds a generation job accepts: a causal LM or encoder-decoder folder, or a callable generator.
GENERATION_MODELS = ("hf_causal_lm", "hf_seq2seq", "callable")
#: The model kinds a scoring job accepts: a sequence-classification folder read as a cross-encoder, or a callable
#: returning one float per pair.
SCORING_MODELS = ("hf_cross_encoder", "callable")
#: A scoring job's built-in metrics: each group's pairs ranked by their scores against the relevance column
#: (``campaign.kinds.ranking``'s definitions, the embedding job's).
SCORING_METRICS = ("mrr", "ndcg_at_k")


class TaskSpec(Strict):
    kind: Literal["classification", "embedding", "generation", "scoring"] = Field(
        default="classification", description=(
            "classification (one label per document), embedding (one vector per document), generation (one text "
            "per document) or scoring (one float per pair of texts)."))


class GenerationSpec(Strict):
    """How every prompt is built and decoded, and the bounds on what comes out; fixed before any timing."""

    prompt: Text = Field(default="{text}", description=(
        "The prompt template: {text} is the document's text, {name} the cell of the corpus column 'name' (write "
        "{{ and }} for literal braces)."))
    max_new_tokens: Whole = Field(ge=1, description="The most tokens generated per document.")
    decoding: Text = Field(default="greedy", description=(
        "greedy only: sampling is refused (an offline comparison needs one output per prompt)."))
    stop: tuple[Text, ...] = Field(default=(), description=(
        "Stop strings: a text ends before the first of them (its finish reason is 'stop')."))
    allow_truncation: Flag = Field(default=False, description=(
        "Let a prompt longer than model.max_length be cut (refused by default: a truncated prompt is another job)."))
    allow_empty: Flag = Field(default=False, description="Accept an empty generated text.")
    max_length_share: Number | None = Field(default=None, ge=0, le=1, description=(
        "Optional bound on the share of outputs that ended on 'length' (max_new_tokens reached)."))
    tokens_tolerance: Number = Field(default=0.10, ge=0, lt=1, description=(
        "How far the mean generated tokens per document may move from the reference variant's, relatively."))
    chat_template: Flag = Field(default=False, description="Render each prompt with the tokenizer's chat template.")

    @field_validator("decoding")
    @classmethod
    def _greedy(cls, value: str) -> str:
        if value != "greedy":
            raise ValueError(f"decoding {value!r} is refused: an offline comparison of configurations needs one "
                             "output per prompt; declare decoding = 'greedy'")
        return value

    @field_validator("prompt")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            names = template_fields(value)
        except ValueError as exc:
            raise ValueError(f"not a prompt template ({exc}); write {{{{ and }}}} for literal braces") from None
        odd = [n for n in names if not n.strip() or n.isdigit() or "." in n or "[" in n]
        if odd:
            raise ValueError(f"the prompt names {{{odd[0]}}}: a field names a corpus column ({{text}}, {{title}}), "
                             "never a position, an attribute or an index")
        if TEXT_FIELD not in names:
            raise ValueError("the prompt never names {text}: every document's text must enter its prompt")
        return value

    @property
    def columns(self) -> list[str]:
        """The corpus columns the prompt names besides the text, in order of first appearance."""
        return [name for name in template_fields(self.prompt) if name != TEXT_FIELD]

    def render(self, text: str, **cells: str | None) -> str:
        """One document's prompt: its text and its cells of :attr:`columns` (an absent cell renders empty)."""
        return render_prompts(self.prompt, [text], {name: [value] for name, value in cells.items()})[0]

    def render_all(self, texts: Sequence[str], columns: Mapping[str, Sequence[str | None]] | None = None) -> list[str]:
        """The prompts of a batch of documents (:func:`render_prompts`)."""
        return render_prompts(self.prompt, texts, columns)


class EmbeddingSpec(Strict):
    """How an encoder's vectors are made, and how far a variant's vectors may move from the reference's."""

    pooling: Literal["mean", "cls"] = Field(default="mean", description=(
        "mean over real tokens, or the cls token: an encoder folder's pooling. Absent: the folder's own (a "
        "sentence-transformers folder's 1_Pooling/config.json), else mean; lock refuses one that contradicts the "
        "folder's."))
    normalize: Flag = Field(default=True, description=(
        "L2-normalised vectors (every file checked: unit norm within 1e-3); lock refuses a value that contradicts a "
        "sentence-transformers folder's modules.json (a Normalize module listed or not)."))
    dim: Whole | None = Field(default=None, ge=1, description=(
        "The size of each vector, when declared (checked in every prediction file); absent: the first file's."))
    min_cosine: Number = Field(ge=-1, le=1, description=(
        "Every document's cosine with the reference pass's vector must be at least this."))
    cosine_quantile: Number | None = Field(default=None, gt=0, lt=1, description=(
        "Optional lower quantile of the cosines bounded by min_cosine_at_quantile."))
    min_cosine_at_quantile: Number | None = Field(default=None, ge=-1, le=1, description=(
        "The bound on that quantile of the cosines."))

    @model_validator(mode="after")
    def _quantile(self) -> EmbeddingSpec:
        if (self.cosine_quantile is None) != (self.min_cosine_at_quantile is None):
            raise ValueError("embedding.cosine_quantile and embedding.min_cosine_at_quantile go together: give both "
                             "(e.g. 0.01 and 0.995) or neither")
        return self


class ScoringSpec(Strict):
    """A scoring job's pairs (the corpus columns beside the text), how a cross-encoder's logits become a score, and
    how far a variant's scores and orderings may move from the reference pass's."""

    pair_column: Text = Field(default="text_pair", description=(
        "The corpus column holding each pair's second text (the first is corpus.text_column)."))
    group_column: Text = Field(default="group", description=(
        "The corpus column grouping the pairs ranked together (a query id): rankings are judged within a group."))
    relevance_column: Text | None = Field(default=None, description=(
        "Optional corpus column of graded relevance (a number; empty or 0: not relevant), read by mrr and "
        "ndcg_at_k."))
    activation: Literal["sigmoid", "softmax", "none"] | None = Field(default=None, description=(
        "How an hf_cross_encoder's logits become a score: sigmoid of the one logit, softmax probability of the "
        "positive class, or none (the raw logit). Absent: the folder's declared one (sentence-transformers' "
        "activation_fn in config.json), else none for one logit and softmax for several."))
    positive_class: Text | None = Field(default=None, description=(
        "An hf_cross_encoder with several outputs: the label (config.json id2label) whose logit or probability "
        "is the score."))
    min_kendall_tau: Number = Field(ge=-1, le=1, description=(
        "Within every group, Kendall's tau between the pass's scores and the reference pass's must be at least "
        "this (overall and in each gating subgroup)."))
    min_median_kendall_tau: Number | None = Field(default=None, ge=-1, le=1, description=(
        "Optional bound on the median over groups of Kendall's tau."))
    max_abs_diff: Number | None = Field(default=None, ge=0, description=(
        "Optional bound on the largest absolute difference of a pair's score from the reference pass's."))
    diff_quantile: Number = Field(default=0.99, gt=0, lt=1, description=(
        "The high quantile of the absolute score differences reported (and bounded by max_diff_at_quantile)."))
    max_diff_at_quantile: Number | None = Field(default=None, ge=0, description=(
        "Optional bound on that quantile of the absolute score differences."))

    @property
    def columns(self) -> list[str]:
        """The corpus columns a scoring job reads beside the text, in order: pair, group, relevance."""
        return [self.pair_column, self.group_column, *([self.relevance_column] if self.relevance_column else [])]


def prompt_columns(protocol: Any) -> list[str]:
    """The corpus columns a job's model input or verdict reads besides the text and label (a generation job: those
    its prompt template names; a scoring job: the pair's second text, its group and relevance), copied into the
    campaign's corpus copy as ``prompt.<name>``; none for another job."""
    return rules_of(protocol).columns(protocol)


def prompt_column_error(protocol: Any, exc: CorpusError) -> CorpusError:
    """The reader's refusal of a file without a column the prompt template names, said as the prompt's (any
    other refusal unchanged)."""
    for name in (prompt_spec(protocol).columns if prompt_spec(protocol) is not None else []):
        marker = f": no column {name!r} ("
        if marker in exc.message:
            at, rest = exc.message.split(marker, 1)
            return CorpusError(f"{at}: no column {name!r}, which generation.prompt names as {{{name}}} ({rest}",
                               hint=f"add the column {name!r} to the corpus file, or take {{{name}}} out of "
                                    "generation.prompt (and raise the protocol's version)")
    return exc


def task_problem(protocol: Any) -> str | None:
    """What makes the protocol's task, model, metric and ``[embedding]`` table disagree; None when they agree."""
    rules = rules_of(protocol)
    if getattr(protocol, "scoring", None) is not None and not rules.pairs:
        return f"[scoring] is for task.kind = 'scoring'; this protocol's task is {protocol.task.kind}"
    return rules.problem(protocol)


def _unprompted_problem(protocol: Any) -> str | None:
    """What a job without prompts refuses: a ``[generation]`` table, a tolerance that is not absolute."""
    kind, metric = protocol.task.kind, protocol.metric
    if protocol.generation is not None:
        return f"[generation] is for task.kind = 'generation'; this protocol's task is {kind}"
    if metric.tolerance is None or metric.relative_tolerance is not None:
        return ("metric.tolerance is required (an absolute tolerance); metric.relative_tolerance is for a "
                "generation job")
    return None


def classification_problem(protocol: Any) -> str | None:
    """What makes a classification protocol's tables disagree; None when they agree."""
    metric, model = protocol.metric, protocol.model
    if problem := _unprompted_problem(protocol):
        return problem
    if protocol.embedding is not None:
        return "[embedding] is for task.kind = 'embedding'; this protocol's task is classification"
    if not protocol.corpus.classes:
        return ("corpus.classes is missing: a classification job declares its class names (at least two), in the "
                "order of the model's outputs")
    if len(protocol.corpus.classes) < 2:
        return "corpus.classes: a classification job needs at least two classes"
    if metric.name in EMBEDDING_METRICS:
        return f"metric {metric.name!r} is an embedding metric; declare [task] kind = 'embedding'"
    if model.kind == "encoder":
        return "model.kind 'encoder' gives vectors: declare [task] kind = 'embedding'"
    if metric.k is not None or metric.queries is not None:
        return "metric.k and metric.queries belong to an embedding job's metric"
    return None


def embedding_problem(protocol: Any) -> str | None:
    """What makes an embedding protocol's tables disagree; None when they agree."""
    metric, model = protocol.metric, protocol.model
    if problem := _unprompted_problem(protocol):
        return problem
    if protocol.embedding is None:
        return "task.kind = 'embedding' needs an [embedding] table (at least min_cosine)"
    if metric.routine is None and metric.name not in EMBEDDING_METRICS:
        return (f"an embedding job's metric is one of {', '.join(EMBEDDING_METRICS)} or a metric.routine, not "
                f"{metric.name!r}")
    if model.kind not in EMBEDDING_MODELS:
        return f"an embedding job's model.kind is 'encoder' (a model folder) or 'callable', not {model.kind!r}"
    return _embedding_metric_problem(protocol) or _engine_problem(protocol)


def generation_problem(protocol: Any) -> str | None:
    """What makes a generation protocol's tables disagree; None when they agree."""
    metric, model = protocol.metric, protocol.model
    if protocol.generation is None:
        return "task.kind = 'generation' needs a [generation] table (at least max_new_tokens)"
    if protocol.embedding is not None:
        return "[embedding] is for task.kind = 'embedding'; this protocol's task is generation"
    if model.kind not in GENERATION_MODELS:
        return (f"a generation job's model.kind is 'hf_causal_lm', 'hf_seq2seq' (a model folder) or 'callable', "
                f"not {model.kind!r}")
    if metric.routine is None and metric.name not in GENERATION_METRICS:
        return (f"a generation job's metric is one of {', '.join(GENERATION_METRICS)} or a metric.routine, not "
                f"{metric.name!r}")
    if (metric.tolerance is None) == (metric.relative_tolerance is None):
        return ("a generation job gives exactly one of metric.tolerance (absolute) and metric.relative_tolerance "
                "(0.01: at least 99 % of the reference's score)")
    if protocol.corpus.classes:
        return ("corpus.classes: a generation job's corpus has references, not labels: remove corpus.classes (an "
                "empty list is accepted too)")
    if metric.name is not None and not protocol.corpus.reference_column:
        return f"metric {metric.name!r} compares each output with a reference answer: declare corpus.reference_column"
    by_label = [sg.name for sg in protocol.subgroups if sg.by == "label"]
    if by_label:
        return f"subgroup(s) {', '.join(by_label)} by label: a generation job has no labels (use by = 'stratum')"
    if metric.k is not None or metric.queries is not None:
        return "metric.k and metric.queries belong to an embedding job's metric"
    reference = protocol.corpus.reference_column
    if reference and reference in protocol.generation.columns:
        return (f"generation.prompt names {{{reference}}}, the reference answers' column (corpus.reference_column): "
                "a prompt holding its answer measures nothing; name another column")
    return None


def scoring_problem(protocol: Any) -> str | None:
    """What makes a scoring protocol's tables disagree; None when they agree."""
    metric, model, spec = protocol.metric, protocol.model, protocol.scoring
    if problem := _unprompted_problem(protocol):
        return problem
    if spec is None:
        return "task.kind = 'scoring' needs a [scoring] table (at least min_kendall_tau)"
    if protocol.embedding is not None:
        return "[embedding] is for task.kind = 'embedding'; this protocol's task is scoring"
    if model.kind not in SCORING_MODELS:
        return f"a scoring job's model.kind is 'hf_cross_encoder' (a model folder) or 'callable', not {model.kind!r}"
    if metric.routine is None and metric.name not in SCORING_METRICS:
        return (f"a scoring job's metric is one of {', '.join(SCORING_METRICS)} or a metric.routine, not "
                f"{metric.name!r}")
    if metric.name is not None and metric.k is None:
        return f"metric {metric.name!r} needs metric.k (the cut-off of each group's ranking)"
    if metric.name is not None and not spec.relevance_column:
        return f"metric {metric.name!r} ranks each group against its relevance: declare scoring.relevance_column"
    if metric.queries is not None or metric.tuning_queries is not None:
        return "metric.queries belongs to an embedding job: a scoring job's groups are its queries"
    if protocol.corpus.classes:
        return ("corpus.classes: a scoring job's corpus has pairs, not labels: remove corpus.classes (an empty list "
                "is accepted too)")
    by_label = [sg.name for sg in protocol.subgroups if sg.by == "label"]
    if by_label:
        return f"subgroup(s) {', '.join(by_label)} by label: a scoring job has no labels (use by = 'stratum')"
    named = [protocol.corpus.text_column, *spec.columns]
    if len(set(named)) < len(named):
        return (f"corpus.text_column and scoring's pair, group and relevance columns name {', '.join(named)}: each "
                "is its own column")
    if model.kind != "hf_cross_encoder" and (spec.activation is not None or spec.positive_class is not None):
        return "scoring.activation and scoring.positive_class are an hf_cross_encoder's: a callable returns its scores"
    return None


def _embedding_metric_problem(protocol: Any) -> str | None:
    metric, labelled = protocol.metric, bool(protocol.corpus.classes)
    by_label = [sg.name for sg in protocol.subgroups if sg.by == "label"]
    if by_label and not labelled:
        return (f"subgroup(s) {', '.join(by_label)} by label need the corpus's labels: declare corpus.classes "
                "(corpus.classes = [] declares a corpus without labels)")
    if metric.name is not None and metric.k is None:
        return (f"metric {metric.name!r} needs metric.k (neighbours for knn_accuracy, the cut-off for recall_at_k, mrr "
                "and ndcg_at_k)")
    if metric.name == "knn_accuracy" and not labelled:
        return ("metric 'knn_accuracy' needs the corpus's labels: declare corpus.classes, or judge a corpus without "
                "labels by recall_at_k, mrr, ndcg_at_k or a metric.routine")
    if metric.routine is not None and metric.k is None and any(sg.gating for sg in protocol.subgroups
                                                                if sg.by == "label"):
        return ("a gating subgroup by label of an embedding job is judged by its class's kNN recall: declare "
                "metric.k (the neighbours) beside metric.routine")
    if metric.name in QUERY_METRICS and not metric.queries:
        return f"metric {metric.name!r} needs metric.queries (a file: query_id, text, relevant_ids)"
    if metric.queries and protocol.datasets:
        return "metric.queries names relevant ids of one corpus: declare [corpus] path, not [[datasets]]"
    if metric.tuning_queries and not metric.queries:
        return "metric.tuning_queries goes with metric.queries (the final queries)"
    if metric.name == "knn_accuracy" and metric.queries:
        return "metric.queries is read by recall_at_k, mrr, ndcg_at_k and a metric.routine, not by knn_accuracy"
    return None


def _engine_problem(protocol: Any) -> str | None:
    if not protocol.metric.queries:
        return None
    unsupported = [v.name for v in protocol.variants if v.engine != "local" or v.data_parallel > 1]
    if unsupported:
        return (f"variant(s) {', '.join(unsupported)}: metric.queries are embedded after a local single-worker "
                "pass in this version; run these variants with knn_accuracy or a routine without queries, or on the "
                "local engine with data_parallel = 1")
    return None


@dataclass(frozen=True)
class KindRules:
    """What the plan stage knows of one kind of job, declared once (:data:`KIND_RULES`): the stages below the kinds'
    folder (``plan``, ``models``, ``lock``, the campaign folder layer) look a protocol's kind up here and ask these
    fields, never compare ``task.kind`` with a name."""

    name: str
    #: What makes a protocol of this kind disagree with itself (None when it agrees).
    problem: Callable[[Any], str | None]
    #: Its documents are rendered into prompts by ``[generation]`` and answered against the corpus's references.
    prompts: bool = False
    #: It turns each document into a vector, as ``[embedding]`` declares.
    vectors: bool = False
    #: The corpus columns it reads beside the text and label (:func:`prompt_columns`).
    columns: Callable[[Any], list[str]] = lambda protocol: []
    #: Its documents are pairs of texts, as ``[scoring]`` declares (counted as the model reads both).
    pairs: bool = False


def _columns_of(table: Any) -> list[str]:
    """The corpus columns a kind's own table (``[generation]``, ``[scoring]``) reads beside the text; none absent."""
    return list(table.columns) if table else []


#: Every kind of job the plan reads, by its ``[task] kind`` name; a new kind is a new row.
KIND_RULES: dict[str, KindRules] = {rules.name: rules for rules in (
    KindRules("classification", classification_problem),
    KindRules("embedding", embedding_problem, vectors=True),
    KindRules("generation", generation_problem, prompts=True, columns=lambda p: _columns_of(p.generation)),
    KindRules("scoring", scoring_problem, pairs=True, columns=lambda p: _columns_of(p.scoring)),
)}


def rules_named(name: str) -> KindRules:
    """The rules of the kind named ``name`` (a ``--task``, a recorded ``task``)."""
    try:
        return KIND_RULES[name]
    except KeyError:
        raise ProtocolError(f"unknown job kind {name!r}; hint: one of {', '.join(KIND_RULES)}") from None


def rules_of(protocol: Any) -> KindRules:
    """The rules of a protocol's ``[task] kind``."""
    return rules_named(protocol.task.kind)


def prompt_spec(protocol: Any) -> Any:
    """The protocol's ``[generation]`` table when its job renders prompts; None for another job."""
    return protocol.generation if rules_of(protocol).prompts else None


def scoring_spec(protocol: Any) -> Any:
    """The protocol's ``[scoring]`` table when its job scores pairs; None for another job."""
    return protocol.scoring if rules_of(protocol).pairs else None


def embedding_spec(protocol: Any) -> Any:
    """The protocol's ``[embedding]`` table when its job makes vectors; None for another job."""
    return protocol.embedding if rules_of(protocol).vectors else None


def reference_column(protocol: Any) -> str | None:
    """The corpus column of the reference answers that a job with prompts reads (None for another job, or when
    the protocol names none)."""
    return protocol.corpus.reference_column or None if rules_of(protocol).prompts else None
