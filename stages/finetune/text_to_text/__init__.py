"""T5 fine-tuning as text to text (Raffel et al. 2020, sec. 2.4): a task prefix in, text
out, decoded greedily (`stages.models.generation.generate_seq2seq`) and read back into
the task's own predictions, then scored by the same code as the other heads.

    glue.py      "sst2 sentence: ..." -> "positive"; STS-B "stsb sentence1: ..." -> "3.8"
    squad.py     "question: ... context: ..." -> the answer text ("" = no answer, v2.0)
    ner.py       "ner: EU rejects German ..." -> "EU [ORG] ; German [MISC]" -> IOB2 tags
    pairs.py     (source, target) texts -> token arrays; generated ids -> texts
    model.py     TextToTextModel: teacher forcing with labels, greedy generation without
    rank.py      finetune.t5_scoring: rank: GLUE classes by label-word log-likelihood, no generation

The finetune stage reaches them through its text-to-text task family
(`stages.finetune.families.text_to_text`), which picks the format by task kind.

Each module's docstring states its format and what happens to generations that do not
fit it (counted in the task's metrics, never silently).
"""

from stages.finetune.text_to_text.glue import (
    LABEL_WORDS, MAX_TARGET_LEN, class_ids, encode_text_to_text, file_predictions, label_words, parse_score,
    score_text, scored_predictions, source_texts, text_to_text_scores, unreadable_facts,
)
from stages.finetune.text_to_text.model import TextToTextModel
from stages.finetune.text_to_text.pairs import IGNORE_INDEX, generated_texts

__all__ = [
    "IGNORE_INDEX", "LABEL_WORDS", "MAX_TARGET_LEN", "TextToTextModel", "class_ids", "encode_text_to_text",
    "file_predictions", "generated_texts", "label_words", "parse_score", "score_text", "scored_predictions",
    "source_texts", "text_to_text_scores", "unreadable_facts",
]
