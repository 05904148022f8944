"""README stays true: its config table is the one generated from the config models."""

from pathlib import Path

from pipeline.config_reference import BEGIN, END, markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_config_reference_matches_the_models():
    text = README.read_text()
    documented = text[text.index(BEGIN): text.index(END) + len(END)]
    assert documented == markdown(), (
        "README's config table is stale: run `python -m pipeline.config_reference --sync`")


def test_readme_opens_with_the_two_commands():
    head = "\n".join(README.read_text().splitlines()[:8])
    assert "make demo" in head and "make test" in head
