"""The row-chunk planner and the one loop over sample blocks (``mercer.linalg``)."""

from __future__ import annotations

import pytest
import torch

from mercer.kernels import RBF
from mercer.linalg import KernelOperator, MemoryBudgetError, observe_blocks, plan_blocks, plan_rows, row_blocks


@pytest.mark.parametrize("n, per_row, budget, fixed, expected", [
    (10_000, 8_000, 2**20, 0, 131),          # floor(2^20 / 8000)
    (100, 8_000, 2**20, 0, 100),             # all rows fit: never more than n
    (10_000, 8_000, 2**20, 2**19, 65),       # what the loop holds throughout comes first
    (0, 8_000, 2**20, 0, 1),                 # empty loop: a valid step
    (50, 0, 1, 0, 50),                       # rows that cost nothing
])
def test_plan_rows_is_the_largest_chunk_within_the_budget(n, per_row, budget, fixed, expected):
    rows = plan_rows(n, per_row, budget=budget, fixed_bytes=fixed, max_bytes=None)
    assert rows == expected
    if 0 < rows < n:
        assert fixed + rows * per_row <= budget < fixed + (rows + 1) * per_row


def test_plan_rows_caps_chunks_at_max_bytes_but_not_below_min_rows():
    assert plan_rows(10**6, 1000, budget=2**40, max_bytes=10**6) == 1000
    assert plan_rows(10**6, 1000, budget=2**40, max_bytes=10, min_rows=64) == 64


def test_plan_rows_refuses_a_budget_too_small_and_says_what_would_fit():
    with pytest.raises(MemoryBudgetError, match=r"distances needs about .*memory budget of 100 B"):
        plan_rows(1000, 800, budget=100, what="distances")
    with pytest.raises(MemoryBudgetError, match="held throughout"):
        plan_rows(1000, 8, budget=1000, fixed_bytes=2000)
    with pytest.raises(MemoryBudgetError):
        plan_rows(1000, 8, budget=1000, min_rows=200)


@pytest.mark.parametrize("bad", [dict(n=-1), dict(n=2.5), dict(budget=0), dict(bytes_per_row=-1.0)])
def test_plan_rows_rejects_bad_arguments(bad):
    args = dict(n=10, bytes_per_row=8, budget=100) | bad
    with pytest.raises(ValueError, match="plan_rows"):
        plan_rows(args.pop("n"), args.pop("bytes_per_row"), **args)


@pytest.mark.parametrize("n, rows", [(0, 3), (1, 3), (9, 3), (10, 3), (10, 100), (7, 1)])
def test_row_blocks_cover_every_row_once_in_order(n, rows):
    slices = list(row_blocks(n, rows))
    covered = [i for s in slices for i in range(s.start, s.stop)]
    assert covered == list(range(n))
    assert all(0 < s.stop - s.start <= rows for s in slices)


def test_observer_sees_every_block_of_planned_loops_and_operator_products():
    seen = []
    with observe_blocks(lambda desc, done, total: seen.append((desc, done, total))):
        list(row_blocks(10, 4, desc="demo"))
        X = torch.randn(300, 3, dtype=torch.float64)
        op = KernelOperator(RBF(0.5), X, memory_budget=400_000)
        op.matvec(torch.ones(300, dtype=torch.float64))
    assert seen[:3] == [("demo", 4, 10), ("demo", 8, 10), ("demo", 10, 10)]
    kernel_rows = [s for s in seen[3:] if s[0] == "kernel rows"]
    assert len(kernel_rows) == op.plan.n_row_blocks > 1 and kernel_rows[-1][1:] == (300, 300)
    list(row_blocks(10, 4))  # outside the context: no observer
    assert len(seen) == 3 + len(kernel_rows)


def test_an_observer_can_stop_a_loop_between_blocks():
    def stop(desc, done, total):
        calls.append(done)
        if done >= 100:
            raise KeyboardInterrupt

    calls = []
    X = torch.randn(300, 3, dtype=torch.float64)
    op = KernelOperator(RBF(0.5), X, memory_budget=400_000)
    with observe_blocks(stop), pytest.raises(KeyboardInterrupt):
        op.kt_k_v(torch.ones(300, dtype=torch.float64))
    assert calls[-1] < 300  # stopped after the block that crossed 100 rows


def test_product_tiles_hold_a_fixed_share_per_thread_and_span_full_rows():
    from mercer.linalg import PRODUCT_TILE_BYTES_PER_THREAD, product_tile_bytes

    for m, d, item, threads in [(5000, 8, 4, 1), (5000, 8, 8, 2), (10_000, 28, 4, 2), (5000, 784, 4, 2), (1000, 4, 8, 16)]:
        cap = product_tile_bytes(m, d, itemsize=item, threads=threads)
        plan = plan_blocks(10**6, m, d, itemsize=item, budget=1 << 34, max_tile_bytes=cap)
        assert plan.full_width
        kernel_part = plan.row_block * m * item
        assert kernel_part <= PRODUCT_TILE_BYTES_PER_THREAD * threads < kernel_part + m * item  # the rows that fit
    # at d = 784 the centres alone (15.7 MB) exceed two threads' share: a plain 16 MiB cap splits the columns
    assert not plan_blocks(10**6, 5000, 784, itemsize=4, budget=1 << 34, max_tile_bytes=16 << 20).full_width
    # a very wide matrix still gets MIN_ROWS full-width rows
    cap = product_tile_bytes(10**6, 8, itemsize=8, threads=1)
    assert plan_blocks(10**7, 10**6, 8, itemsize=8, budget=1 << 40, max_tile_bytes=cap).row_block == 64
