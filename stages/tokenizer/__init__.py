"""Tokenizer stage: a seeded sample of the documents -> a trained `tokenizer.json`.

run.py orchestrates and documents the outputs; config.py is the YAML section;
recipes.py says which `tokenizers` parts make each kind; sample.py streams the text.
"""
