"""Prompts of every built-in evaluation task, first evaluated example, 0-shot and 2-shot,
against strings written by hand from the files (the prompts are lm-eval's; the sampler's
draws are checked against lm-eval itself in test_evaluate_lm_eval_parity.py)."""

from __future__ import annotations

import csv
import json

import pytest

from stages.evaluate.evaluate_task import plan_task
from stages.evaluate.spec import resolve_task_spec


def first_requests(name: str, data_dir, shots: int):
    plan = plan_task(resolve_task_spec(name), data_dir, shots=shots, seed=1234)
    requests = plan.requests(range(1))
    # "path:line" of each demonstration row; the line is what the tests re-read by hand.
    demo_lines = [plan.demo_rows.where[j].rsplit(":", 1)[1] for j in plan.demonstrations[0]]
    return requests, [int(line) if line.isdigit() else line for line in demo_lines]


def jsonl_line(path, line: int) -> dict:
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, start=1):
            if number == line:
                return json.loads(text)
    raise AssertionError(f"{path} has no line {line}")


def tsv_line(path, line: int) -> list[str]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        for number, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
            if number == line:
                return row
    raise AssertionError(f"{path} has no line {line}")


# Short tasks: the whole 2-shot prompt by hand. Demonstrations: lm-eval's sampler, seed 1234.
HAND_WRITTEN = {
    "piqa": (
        "Question: Brown sausages.\nAnswer: In a frying pan on medium heat, put a tsp of oil and the "
        "sausages in the pan, turning occasionally, and cook until all sides are browned.\n\n"
        "Question: To replace vitamins expelled by body through frequent urination caused by diuretic "
        "alcohol.\nAnswer: Take a multivitamin.\n\n",
        "Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:",
        [" Provide the guinea pig with a cage full of a few inches of bedding made of ripped paper strips, "
         "you will also need to supply it with a water bottle and a food dish.",
         " Provide the guinea pig with a cage full of a few inches of bedding made of ripped jeans "
         "material, you will also need to supply it with a water bottle and a food dish."]),
    "arc_easy": (
        "Question: In the first step of making some ceramic cups, the following manufacturing process is "
        "used. Liquid clay is poured into a mold, allowed to solidify, then removed from the mold. What is "
        "the name of this manufacturing process?\nAnswer: casting\n\n"
        "Question: What does a plant need to make sugar through photosynthesis?\n"
        "Answer: sunlight, water, and carbon dioxide\n\n",
        "Question: Which statement best explains why photosynthesis is the foundation of most food webs?"
        "\nAnswer:",
        [" Sunlight is the source of energy for nearly all ecosystems.",
         " Most ecosystems are found on land instead of in water.",
         " Carbon dioxide is more available than other gases.", " The producers in all ecosystems are plants."]),
    "arc_challenge": (
        "Question: A scientist claims that he made a discovery in the lab. What does the scientist need to "
        "have in order to prove that the discovery is valid?\n"
        "Answer: accurate records that show that the data are consistent\n\n"
        "Question: Water, ice, and steam all have different temperatures. What is the order from coldest "
        "to hottest?\nAnswer: ice, water, steam\n\n",
        "Question: An astronomer observes that a planet rotates faster after a meteorite impact. Which is "
        "the most likely effect of this increase in rotation?\nAnswer:",
        [" Planetary density will decrease.", " Planetary years will become longer.",
         " Planetary days will become shorter.", " Planetary gravity will become stronger."]),
    # lm-eval's COPA choices start with a space and target_delimiter adds another: two spaces.
    "copa": (
        "The man's watch was broken therefore  he asked a stranger for the time.\n\n"
        "My jaw dropped open because  i was shocked.\n\n",
        "The man turned on the faucet therefore",
        ["  the toilet filled with water.", "  water flowed from the spout."]),
    # GLUE's tokenised spacing (and SST-2's trailing space) is kept, as in Hugging Face's copy.
    "sst2": (
        "has you fixating on a far corner of the screen at times because your nerves just ca n't take it "
        "any more \nQuestion: Is this sentence positive or negative?\nAnswer: negative\n\n"
        "seem genuine rather than pandering \nQuestion: Is this sentence positive or negative?\n"
        "Answer: positive\n\n",
        "it 's a charming and often affecting journey . \nQuestion: Is this sentence positive or negative?"
        "\nAnswer:",
        [" negative", " positive"]),
    "cola": (
        "It is arrive tomorrow that Mary will.\nQuestion: Does this sentence make sense?\nAnswer: no\n\n"
        "Bartlett danced with Toni.\nQuestion: Does this sentence make sense?\nAnswer: yes\n\n",
        "The sailors rode the breeze clear of the rocks.\nQuestion: Does this sentence make sense?\nAnswer:",
        [" no", " yes"]),
    "wnli": (
        "The man couldn't lift his son because he was so heavy.\n"
        "Question: The man was so heavy. True or False?\nAnswer: False\n\n"
        "Adam can't leave work here until Bob arrives to replace him. If Bob had left home for work on "
        "time, he would be here by this time.\nQuestion: Bob would be here by this time. True or False?\n"
        "Answer: True\n\n",
        "The drain is clogged with hair. It has to be cleaned.\n"
        "Question: The hair has to be cleaned. True or False?\nAnswer:",
        [" False", " True"]),
}


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_short_task_prompts_at_zero_and_two_shots(name, data_dir):
    demonstrations, prompt, continuations = HAND_WRITTEN[name]
    zero, _ = first_requests(name, data_dir, shots=0)
    two, _ = first_requests(name, data_dir, shots=2)
    assert [r.context for r in zero] == [prompt] * len(continuations)
    assert [r.continuation for r in zero] == continuations
    assert [r.context for r in two] == [demonstrations + prompt] * len(continuations)
    assert [(r.example, r.choice) for r in two] == [(0, i) for i in range(len(continuations))]


