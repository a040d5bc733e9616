"""WindowIndex.epoch_draw: an epoch's budget of windows, uniform over series."""

import numpy as np
import torch

from tsformer.data.windows import WindowIndex


def index_of(sizes: list[int]) -> WindowIndex:
    """Windows of series with `sizes` windows each; a series is named by its first row, as in a real index."""
    floors = torch.cat([torch.full((n,), 1000 * k) for k, n in enumerate(sizes)])
    return WindowIndex(inputs=None, starts=torch.arange(len(floors)), floors=floors, context_len=4, horizon=2)


def drawn_per_series(windows: WindowIndex, order: torch.Tensor) -> list[int]:
    return np.bincount(windows.floors[order].numpy() // 1000, minlength=4).tolist()


def test_a_budget_takes_as_many_windows_from_each_series_and_all_of_a_short_one():
    windows = index_of([3, 50, 200, 7])
    order = windows.epoch_draw(40, torch.Generator().manual_seed(0))
    assert len(order) == 40 and len(set(order.tolist())) == 40
    assert drawn_per_series(windows, order) == [3, 15, 15, 7]  # the 30 the short two leave, shared by the others
    assert drawn_per_series(windows, windows.epoch_draw(41, torch.Generator().manual_seed(1))) in (
        [3, 16, 15, 7],
        [3, 15, 16, 7],
    )


def test_every_series_is_in_every_epoch_once_the_budget_reaches_the_number_of_series():
    windows = index_of([400, 2, 400, 400])  # a uniform draw over windows would leave the short one out most epochs
    for seed in range(20):
        order = windows.epoch_draw(4, torch.Generator().manual_seed(seed))
        assert drawn_per_series(windows, order) == [1, 1, 1, 1]
    epochs = [set(windows.epoch_draw(40, torch.Generator().manual_seed(seed)).tolist()) for seed in range(2)]
    assert epochs[0] != epochs[1]  # a new draw each epoch


def test_the_order_is_random_across_series_not_series_by_series():
    windows = index_of([100, 100, 100, 100])
    series = windows.floors[windows.epoch_draw(200, torch.Generator().manual_seed(0))] // 1000
    assert (series[1:] != series[:-1]).float().mean() > 0.5  # consecutive windows mostly from different series


def test_one_series_draws_the_first_windows_of_the_random_order_and_no_budget_draws_all():
    windows = index_of([500])
    order = torch.randperm(500, generator=torch.Generator().manual_seed(3))
    assert torch.equal(windows.epoch_draw(64, torch.Generator().manual_seed(3)), order[:64])
    assert torch.equal(windows.epoch_draw(500, torch.Generator().manual_seed(3)), order)


def test_a_budget_below_the_number_of_series_draws_the_series_at_random_whatever_their_sizes():
    windows = index_of([2, 400])
    firsts = [drawn_per_series(windows, windows.epoch_draw(1, torch.Generator().manual_seed(s)))[0] for s in range(400)]
    assert 160 < sum(firsts) < 240  # the short series about half the time (binomial, 400 draws: 200 +- 10)
    three = index_of([50, 50, 50])
    counts = [drawn_per_series(three, three.epoch_draw(4, torch.Generator().manual_seed(s))) for s in range(300)]
    extra = np.array(counts).argmax(axis=1)  # the series that got the fourth window
    assert all(60 < (extra == k).sum() < 140 for k in range(3))  # each about 100 times
