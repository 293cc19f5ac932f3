"""The one table of fit parameters: validation, and what the estimator, job and CLI derive."""

import dataclasses
import inspect

import click
import numpy as np
import pytest

from sphdist import SphericalPCA
from sphdist._validation import InvalidParameterError, Number, describe, validated
from sphdist.cli._common import param_type
from sphdist.core import kernels, params, partials, solver
from sphdist.errors import ParameterError
from sphdist.jobs import params as job_params
from sphdist.methods.spherical_pca import _constraints

# (value on the command line, the Python value it stands for, valid?) -- written from the
# documented ranges (solver module docstring), not from the table
CASES = {
    "n_components": [("1", 1, True), ("0", 0, False), ("-3", -3, False)],
    "lam": [("2", 2.0, True), ("1", 1.0, False), ("1.999", 1.999, False), ("exact", "exact", True),
            ("palm", "palm", True), ("theory", "theory", True), ("fast", "fast", False),
            ("inf", np.inf, False), ("4503599627370496", 2.0**52, True),
            ("1e160", 1e160, False)],
    "mu": [("0", 0.0, True), ("7.5", 7.5, True), ("-1", -1.0, False), ("exact", "exact", True),
           ("4503599627370496", 2.0**52, True), ("4503599627370497", 2.0**52 + 1, False),
           ("1e200", 1e200, False)],
    "max_iter": [("0", 0, True), ("-1", -1, False)],
    "tol": [("0", 0.0, True), ("1e-4", 1e-4, True), ("-0.1", -0.1, False)],
    "init": [("svd", "svd", True), ("pca", "pca", False)],
    "random_state": [("0", 0, True), ("-5", -5, False)],
    "n_power_iter": [("0", 0, True), ("-1", -1, False)],
    "split_every": [("2", 2, True), ("1", 1, False)],
    "dtype": [("float32", "float32", True), ("int64", "int64", False)],
    "polar": [("gram", "gram", True), ("qr", "qr", False)],
    "partials": [("rows", "rows", True), ("sparse", "sparse", False)],
}


def _valid(name, value):
    try:
        params.validate({name: value}, "test")
    except ParameterError:
        return False
    return True


@pytest.mark.parametrize("name", list(CASES))
def test_table_and_cli_accept_the_documented_values(name):
    kind = param_type(params.PARAMS[name])
    for text, value, ok in CASES[name]:
        assert _valid(name, value) == ok, (name, value)
        if ok:
            assert kind.convert(text, None, None) == value
        else:
            with pytest.raises(click.BadParameter):
                kind.convert(text, None, None)


def test_cli_ranges_keep_the_open_and_closed_ends():
    lam = param_type(params.PARAMS["lam"])
    assert lam.convert("2", None, None) == 2.0  # closed at 2
    tol = param_type(params.PARAMS["tol"])
    with pytest.raises(click.BadParameter):
        tol.convert("inf", None, None)  # open at infinity
    assert isinstance(param_type(params.PARAMS["max_iter"]), click.IntRange)
    assert isinstance(param_type(params.PARAMS["init"]), click.Choice)


@pytest.mark.parametrize("value", [True, np.bool_(False), None, "3", 2.0])
def test_integers_refuse_booleans_and_other_types(value):
    assert not _valid("n_components", value)


@pytest.mark.parametrize("dtype", ["float64", np.float32, np.dtype("float64"), "float32"])
def test_dtype_accepts_float_dtypes_in_any_spelling(dtype):
    assert _valid("dtype", dtype)
    assert not _valid("dtype", np.int64) and not _valid("dtype", object())


def test_error_is_sphdists_and_scikit_learns():
    with pytest.raises(ParameterError, match=r"The 'lam' parameter of caller must be .* "
                                             r"Got lam=1\.5 instead\.") as info:
        params.validate({"lam": 1.5}, "caller")
    assert isinstance(info.value, InvalidParameterError)


def test_validated_context_skips_the_table_but_not_the_shape():
    with pytest.raises(ParameterError, match="lam=1.5"):
        solver.check_params(2, (10, 10), lam=1.5)
    with validated():
        solver.check_params(2, (10, 10), lam=1.5)
        with pytest.raises(ParameterError, match="1 <= n_components <= 10"):
            solver.check_params(11, (10, 10), lam="exact")


def test_step_modes_are_defined_once():
    assert solver.STEP_MODES is params.STEP_MODES


def test_the_tables_choices_are_the_kernels():
    # the table holds them as plain data (the command line imports no SciPy to show them)
    assert set(params.POLAR_METHODS) == set(kernels.POLAR_METHODS)
    assert set(params.PARTIAL_FORMATS) == set(partials.PARTIAL_FORMATS)


