"""What reads many runs: the runs table (`pretrain report ROOT`, sweep.html), comparisons
(`pretrain report RUN RUN`), scaling fits, the live dashboard (`pretrain dashboard`) and
the `report` / `dashboard` commands (cli.py).

Layer: above the engine, below sweep (`cluster -> sweep -> views -> pipeline -> stages`).
Views read a run as the engine left it (pipeline.runner's run index and store,
pipeline.run_state's probes of stage locks), so they sit above it; a sweep ends by
writing its summary with them, so they sit below it. From the stages they import only
the report stage's public face (stages/report/__init__.py: each run's report content and
the drawing parts) and modules at the root of stages, never a module inside a stage
package (import-linter's "views import no stage internals").

The runs page's script and style are package data in static/ (page_assets.py).
"""
