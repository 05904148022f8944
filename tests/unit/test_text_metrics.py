"""stages.text_metrics against the libraries it wraps: BLEU and chrF equal sacreBLEU's own
command line on the files we write, ROUGE equals rouge-score's scorer on them, intervals
are seeded and resample whole corpora, and the baselines are what they say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nltk.tokenize.punkt import PunktSentenceTokenizer
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU

from stages.finetune import intervals
from stages.text_metrics import (Baseline, TextFileError, copy_source, first_turn, lead_sentences, read_references,
                                 score_texts, write_texts)
from stages.text_metrics.resampling import bootstrap_ci95, corpus_score_of, mean_of

SACREBLEU = Path(sys.executable).parent / "sacrebleu"

SOURCES = ["A man in an orange hat starring at something.", "A Boston Terrier is running on lush green grass.",
           "A girl in karate uniform breaking a stick with a front kick.", "Five people wearing winter jackets.",
           "People are fixing the roof of a house.", "A man in light colored clothing photographs a group.",
           "A group of people standing in front of an igloo.", "A boy in a red uniform is attempting to avoid."]
REFERENCES = ["Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
              "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun.",
              "Ein Mädchen in einem Karateanzug bricht einen Stock mit einem Tritt.",
              "Fünf Leute in Winterjacken und mit Helmen stehen im Schnee.",
              "Leute Reparieren das Dach eines Hauses.",
              "Ein hell gekleideter Mann fotografiert eine Gruppe von Männern.",
              "Eine Gruppe von Menschen steht vor einem Iglu.",
              "Ein Junge in einem roten Trikot versucht, die Home Base zu erreichen."]
# Outputs of a middling system, one with a newline (made one line before scoring and writing).
HYPOTHESES = ["Ein Mann mit einem orangen Hut starrt etwas an.", "Ein Boston Terrier rennt auf grünem Gras.",
              "Ein Mädchen im Karateanzug bricht\neinen Stock.", "Fünf Leute in Winterjacken.",
              "Leute reparieren ein Dach.", "Ein Mann fotografiert eine Gruppe.",
              "Eine Gruppe steht vor einem Iglu.", "Ein Junge in Rot versucht auszuweichen."]
SECOND_REFERENCES = ["Ein Mann mit orangem Hut schaut etwas an.", "Ein Terrier rennt über grünes Gras.",
                     "Ein Mädchen tritt einen Stock entzwei.", "Fünf Menschen in Winterjacken.",
                     "Menschen reparieren ein Hausdach.", "Ein Mann macht ein Foto von einer Gruppe.",
                     "Menschen stehen vor einem Iglu.", "Ein Junge in einem roten Trikot weicht aus."]


def cli_scores(directory: Path, ref_names: list[str]) -> dict[str, float]:
    """sacreBLEU's command line on the written files, as JSON with 6 decimals."""
    out = subprocess.run([str(SACREBLEU), *[str(directory / n) for n in ref_names], "-i", str(directory / "hyp.txt"),
                          "-m", "bleu", "chrf", "-w", "6", "-f", "json"],
                         check=True, capture_output=True, text=True).stdout
    return {r["name"].lower().rstrip("2"): (r["score"], r["signature"]) for r in json.loads(out)}


@pytest.mark.parametrize("num_refs", [1, 2])
def test_bleu_and_chrf_equal_sacrebleu_command_line_on_written_files(tmp_path, num_refs):
    references = [[a, b][:num_refs] for a, b in zip(REFERENCES, SECOND_REFERENCES)]
    scores = score_texts(["bleu", "chrf"], HYPOTHESES, references, seed=0)
    written = write_texts(tmp_path, HYPOTHESES, references, sources=SOURCES)
    ref_names = ["ref.txt"] if num_refs == 1 else ["ref0.txt", "ref1.txt"]
    assert set(written) == {"hyp.txt", "src.txt", *ref_names}
    assert len((tmp_path / "hyp.txt").read_text(encoding="utf-8").splitlines()) == len(HYPOTHESES)
    cli = cli_scores(tmp_path, ref_names)
    for name in ("bleu", "chrf"):
        assert round(scores[name].value, 6) == pytest.approx(cli[name][0], abs=1e-9)
        assert scores[name].signature == cli[name][1]
    assert scores["bleu"].signature.startswith(f"nrefs:{num_refs}|")
    assert 0 < scores["bleu"].value < 100


