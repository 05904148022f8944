"""Pretraining objectives, one object each (as stages/finetune/families/ does for task
kinds): an objective owns the three places it shows up, so that adding one means one
package and one line in registry.OBJECTIVES.

    base.py        PretrainingObjective (index entries, shard writer, split statistics,
                   batch builder, loss) and WriterSpec
    registry.py    the objectives; objective_named(name), build_objective(index, family)
                   (the loss, checked against the model family), build_batch_builder
                   (what a loader's caller hands it)
    output.py      ObjectiveOutput and prediction_loss, what every loss shares
    clm/           causal LM (gpt): rows of documents joined by eos
    mlm/           masked LM (bert) with NSP / SOP, SpanBERT's SBO, and ELECTRA's
                   replaced-token detection (rtd.py) on the same dataset
    span/          T5 span corruption (t5)

Each objective package: writer.py (dataset stage: encoded documents -> examples in a
shard), batch.py (loader: stored columns -> the model's tensors), loss.py (trainer: batch
-> ObjectiveOutput), and its PretrainingObjective in __init__.py.

Layering: the objectives build on stages.data (the shard format, masking, span
corruption) and stages.tokenizer (TokenIds); the dataset and pretrain stages use them.
stages.data imports no objective: a loader receives its batch builder from its caller.
"""