# Long tasks: the format by hand (plain f-strings over rows read here), the rows from the files.

def test_boolq_prompt(data_dir):
    path = data_dir / "eval/superglue/BoolQ/val.jsonl"
    prompt = lambda row: f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:"  # noqa: E731
    answer = lambda row: "yes" if row["label"] else "no"  # noqa: E731
    first = jsonl_line(path, 1)
    zero, _ = first_requests("boolq", data_dir, 0)
    assert zero[0].context == prompt(first)
    assert zero[0].context.startswith("Ethanol fuel -- All biomass goes through")
    assert zero[0].context.endswith("\nQuestion: does ethanol take more energy make that produces?\nAnswer:")
    assert [r.continuation for r in zero] == [" no", " yes"]
    two, lines = first_requests("boolq", data_dir, 2)
    demos = [jsonl_line(path, line) for line in lines]
    assert two[0].context == "".join(f"{prompt(d)} {answer(d)}\n\n" for d in demos) + prompt(first)


def test_rte_qnli_mrpc_prompts(data_dir):
    glue = data_dir / "glue_data"
    cases = {
        "rte": (glue / "RTE", lambda r: f"{r[1]}\nQuestion: {r[2]} True or False?\nAnswer:",
                lambda r: "True" if r[3] == "entailment" else "False", [" True", " False"]),
        "qnli": (glue / "QNLI", lambda r: f"{r[1]}\n{r[2]}\nQuestion: Does this response answer the question?"
                 "\nAnswer:", lambda r: "yes" if r[3] == "entailment" else "no", [" yes", " no"]),
        "mrpc": (glue / "MRPC", lambda r: f"Sentence 1: {r[3]}\nSentence 2: {r[4]}\nQuestion: Do both "
                 "sentences mean the same thing?\nAnswer:", lambda r: "yes" if r[0] == "1" else "no",
                 [" no", " yes"]),
    }
    for name, (folder, prompt, answer, continuations) in cases.items():
        first = tsv_line(folder / "dev.tsv", 2)
        zero, _ = first_requests(name, data_dir, 0)
        assert zero[0].context == prompt(first), name
        assert [r.continuation for r in zero] == continuations, name
        two, lines = first_requests(name, data_dir, 2)
        demo_file = folder / ("dev.tsv" if name == "qnli" else "train.tsv")
        demos = [tsv_line(demo_file, line) for line in lines]
        assert two[0].context == "".join(f"{prompt(d)} {answer(d)}\n\n" for d in demos) + prompt(first), name
    rte_zero, _ = first_requests("rte", data_dir, 0)
    assert rte_zero[0].context == (
        "Dana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age 44, according "
        "to the Christopher Reeve Foundation.\nQuestion: Christopher Reeve had an accident. True or False?"
        "\nAnswer:")


def test_lambada_prompt(data_dir):
    path = data_dir / "eval/lambada/lambada_test.jsonl"
    zero, _ = first_requests("lambada_openai", data_dir, 0)
    assert len(zero) == 1
    assert zero[0].context.startswith("In my palm is a clear stone, and inside it is a small ivory statuette.")
    assert zero[0].context.endswith("his mouth curved in a confident grin, I don't care about")
    assert zero[0].continuation == " signs"
    two, lines = first_requests("lambada_openai", data_dir, 2)
    demos = [jsonl_line(path, line)["text"] for line in lines]
    # lm-eval: text + target_delimiter " " + target " word": two spaces before the last word.
    expected = "".join(d.rsplit(" ", 1)[0] + "  " + d.rsplit(" ", 1)[1] + "\n\n" for d in demos)
    assert two[0].context == expected + zero[0].context
    assert two[0].continuation == " signs"


def test_squad_prompt(data_dir):
    zero, _ = first_requests("squad", data_dir, 0)
    assert zero[0].context.startswith(
        "Title: Super_Bowl_50\n\nBackground: Super Bowl 50 was an American football game to determine the")
    assert zero[0].context.endswith(
        "\n\nQuestion: Which NFL team represented the AFC at Super Bowl 50?\n\nAnswer:")
    assert zero[0].until == ("\n",)
    two, _ = first_requests("squad", data_dir, 2)
    assert two[0].context.endswith(zero[0].context)
    demos = two[0].context[:-len(zero[0].context)].split("\n\nTitle: ")
    assert len(demos) == 2 and demos[1].endswith("\n\n")
    assert all("\n\nQuestion: " in d and "\n\nAnswer: " in d for d in demos)


def test_perplexity_tasks_score_whole_documents(data_dir):
    wiki, _ = first_requests("wikitext2", data_dir, 0)
    # lm-eval's document starts at the heading line; detokenizing keeps its leading space.
    assert wiki[0].text.startswith(" = Robert Boulter =\n\nRobert Boulter is an English film, television")
    assert wiki[0].text.endswith("\n\n=== Theatre ===\n\n\n")
    ptb, _ = first_requests("ptb", data_dir, 0)
    assert ptb[0].text == (data_dir / "eval/ptb/ptb.test.txt").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="perplexity; it takes no demonstrations"):
        first_requests("ptb", data_dir, 2)
