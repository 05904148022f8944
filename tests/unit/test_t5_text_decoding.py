"""The whole text-to-text path on a tiny random T5 (no Ray): it overfits two SQuAD and
two CoNLL-2003 examples by teacher forcing, then greedy decoding generates exactly the
target texts, which read back as the gold answers and the gold tags."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stages.finetune.conll.reader import ConllSentences
from stages.finetune.conll.text_to_text import encode_ner, ner_source, ner_target, word_tags
from stages.finetune.conll.text_to_text import MAX_TARGET_LEN as NER_TARGET_LEN
from stages.finetune.encode import load_task_tokenizer
from stages.finetune.squad.reader import Answer, SquadExample
from stages.finetune.squad.text_to_text import encode_squad, generated_answers, squad_source
from stages.finetune.text_to_text.model import TextToTextModel
from stages.finetune.text_to_text.pairs import generated_texts
from stages.models import build_model
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.recipes import build_recipe, build_tokenizer, finish_tokenizer

CONTEXT = "The Denver Broncos beat the Carolina Panthers in Santa Clara to win Super Bowl 50."
QUESTIONS = [
    SquadExample(id="q1", title="t", question="Who won?", context=CONTEXT, answers=[Answer("Denver Broncos", 4)]),
    SquadExample(id="q2", title="t", question="Where?", context=CONTEXT, answers=[Answer("Santa Clara", 49)]),
]
SENTENCES = ConllSentences(
    words=["EU rejects German call to boycott British lamb .".split(), "Peter Blackburn".split()],
    tags=["B-ORG O B-MISC O O O B-MISC O O".split(), "B-PER I-PER".split()], lines=[1, 3])


def test_a_tiny_t5_overfits_answers_and_entity_lists_and_generates_them_exactly(tmp_path, one_torch_thread):
    sources = [squad_source(q) for q in QUESTIONS] + [ner_source(w) for w in SENTENCES.words]
    targets = [q.answers[0].text for q in QUESTIONS] + [ner_target(w, t) for w, t in zip(SENTENCES.words,
                                                                                          SENTENCES.tags)]
    recipe = build_recipe(TokenizerConfig(kind="unigram", vocab_size=600, min_frequency=1))
    trained = build_tokenizer(recipe)
    trained.train_from_iterator((sources + targets + ["[PER] [LOC] [ORG] [MISC] ; none"]) * 20, trainer=recipe.trainer)
    tokenizer_path = str(tmp_path / "tokenizer.json")
    finish_tokenizer(trained, recipe).save(tokenizer_path)
    tokenizer = load_task_tokenizer(tokenizer_path, 64)

    squad, ner = encode_squad(tokenizer, QUESTIONS), encode_ner(tokenizer, SENTENCES)
    squad_labels = np.full((len(QUESTIONS), NER_TARGET_LEN), -100, dtype=np.int64)
    squad_labels[:, :squad.labels.shape[1]] = squad.labels
    input_ids = torch.from_numpy(np.concatenate([squad.input_ids, ner.input_ids]).astype(np.int64))  # (4, 64)
    attention_mask = torch.from_numpy(np.concatenate([squad.attention_mask, ner.attention_mask]).astype(np.int64))
    labels = torch.from_numpy(np.concatenate([squad_labels, ner.labels]))  # (4, NER_TARGET_LEN)

    torch.manual_seed(0)
    t5 = build_model({"family": "t5", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "ff_size": 128,
                      "dropout": 0.0}, vocab_size=tokenizer.get_vocab_size())
    model = TextToTextModel(t5, max_target_len=NER_TARGET_LEN)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(200):
        _, loss = model(input_ids, attention_mask, labels=labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if loss.item() < 1e-3:
            break
    model.eval()
    with torch.no_grad():
        generated, _ = model(input_ids, attention_mask)
    outputs = generated.numpy()
    assert generated_texts(tokenizer_path, outputs) == targets
    assert generated_answers(QUESTIONS, tokenizer_path, outputs[:2]) == {"q1": "Denver Broncos", "q2": "Santa Clara"}
    assert word_tags(SENTENCES.words, tokenizer_path, outputs[2:]) == SENTENCES.tags
