"""The one validation mechanism (sphdist._validation) and its users: estimators, fit table, text."""

from numbers import Real

import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_param_validation

from sphdist import (
    BAE,
    KSVD,
    R1PCA,
    AngularDecomposition,
    GraphAngularDecomposition,
    LiDunsonSphericalPCA,
    SphericalPCA,
)
from sphdist._validation import (
    InvalidParameterError,
    Number,
    StrOptions,
    at_least,
    check_bound,
    check_int,
    check_param,
    describe,
)
from sphdist.core import params
from sphdist.errors import ParameterError
from sphdist.text.tfidf import TextOptions

ESTIMATORS = [
    SphericalPCA(n_components=2, max_iter=3),
    AngularDecomposition(n_components=2, max_iter=3, random_state=0),
    GraphAngularDecomposition(n_components=2, max_iter=3, random_state=0),
    BAE(n_components=2, random_state=0),
    R1PCA(n_components=1),
    KSVD(n_components=3, n_nonzero_coefs=1, random_state=0),
    LiDunsonSphericalPCA(n_components=1),
]


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_estimators_pass_scikit_learns_param_validation_check(estimator, sync_scheduler):
    # scikit-learn's own check: an InvalidParameterError "The 'p' parameter of Est must be ...
    # Got ... instead." for a value of a wrong type and for one out of range, per parameter
    check_param_validation(type(estimator).__name__, estimator)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_estimators_refuse_booleans_as_numbers(estimator):
    X = np.random.default_rng(0).random((20, 6))
    with pytest.raises(ParameterError, match="n_components") as info:
        estimator.set_params(n_components=True).fit(X)
    assert isinstance(info.value, InvalidParameterError)


def test_one_message_for_estimators_fit_table_and_text():
    with pytest.raises(ParameterError, match=r"^The 'tol' parameter of R1PCA must be a float in "
                                             r"the range \[0.0, inf\]\. Got tol=-1 instead\. To "
                                             r"resolve this"):
        R1PCA(n_components=1, tol=-1).fit(np.eye(3))
    with pytest.raises(ParameterError, match=r"^The 'mu' parameter of caller must be a float in "
                                             r"the range \[0\.0, 4503599627370496\.0\] or one "
                                             r"of 'exact', "):
        params.validate({"mu": -1.0}, "caller")
    text = (r"^The 'min_df' parameter of TextOptions must be an int in the range \[0, inf\) or "
            r"a float in the range \[0.0, 1.0\]\. Got min_df=1\.5 instead\.")
    with pytest.raises(ParameterError, match=text) as info:
        TextOptions(vocabulary=True, min_df=1.5)
    assert isinstance(info.value, InvalidParameterError)


def test_check_param_returns_the_value_and_names_the_caller():
    constraints = (StrOptions({"a", "b"}), None)
    assert check_param("x", "a", *constraints) == "a"
    assert check_param("x", None, *constraints) is None
    with pytest.raises(ParameterError, match=r"^The 'x' parameter must be one of 'a', 'b' or "
                                             r"None\. Got x='c' instead\."):
        check_param("x", "c", *constraints)
    with pytest.raises(ParameterError, match=r"^The 'x' parameter of f must be"):
        check_param("x", "c", *constraints, caller="f")


@pytest.mark.parametrize("value, ok", [(3, True), (np.int64(2), True), (1, False), (True, False),
                                       (np.bool_(True), False), (2.0, False), ("3", False)])
def test_check_int_takes_integers_at_least_low_and_no_booleans(value, ok):
    if ok:
        assert check_int("n", value, 2) == value and type(check_int("n", value, 2)) is int
    else:
        with pytest.raises(ParameterError, match="Got n="):
            check_int("n", value, 2)


def test_number_is_an_interval_without_booleans():
    fraction = Number(Real, 0, 1, closed="both")
    assert fraction.is_satisfied_by(0.5) and fraction.is_satisfied_by(1)
    assert not fraction.is_satisfied_by(True) and not fraction.is_satisfied_by(np.bool_(False))
    count = at_least(0)
    assert count.is_satisfied_by(0) and not count.is_satisfied_by(False)
    assert not count.is_satisfied_by(0.0)
    assert describe([at_least(2), None]) == "an int in the range [2, inf) or None"


def test_check_bound_is_the_data_dependent_bound():
    assert check_bound("n_components", 3, 3) == 3
    with pytest.raises(ParameterError, match=r"^n_components=4 is out of range for X with 3 "
                                             r"features and 9 documents\. To resolve this, "
                                             r"choose 1 <= n_components <= 3\.$") as info:
        check_bound("n_components", 4, 3, " for X with 3 features and 9 documents")
    assert isinstance(info.value, InvalidParameterError)


def _param_validation_importers():
    """The modules of the package whose code imports scikit-learn's private validation."""
    import ast
    from pathlib import Path

    import sphdist

    root = Path(sphdist.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any("_param_validation" in name for name in names):
                found.add(path.relative_to(root.parent).as_posix())
    return found


def test_only_the_validation_module_imports_sklearns_private_param_validation():
    # sklearn.utils._param_validation is private to scikit-learn: one importer, which
    # re-exports what the others need, follows it if it moves
    assert _param_validation_importers() == {"sphdist/_validation.py"}
