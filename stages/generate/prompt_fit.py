"""A prompt against the model's context: fits, is cut from the left (--cut-left, said on
stderr), or is refused with how far over it is."""

from __future__ import annotations

from stages.generate.errors import GenerateInputError


def fit_prompt(ids: list[int], *, number: int, context: int, max_new_tokens: int, asked: bool,
               cut_left: bool) -> tuple[list[int], int, int]:
    """(ids to feed, tokens cut from the left, new tokens to generate). `asked`: the user
    gave --max-new-tokens, which must fit whole; the default shrinks to the room left, and
    only a prompt that leaves no room at all is too long."""
    if asked and max_new_tokens >= context:
        raise GenerateInputError(
            f"--max-new-tokens {max_new_tokens} leaves no room for a prompt: the model's context is {context} "
            f"tokens; give --max-new-tokens {context - 1} or fewer")
    room = context - len(ids)
    if room >= (max_new_tokens if asked else 1):
        return ids, 0, min(max_new_tokens, room)
    # Cut: keep room for the tokens asked for (the default: up to half the context).
    new_tokens = max_new_tokens if asked else min(max_new_tokens, context // 2)
    keep = context - new_tokens
    if cut_left:
        return ids[-keep:], len(ids) - keep, new_tokens
    needed = max_new_tokens if asked else 1
    over = len(ids) + needed - context
    with_new = f"with --max-new-tokens {max_new_tokens} it needs" if asked else "with one new token it needs"
    raise GenerateInputError(
        f"prompt {number} is {len(ids)} tokens; {with_new} {len(ids) + needed} positions, {over} more than the "
        f"model's context of {context} tokens; it was not cut: shorten it"
        + (", lower --max-new-tokens," if asked else "")
        + f" or pass --cut-left to keep its last {keep} tokens")
