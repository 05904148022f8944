"""The rule-based sentence splitter behind the `sentences` column."""

import pytest

from stages.ingest.sentences import split_sentences


@pytest.mark.parametrize("text, expected", [
    ("Mr. Smith went to Washington. He arrived at 3.15 p.m. on Monday.",
     ["Mr. Smith went to Washington.", "He arrived at 3.15 p.m. on Monday."]),
    ("J. R. R. Tolkien wrote it. The U.S. Army came.",
     ["J. R. R. Tolkien wrote it.", "The U.S. Army came."]),
    ('"Stop!" he said. "Why?" She left.', ['"Stop!" he said.', '"Why?"', "She left."]),
    ("Pi is 3.14159. Yes! Really? Sure...", ["Pi is 3.14159.", "Yes!", "Really?", "Sure..."]),
    ("See e.g. this, etc. and more. (An aside.) Then.",
     ["See e.g. this, etc. and more.", "(An aside.)", "Then."]),
    ("Read No. 5 on p. 12. I said no. Then I left.",
     ["Read No. 5 on p. 12.", "I said no.", "Then I left."]),
    ("He said ‘go.’ Then “Stay.” 1914. The end", ["He said ‘go.’", "Then “Stay.”", "1914.",
                                                   "The end"]),
    ("first paragraph\n\nsecond. Third", ["first paragraph", "second.", "Third"]),
    ("", []), ("  \n ", []),
])
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_joined_sentences_give_the_unwrapped_text_back():
    text = ("It was the best of times. It was the worst of times! Was it? Dr. Manette, "
            "i.e. the doctor, said “No.” And St. Paul's was 3.5 mi. away. The end")
    assert " ".join(split_sentences(text)) == text
