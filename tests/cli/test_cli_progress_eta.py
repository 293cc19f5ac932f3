"""The fit's ETA follows the convergence toward tol, not max_iter."""

import numpy as np

from sphdist.cli.fit import iterations_left


def test_eta_follows_a_geometric_decrease_of_the_relative_change():
    # relative changes 1e-1, 1e-2, 1e-3: ratio 0.1 per iteration, so tol 1e-6 is 3 more
    f = [1.0]
    for c in (1e-1, 1e-2, 1e-3):
        f.append(f[-1] * (1 - c))
    assert iterations_left(f, 1e-6, 100) == 3.0
    assert iterations_left(f, 1e-6, 5) == 2.0  # capped by max_iter
    assert iterations_left(f, 1e-2, 100) == 0.0  # already below tol


def test_eta_falls_back_to_max_iter_without_a_trend():
    assert iterations_left([5.0, 4.0], 1e-4, 10) == 9.0  # too few changes
    rising = [10.0, 9.0, 8.0, 6.0]  # changes .1, .11, .25: not decreasing
    assert iterations_left(rising, 1e-4, 10) == 7.0
    assert np.isfinite(iterations_left([1.0, 1.0, 1.0, 1.0], 1e-4, 10))