def test_rouge_equals_rouge_score_scorer_on_written_files(tmp_path):
    references = [[a, b] for a, b in zip(REFERENCES, SECOND_REFERENCES)]
    hyps = ["The man asks Ms. Dawson to write a memo. She agrees and types it.", "Two friends talk about a trip.",
            "#Person1# buys a ticket.\nThe train leaves at 5."] * 2
    refs = [["Mr. Smith asks Ms. Dawson to take a memo. It bans messaging.", "A memo is dictated."],
            ["The friends plan a trip to Paris.", "They talk about travelling."],
            ["#Person1# buys a train ticket to Leeds. It leaves at 5 pm.", "A ticket is bought."]] * 2
    scores = score_texts(["rouge"], hyps, refs, seed=0)
    write_texts(tmp_path, hyps, refs)
    hyp_lines = (tmp_path / "hyp.txt").read_text(encoding="utf-8").splitlines()
    ref_lines = [(tmp_path / f"ref{k}.txt").read_text(encoding="utf-8").splitlines() for k in range(2)]
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    # The documented convention: sentences on their own lines (NLTK's untrained Punkt) for
    # Lsum, each reference scored separately, the example's score the mean over them.
    def lines(text):
        return "\n".join(PunktSentenceTokenizer().tokenize(text))

    expected = {name: [] for name in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
    for i, hyp in enumerate(hyp_lines):
        prediction, targets = lines(hyp), [lines(refs_k[i]) for refs_k in ref_lines]
        per_ref = [scorer.score(t, prediction) for t in targets]
        for name in expected:
            expected[name].append(np.mean([s[name].fmeasure for s in per_ref]))
    for name, values in expected.items():
        assert scores[name].value == pytest.approx(np.mean(values), abs=1e-12), name
    # Lsum differs from L only because of the sentence split: the split really happened.
    assert scores["rougeLsum"].value != pytest.approx(scores["rougeL"].value)
    maxed = score_texts(["rouge"], hyps, refs, seed=0, multi_reference="max")
    assert maxed["rouge1"].value > scores["rouge1"].value


def test_intervals_are_seeded_and_match_the_projects_bootstrap():
    values = np.random.default_rng(3).random(40)
    ours = bootstrap_ci95(mean_of(values), len(values), seed=7)
    assert ours == bootstrap_ci95(mean_of(values), len(values), seed=7)
    assert ours != bootstrap_ci95(mean_of(values), len(values), seed=8)
    assert ours == pytest.approx(intervals.bootstrap_ci95(intervals.mean, values, seed=7), abs=1e-12)
    references = [[r] for r in REFERENCES]
    first = score_texts(["bleu", "chrf", "rouge"], HYPOTHESES, references, seed=1)
    again = score_texts(["bleu", "chrf", "rouge"], HYPOTHESES, references, seed=1)
    assert {k: s.ci95 for k, s in first.items()} == {k: s.ci95 for k, s in again.items()}
    for score in first.values():
        low, high = score.ci95
        assert low <= score.value <= high and low < high


def test_a_bleu_resample_is_the_corpus_bleu_of_the_resampled_sentences():
    bleu = BLEU()
    hyps = [h.replace("\n", " ") for h in HYPOTHESES]
    stats = bleu._extract_corpus_statistics(hyps, [REFERENCES])
    statistic = corpus_score_of(stats, lambda totals: bleu._compute_score_from_stats(totals).score)
    draws = np.array([[0, 0, 1, 5, 5, 5, 7, 2], [3, 4, 4, 6, 1, 1, 0, 2]])
    got = statistic(draws, axis=-1)
    for row, value in zip(draws, got):
        expected = BLEU().corpus_score([hyps[i] for i in row], [[REFERENCES[i] for i in row]]).score
        assert value == pytest.approx(expected, abs=1e-9)
    assert statistic(np.arange(len(hyps))) == pytest.approx(BLEU().corpus_score(hyps, [REFERENCES]).score)


def test_baselines_copy_the_source_and_take_the_first_turn():
    scores = score_texts(["bleu"], HYPOTHESES, [[r] for r in REFERENCES], seed=0,
                         baseline=Baseline(copy_source(SOURCES), "copy the source"))
    assert scores["bleu"].baseline == pytest.approx(BLEU().corpus_score(SOURCES, [REFERENCES]).score)
    assert scores["bleu"].baseline_kind == "copy the source"
    assert scores["bleu"].value > scores["bleu"].baseline
    dialogue = "\n#Person1#: Hello, how are you doing today?\n#Person2#: I've been having trouble breathing."
    assert first_turn(dialogue) == "#Person1#: Hello, how are you doing today?"
    assert lead_sentences("One is here. Two is there. Three. Four.", 3) == "One is here. Two is there. Three."
    turn = score_texts(["rouge"], ["Person2 has trouble breathing."], [["#Person2# has trouble breathing."]], seed=0,
                       baseline=Baseline([first_turn(dialogue)], "first turn"))
    assert turn["rouge1"].ci95 is None        # one example: nothing to resample
    assert turn["rouge1"].baseline == pytest.approx(
        rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True).score(
            "#Person2# has trouble breathing.", first_turn(dialogue))["rouge1"].fmeasure)


def test_reference_files_missing_or_short_are_named(tmp_path):
    (tmp_path / "ref0.txt").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(TextFileError, match=r"reference file .*ref1\.txt does not exist"):
        read_references([tmp_path / "ref0.txt", tmp_path / "ref1.txt"])
    (tmp_path / "ref1.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(TextFileError, match=r"ref1\.txt has 1 lines, expected 2"):
        read_references([tmp_path / "ref0.txt", tmp_path / "ref1.txt"])
    assert read_references([tmp_path / "ref0.txt"]) == [["a"], ["b"]]
    with pytest.raises(ValueError, match="same number"):
        score_texts(["bleu"], ["x", "y"], [["a", "b"], ["c"]], seed=0)
    with pytest.raises(ValueError, match="unknown text metric"):
        score_texts(["bleu4"], ["x"], [["a"]], seed=0)
