"""clm document boundaries: derived from the eos tokens by the loader."""

from __future__ import annotations

import numpy as np
import torch

from stages.objectives.clm.batch import ClmBatch, document_attention_mask


def test_document_ids_count_the_eos_before_each_position_and_mask_attention():
    eos = 0
    rows = np.array([[5, 6, eos, 7, eos, 8], [9, 9, 9, 9, 9, eos]], dtype=np.uint16)
    batch = ClmBatch({"eos_id": eos}, document_ids=True)({"input_ids": rows}, np.arange(2), 0)
    # the eos ends its own document; the next token starts the next one
    assert batch["document_ids"].tolist() == [[0, 0, 0, 1, 1, 2], [0, 0, 0, 0, 0, 0]]
    # next-token labels (shifted inside the model) are the row itself, one position on
    assert batch["input_ids"].dtype == torch.long
    assert batch["input_ids"][0, 1:].tolist() == [6, eos, 7, eos, 8]
    mask = document_attention_mask(batch["document_ids"])  # (B, 1, T, T)
    assert mask.shape == (2, 1, 6, 6)
    assert mask[0, 0, 3].tolist() == [False, False, False, True, False, False]
    assert mask[0, 0, 4].tolist() == [False, False, False, True, True, False]
    assert mask[1, 0].equal(torch.ones(6, 6, dtype=torch.bool).tril())
