"""Model code in plain PyTorch (imports only torch and safetensors; never Ray, DeepSpeed
or the engine). Parallelism and checkpointing wrap these modules from outside.

Public API (stable; finetune and pretrain build on it):

    from stages.models import GPT, GPTConfig, GPTForSequenceClassification
    from stages.models import build_model, save_pretrained, load_pretrained

    GPTConfig(*, vocab_size, max_seq_len, num_layers=2, hidden_size=128, num_heads=4,
              dropout=0.0, layer_norm_eps=1e-5, variant="gpt2" | "llama",
              num_kv_heads=None, intermediate_size=None, rope_theta=None,
              tie_word_embeddings=None)   # the last four: llama only (see gpt/model.py)
    GPT(config)
        .forward(input_ids, attention_mask=None) -> logits (B,T,V), position t scoring token t+1
            (the pretraining losses are the objectives': stages/objectives/)
        .hidden_states(input_ids, attention_mask=None) -> (B, T, C) after the final LayerNorm
        .num_parameters(exclude_position_embedding=False) -> int
        .flops_per_token(seq_len=None) -> int            # 6N + 12*L*C*T
    GPTForSequenceClassification(backbone: GPT, num_labels, dropout=None)
        .forward(input_ids, attention_mask=None, labels=None) -> (logits (B,num_labels), loss|None)
            pools the last real token; cross-entropy, or MSE when num_labels == 1
    build_model(architecture: {"family": ..., <config fields>}, vocab_size, max_seq_len=None, **token_ids)
        -> GPT | BertForPreTraining | T5 | Transformer (by its family: gpt | bert | t5,
           and variant: t5 variant "transformer" is the Transformer class)
    save_pretrained(model, directory) -> Path    # model.safetensors + model_config.json
    load_pretrained(directory, device="cpu") -> nn.Module

    stages.models.gpt.convert: gpt_to_hf_gpt2(state_dict, num_layers), hf_gpt2_to_gpt(...),
        hf_gpt2_config(GPTConfig) -> weights and config for Hugging Face GPT2LMHeadModel
    stages.models.gpt.convert_llama: gpt_to_hf_llama(state_dict, config), hf_llama_to_gpt(...),
        hf_llama_config(GPTConfig) -> the same for LlamaForCausalLM (variant llama)

BERT and T5 (same conventions; see each module's docstring):

    BertConfig, Bert (encoder + pooler), BertForPreTraining (MLM + NSP heads)
        variant="albert": ALBERT (factorized embedding_size, share_layers; see bert/model.py)
        span_boundary_objective=True: SpanBERT's SBO head (see bert/span_boundary.py)
        variant="electra": ELECTRA's encoder (no pooler); build_model gives
        ElectraForPreTraining (discriminator `.backbone` + generator), fine-tuned with
        ElectraForSequenceClassification and the token / span heads (see bert/electra.py, heads.py)
    T5Config, T5 (encoder-decoder, v1.0 / v1.1)
        variant="transformer": Transformer, the original (Vaswani et al. 2017: post-LN,
        sinusoidal positions, shared scaled embedding; see t5/transformer.py), same interface
    heads: BertForSequenceClassification, SpanExtractionModel, TokenClassificationModel
    config: FAMILY_CONFIGS, family_config(architecture), preset_config(name), preset_shape(name)
        (torch-free; each family's config and presets in <family>/config.py)
    build: build_preset(name)     # gpt2-small ... albert-base ... t5-base, transformer-base, *-debug
    generation: generate(gpt, ...), generate_seq2seq(t5, ...)   # KV-cached decoding
    hf_export: export_hf(model, dir, tokenizer_json), import_hf(dir)
    checkpointing: apply_activation_checkpointing(model)
    bert.convert / bert.convert_albert / bert.convert_electra / t5.convert: state dicts and
        configs to and from Hugging Face

One package per family, its Hugging Face conversion beside the model (convert*.py: the
state dicts and configs; hf.py: the family's models as Hugging Face models, for hf_export)
and its variants' parts in a table (parts.py): gpt/ (GPT-2, Llama), bert/ (BERT, ALBERT,
ELECTRA, SpanBERT's SBO), t5/ (T5, the original Transformer).
Blocks shared by the families: attention.py, mlp.py, norms.py, positions.py, heads.py,
generation.py.
"""

# The re-exports load on first use (PEP 562), so that importing a torch-free submodule such as a
# family's config does not pull torch in through this package.
import importlib

_EXPORTS = {
    "Bert": "stages.models.bert.model",
    "BertConfig": "stages.models.bert.config",
    "BertForPreTraining": "stages.models.bert.model",
    "ElectraForPreTraining": "stages.models.bert.electra",
    "ElectraForSequenceClassification": "stages.models.heads",
    "ElectraGenerator": "stages.models.bert.electra",
    "GPT": "stages.models.gpt.model",
    "GPTConfig": "stages.models.gpt.config",
    "BertForSequenceClassification": "stages.models.heads",
    "GPTForSequenceClassification": "stages.models.heads",
    "SpanExtractionModel": "stages.models.heads",
    "TokenClassificationModel": "stages.models.heads",
    "T5": "stages.models.t5.model",
    "T5Config": "stages.models.t5.config",
    "Transformer": "stages.models.t5.transformer",
    "build_model": "stages.models.build",
    "load_pretrained": "stages.models.build",
    "save_pretrained": "stages.models.build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value