@pytest.mark.parametrize("table", [params.PARAMS, job_params.JOB_PARAMS], ids=["solver", "job"])
def test_the_tables_validator_says_and_decides_what_scikit_learns_constraints_do(table):
    """sphdist's own validator of the plain spec (no scikit-learn) agrees with scikit-learn's
    constraints built from it (what the estimator's checks read): words and verdicts."""
    probes = [None, True, np.bool_(False), 0, 1, 2, -1, 7, 2**32, 1.5, 2.0, 4.5e15, 1e16,
              float("nan"), float("inf"), np.int64(3), np.float32(2.5), "exact", "palm", "svd",
              "random", "float32", np.float32, np.dtype("float64"), "int8",
              np.random.RandomState(0), "auto", "rows", "gram", object()]
    for param in table.values():
        constraints = [Number(c.type, c.left, c.right, closed=c.closed)
                       if isinstance(c, params.Range) else c for c in param.spec]
        if table is params.PARAMS:
            constraints = _constraints(param.name)
        assert params.describe(param.spec) == describe(constraints), param.name
        for value in probes:
            from sphdist._validation import make_constraint

            expected = any(make_constraint(c).is_satisfied_by(value) for c in constraints)
            assert params.accepts(param.spec, value) == expected, (param.name, value)


def test_the_table_imports_no_private_scikit_learn_module():
    source = inspect.getsource(params)
    assert "sklearn" not in source.replace("scikit-learn", "")


def test_resume_keys_are_the_tables_rows_that_change_the_iterates():
    # written from the solver's docs: what changes U_0, the steps, or the summation order
    assert set(params.RESUME_PARAMS) == {
        "n_components", "lam", "mu", "init", "random_state", "n_power_iter", "split_every",
        "dtype", "polar", "accelerate"}
    assert job_params.RESUME_KEYS == (*params.RESUME_PARAMS, "init_from")
    assert not {"max_iter", "tol", "partials", "chunk_size"} & set(params.RESUME_PARAMS)


def test_config_is_built_once_with_the_tables_defaults():
    config = params.FitConfig.build(n_components=3, dtype=np.float32)
    assert [f.name for f in dataclasses.fields(config)] == list(params.SOLVER_PARAMS)
    assert config.dtype == np.dtype("float32") and config.n_components == 3
    for name in params.SOLVER_PARAMS:
        if name not in ("n_components", "dtype"):
            assert getattr(config, name) == params.PARAMS[name].default, name
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.lam = "palm"
    with pytest.raises(TypeError, match="chunk_size"):
        params.FitConfig.build(n_components=3, chunk_size=4)
    with pytest.raises(ParameterError, match="The 'lam' parameter of caller"):
        params.FitConfig.build("caller", n_components=3, lam=1.5)


def test_estimator_constraints_and_defaults_are_the_tables():
    estimator = SphericalPCA()
    # the table's rows, and each old name of a renamed one for a release ("deprecated": unset)
    assert list(estimator._parameter_constraints) == [*params.PARAMS, *params.RENAMED]
    for name, constraints in estimator._parameter_constraints.items():
        row = params.PARAMS[params.RENAMED.get(name, name)]
        assert describe(constraints) == params.describe(row.spec), name
    assert estimator.get_params() == {
        **{name: param.default for name, param in params.PARAMS.items()},
        **dict.fromkeys(params.RENAMED, "deprecated"),
    }


def test_the_fit_requests_defaults_are_the_tables():
    """FitRequest re-types no default: each field of a solver parameter or a job setting
    defaults to its row of the table (n_components to none: a fit says its r)."""
    from sphdist.jobs.fit import FitRequest

    fields = {f.name: f.default for f in dataclasses.fields(FitRequest)}
    assert fields["n_components"] is dataclasses.MISSING
    for name in params.SOLVER_PARAMS[1:]:
        assert fields[name] == params.PARAMS[name].default, name
    for name, param in job_params.JOB_PARAMS.items():
        assert fields[name] == param.default, name


def test_solver_takes_every_solver_parameter_with_the_tables_default():
    """solver.fit writes no default of its own: the state it reaches with none given is the
    one of every default passed explicitly (random_state 0, accelerate on, ...)."""
    import dask.array as da

    X = da.from_array(np.random.default_rng(0).random((12, 30)), chunks=(12, 10))
    implicit = solver.fit(X, 2, max_iter=3)
    explicit = solver.fit(X, **{**params.defaults(), "n_components": 2, "max_iter": 3})
    assert implicit.objective == explicit.objective
    np.testing.assert_array_equal(implicit.U_full, explicit.U_full)
    with pytest.raises(TypeError, match="init_from"):
        solver.fit(X, 2, init_from="x")


