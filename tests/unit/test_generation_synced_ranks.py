"""generate_seq2seq(synced_ranks=True) keeps every rank decoding until all are finished.

ZeRO-3 gathers parameters collectively inside each forward, so two ranks that run a
different number of decoder steps deadlock. Two real gloo processes: rank 0's rows finish
after one token, rank 1's never do; both must decode the full length and return.
"""

from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from stages.models import T5, T5Config
from stages.models.generation import generate_seq2seq

MAX_NEW_TOKENS = 6


def _tiny_t5() -> T5:
    torch.manual_seed(0)
    return T5(T5Config(vocab_size=53, hidden_size=32, head_size=8, ff_size=64, num_layers=1, num_heads=4,
                       dropout=0.0)).eval()


def _worker(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    torch.set_num_threads(1)
    model = _tiny_t5()
    source = _source()
    with torch.no_grad():
        first = generate_seq2seq(model, source, max_new_tokens=1)[0, 1].item()
        # rank 0: the token it generates first is its EOS (done after one step); rank 1:
        # an EOS id outside the vocabulary, never generated.
        eos = first if rank == 0 else 10_000
        ids = generate_seq2seq(model, source, max_new_tokens=MAX_NEW_TOKENS, eos_token_id=eos, synced_ranks=True)
    results[rank] = ids.shape[1]
    dist.destroy_process_group()


def _source() -> torch.Tensor:
    return torch.randint(3, 53, (1, 5), generator=torch.Generator().manual_seed(1))  # one row: done at once


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_synced_ranks_decode_the_same_number_of_steps():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(_free_port(), results), nprocs=2, join=True)
        lengths = dict(results)
    assert lengths == {0: 1 + MAX_NEW_TOKENS, 1: 1 + MAX_NEW_TOKENS}


def test_unsynced_generation_stops_when_its_own_rows_are_done():
    model, source = _tiny_t5(), _source()
    with torch.no_grad():
        first = generate_seq2seq(model, source, max_new_tokens=1)[0, 1].item()
        ids = generate_seq2seq(model, source, max_new_tokens=MAX_NEW_TOKENS, eos_token_id=first)
    assert ids.tolist() == [[model.config.decoder_start_token_id, first]]
