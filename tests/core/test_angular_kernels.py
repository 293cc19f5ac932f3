"""Angular Decomposition kernels (Sun et al. 2011) against dense NumPy, and the Spherical PCA
kernels they are built on."""

import numpy as np
import pytest

from sphdist.core import angular_kernels as ak
from sphdist.core import kernels

from ..reference import random_corpus


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_normalise_rows_is_eq_14_and_bitwise_the_v_step_on_rows(rng):
    A = rng.standard_normal((30, 4))
    A[[3, 17]] = 0.0  # empty documents
    H, n_zero = ak.normalise_rows(A)
    norms = np.linalg.norm(A, axis=1)
    expected = np.where(norms[:, None] > 0, A / np.where(norms > 0, norms, 1)[:, None],
                        np.eye(4)[0])
    np.testing.assert_allclose(H, expected, atol=1e-15)
    assert n_zero == 2
    V, _ = kernels.v_step(A.T, None, 2.0)
    np.testing.assert_array_equal(H, V.T)


@pytest.mark.parametrize("dense", [False, True])
def test_ad_pass_chunk_gives_eq_14_rows_and_eq_18_partials(rng, dense):
    X = random_corpus(25, 12, density=0.3, seed=1, n_empty=1)
    X = X.toarray() if dense else X
    D = X if dense else X.toarray()
    U = np.linalg.qr(rng.standard_normal((25, 3)))[0]
    got = ak.ad_pass_chunk(X, U)
    H, _ = ak.normalise_rows(D.T @ U)
    np.testing.assert_allclose(got["H"], H, atol=1e-14)
    np.testing.assert_allclose(got["XVt"], D @ H, atol=1e-13)  # X H, Eq. 18's matrix
    np.testing.assert_allclose(got["VVt"], H.T @ H, atol=1e-13)
    assert got["sq_norm_X"] == pytest.approx(float((D**2).sum()), rel=1e-13)
    assert got["n_degenerate"] == 1