def _unit_columns(rng, r, n):
    V = rng.standard_normal((r, n))
    return V / np.linalg.norm(V, axis=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_largest_steps_keep_the_arithmetic_finite(dtype):
    """At lam = mu = MAX_STEP the V-step (Liu et al. 2019, Eq. 3.12) and the U-step (Eq. 3.11)
    return unit columns and an orthonormal U in either compute dtype; far above it they do not
    (the bound is needed, not only safe)."""
    rng = np.random.default_rng(0)
    r, n, m = 5, 40, 60
    V = _unit_columns(rng, r, n).astype(dtype)
    A = (0.5 * _unit_columns(rng, r, n)).astype(dtype)  # U^T x_j of unit documents
    V_new, degenerate = kernels.v_step(A, V, params.MAX_STEP)
    assert not degenerate.any()
    np.testing.assert_allclose(np.linalg.norm(V_new.astype(np.float64), axis=0), 1.0, rtol=1e-5)
    U = np.linalg.qr(rng.standard_normal((m, r)))[0]
    XVt, VVt = rng.standard_normal((m, r)) * n, np.eye(r) * n / r
    for route in ("gram", "svd"):
        U_new = kernels.u_step(U, XVt, VVt, params.MAX_STEP, route)
        np.testing.assert_allclose(U_new.T @ U_new, np.eye(r), atol=1e-10)
    with np.errstate(all="ignore"):
        V_far, _ = kernels.v_step(A, V, 1e160)
    assert not np.allclose(np.linalg.norm(V_far.astype(np.float64), axis=0), 1.0)
    assert not _valid("lam", 1e160) and not _valid("mu", 1e200)


def test_solver_takes_a_built_config_and_checks_it_and_its_r():
    """solver.fit(X, config=...) is the keyword form's fit; a config constructed directly is
    validated (the table) and its r checked against X (12 features here)."""
    import dask.array as da

    X = da.from_array(np.random.default_rng(0).random((12, 30)), chunks=(12, 10))
    config = params.FitConfig(n_components=2, max_iter=3)
    assert config.dtype == "float64" and config.checked().dtype == np.dtype("float64")
    built = solver.fit(X, config=config)
    keywords = solver.fit(X, 2, max_iter=3)
    assert built.objective == keywords.objective
    np.testing.assert_array_equal(built.U_full, keywords.U_full)
    with pytest.raises(ParameterError, match="'lam' parameter"):
        solver.fit(X, config=params.FitConfig(n_components=2, lam=1.0))
    with pytest.raises(ParameterError, match="n_components"):
        solver.fit(X, config=params.FitConfig(n_components=13))
    with pytest.raises(TypeError, match="not both"):
        solver.fit(X, 2, config=config)
    with pytest.raises(TypeError, match="n_components"):
        solver.fit(X)


# -- init_n_iter, the old name of n_power_iter, for one release ----------------------------------


def test_old_name_init_n_iter_is_n_power_iter_with_a_future_warning(sync_scheduler):
    assert params.RENAMED == {"init_n_iter": "n_power_iter"}
    with pytest.warns(FutureWarning, match="'init_n_iter' was renamed 'n_power_iter'"):
        config = params.FitConfig(n_components=2, init_n_iter=1)
    assert config == params.FitConfig(n_components=2, n_power_iter=1)
    with pytest.warns(FutureWarning, match="renamed n_power_iter"):
        assert config.init_n_iter == 1
    with pytest.warns(FutureWarning, match="'init_n_iter' was renamed"):
        assert params.FitConfig.build(n_components=2, init_n_iter=3).n_power_iter == 3
    with pytest.raises(TypeError, match="both 'init_n_iter' and 'n_power_iter'"):
        params.FitConfig.build(n_components=2, init_n_iter=3, n_power_iter=3)
    # the estimator: same fit as the new name, and a different one from the default
    X = np.random.default_rng(0).random((30, 10))
    kw = dict(n_components=3, init="svd", max_iter=2)
    with pytest.warns(FutureWarning, match="pass n_power_iter=1"):
        old = SphericalPCA(**kw, init_n_iter=1).fit(X)
    new = SphericalPCA(**kw, n_power_iter=1).fit(X)
    np.testing.assert_array_equal(old.components_, new.components_)
    assert not np.array_equal(old.components_, SphericalPCA(**kw).fit(X).components_)
    with pytest.raises(ParameterError, match="The 'init_n_iter' parameter of SphericalPCA"):
        SphericalPCA(init_n_iter=-1).fit(X)


def test_stored_params_with_an_old_name_are_read_under_the_new_one_silently():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert params.current_names({"init": "svd", "init_n_iter": 2, "tol": 0.1}) == {
            "init": "svd", "n_power_iter": 2, "tol": 0.1}
