"""Parameter validation for all of sphdist: scikit-learn's constraints, one error, one message.

Every parameter a caller passes is checked here against scikit-learn's constraints
(:mod:`sklearn.utils._param_validation`: ``Interval`` -- as :class:`Number`, which refuses
booleans --, ``StrOptions``, ``None``, types, ``"random_state"``); a value is valid when it
satisfies one constraint of its list. The users:

* the estimators of :mod:`sphdist.methods`, through :class:`ValidatedParams` and their
  ``_parameter_constraints`` (scikit-learn's ``_fit_context`` calls ``_validate_params``);
* the Spherical PCA fit table :data:`sphdist.core.params.PARAMS` (solver, estimator, fit job and
  the options of ``sphdist fit``);
* the text layer (:mod:`sphdist.text`: :class:`~sphdist.text.tfidf.TextOptions`, ingestion and
  synthetic corpora) through :func:`check_param` and :func:`check_int`.

A value outside its constraints raises :class:`InvalidParameterValueError`, which is both
:class:`sphdist.errors.ParameterError` (a ``ValueError``) and scikit-learn's
``InvalidParameterError``, so ``sklearn.utils.estimator_checks.check_param_validation`` accepts
it, with scikit-learn's message plus sphdist's remedy. A bound that depends on the data
(``n_components <= min(n_samples, n_features)``) is :func:`check_bound`.

Like :mod:`sphdist.errors`, this module imports no other layer of sphdist: every layer may use it.

It is also the only module of sphdist that imports :mod:`sklearn.utils._param_validation`,
which is private to scikit-learn and may move between its releases: the constraint classes the
other modules need are re-exported from here, so a move is followed in one place
(``tests/test_validation.py`` checks that no other module imports it):

* ``Interval`` -- a number in an interval (prefer :class:`Number` and :func:`at_least`, which
  refuse booleans);
* ``StrOptions`` -- one of some words;
* ``Hidden`` -- a constraint valid but left out of the messages (a deprecated keyword's
  ``"deprecated"`` sentinel, as scikit-learn writes them);
* ``InvalidParameterError`` -- scikit-learn's error, a base of
  :class:`InvalidParameterValueError`;
* ``make_constraint`` -- the constraint object of a constraint's spelling (a type, ``None``,
  ``"random_state"``, ...).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from numbers import Integral
from typing import Any

import numpy as np
from sklearn import config_context, get_config
from sklearn.utils._param_validation import (  # the one import of it: re-exported below
    Hidden,
    Interval,
    InvalidParameterError,
    Options,
    StrOptions,
    make_constraint,
)

from sphdist.errors import ParameterError, option

__all__ = [
    "Interval",
    "StrOptions",
    "Hidden",
    "InvalidParameterError",
    "make_constraint",
    "InvalidParameterValueError",
    "Number",
    "FloatDtype",
    "at_least",
    "describe",
    "check_param",
    "check_int",
    "validate",
    "check_bound",
    "ValidatedParams",
    "skip_validation",
    "validated",
]


class InvalidParameterValueError(ParameterError, InvalidParameterError):
    """A parameter outside its constraints: sphdist's and scikit-learn's error at once."""


class Number(Interval):
    """scikit-learn's :class:`~sklearn.utils._param_validation.Interval`, refusing booleans.

    ``True`` is an ``Integral`` to Python; no sphdist parameter is meant to be one.
    """

    def is_satisfied_by(self, val: Any) -> bool:
        """Whether ``val`` is a number (not a bool) in the interval."""
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


class FloatDtype(StrOptions):
    """A float dtype given by name, NumPy type or ``numpy.dtype``: float64 or float32."""

    def __init__(self) -> None:
        super().__init__({"float64", "float32"})

    def is_satisfied_by(self, val: Any) -> bool:
        """Whether ``numpy.dtype(val)`` is float64 or float32."""
        try:
            return np.dtype(val).name in self.options
        except TypeError:
            return False


def at_least(low: int) -> Number:
    """The constraint "an integer >= ``low``" (booleans refused).

    Examples
    --------
    >>> str(at_least(1))
    'an int in the range [1, inf)'
    """
    return Number(Integral, low, None, closed="left")


def describe(constraints: Sequence[Any]) -> str:
    """The values satisfying one of ``constraints``, in words.

    Parameters
    ----------
    constraints : sequence
        scikit-learn constraints.

    Returns
    -------
    str
        One alternative per constraint, joined by "or"; options sorted; ``Hidden`` ones
        left out.

    Examples
    --------
    >>> describe([at_least(2), StrOptions({"b", "a"}), None])
    "an int in the range [2, inf) or one of 'a', 'b' or None"
    """
    words = []
    for constraint in constraints:
        if isinstance(constraint, Hidden):  # valid, not named (scikit-learn's messages)
            continue
        if isinstance(constraint, Options):
            words.append("one of " + ", ".join(map(repr, sorted(constraint.options))))
        elif constraint is None:
            words.append("None")
        else:
            words.append(str(make_constraint(constraint)))
    return " or ".join(words)


def check_param(name: str, value: Any, *constraints: Any, caller: str | None = None) -> Any:
    """Return ``value`` if it satisfies one of scikit-learn's parameter ``constraints``.

    Parameters
    ----------
    name : str
        The parameter's name, for the message.
    value : object
        Its value.
    *constraints
        scikit-learn's constraints (:class:`Number`, ``StrOptions``,
        ``None``, a type, ...), as in an estimator's ``_parameter_constraints``.
    caller : str, optional
        Whose parameter it is (``"SphericalPCA"``, ``"sphdist.core.solver.fit"``), named in the
        message.

    Returns
    -------
    object
        ``value``, unchanged.

    Raises
    ------
    InvalidParameterValueError
        A :class:`~sphdist.errors.ParameterError` and scikit-learn's ``InvalidParameterError``,
        in scikit-learn's words: ``The 'lam' parameter of SphericalPCA must be a float in the
        range [2.0, inf) or one of 'exact', 'palm', 'theory'. Got lam=1.5 instead. To resolve
        this, pass a value in that range.``
    """
    if not any(make_constraint(c).is_satisfied_by(value) for c in constraints):
        of = "" if caller is None else f" of {caller}"
        raise InvalidParameterValueError(
            f"The {name!r} parameter{of} must be {describe(constraints)}. Got "
            + option(name, value) + " instead. To resolve this, pass a value in that range."
        )
    return value


def check_int(name: str, value: Any, low: int, caller: str | None = None) -> int:
    """``value`` as an int if it is an integer >= ``low`` (not a bool), as :func:`check_param`.

    Raises
    ------
    InvalidParameterValueError
        Otherwise.
    """
    return int(check_param(name, value, at_least(low), caller=caller))


def validate(
    values: Mapping[str, Any], constraints: Mapping[str, Any], caller: str | None = None
) -> None:
    """Check every value against its constraints (:func:`check_param`), in the order of ``values``.

    Parameters
    ----------
    values : mapping of str to object
        Parameter name -> value; names without constraints are not checked.
    constraints : mapping of str to sequence or "no_validation"
        Parameter name -> its constraints, as an estimator's ``_parameter_constraints``.
    caller : str, optional
        Whose parameters they are, for the message.

    Raises
    ------
    InvalidParameterValueError
        Naming the first invalid value and its valid values.
    """
    for name, value in values.items():
        allowed = constraints.get(name, "no_validation")
        if not isinstance(allowed, str):  # "no_validation"
            check_param(name, value, *allowed, caller=caller)


def check_bound(name: str, value: int, high: int, why: str = "") -> int:
    """``1 <= value <= high``: the bound of an integer parameter that depends on the data.

    Parameters
    ----------
    name : str
        The parameter (``"n_components"``).
    value : int
        Its value, already checked to be an integer >= 1 by its constraints.
    high : int
        The bound from the data.
    why : str, default ""
        What the bound comes from, e.g. ``" for X with 10 features and 40 documents"``.

    Returns
    -------
    int
        ``value``.

    Raises
    ------
    InvalidParameterValueError
        Naming the value and the bound: ``n_components=11 is out of range for X with 10
        features and 40 documents. To resolve this, choose 1 <= n_components <= 10.``
    """
    if not 1 <= value <= high:
        raise InvalidParameterValueError(
            option(name, value) + f" is out of range{why}. To resolve this, choose 1 <= "
            + option(name) + f" <= {high}."
        )
    return int(value)


class ValidatedParams:
    """``_validate_params`` by :func:`validate` (mixed in before ``BaseEstimator``).

    scikit-learn's ``_fit_context`` calls it with the estimator's ``_parameter_constraints``;
    the error is :class:`InvalidParameterValueError`.
    """

    _parameter_constraints: dict[str, Any] = {}

    def _validate_params(self) -> None:
        validate(self.get_params(deep=False), self._parameter_constraints, type(self).__name__)


def skip_validation() -> bool:
    """Whether the caller validated the parameters already (inside :func:`validated`)."""
    return bool(get_config()["skip_parameter_validation"])


@contextlib.contextmanager
def validated() -> Iterator[None]:
    """Run nested fits without validating their parameters again.

    scikit-learn's ``skip_parameter_validation`` (what its ``_fit_context`` sets for nested
    calls): the caller validated every parameter before.
    """
    with config_context(skip_parameter_validation=True):
        yield
