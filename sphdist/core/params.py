"""The parameters of a Spherical PCA fit, each defined once: constraint, default, help.

:data:`PARAMS` is the one table the fit paths read: :func:`sphdist.core.solver.check_params`
validates against it, :class:`sphdist.SphericalPCA` derives its ``_parameter_constraints`` from
it, and ``sphdist fit`` derives its option types and help text from it.

The table is plain data: each row's :attr:`Param.spec` is made of :class:`Range` (a number in
an interval), :class:`Choice` (one of some words), ``None``, ``"boolean"`` and types, so that
the command line reads names, defaults, help and ranges without importing scikit-learn. The
constraints proper are scikit-learn's (``sklearn.utils._param_validation``: ``Interval`` -- as
:class:`sphdist._validation.Number` --, ``StrOptions``, ``None`` and types), built from the spec
on first use (:attr:`Param.constraints`); a parameter is valid when it satisfies one constraint
of its list.

The validation itself is :mod:`sphdist._validation`, the one mechanism of the package (the
other estimators and the text layer use it too). It follows scikit-learn's
``prefer_skip_nested_validation``: whoever validated the parameters runs the solver inside
:func:`~sphdist._validation.validated`, and the solver then does not validate them again (only
``n_components`` against the shape of X, which depends on the data:
:func:`~sphdist._validation.check_bound`).

References
----------
.. [1] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
   (``lam``: Eq. 3.12, ``mu``: Eq. 3.11.)
.. [2] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
   (``init="svd"``: step V0.)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported on first use (__getattr__ below): they import scikit-learn
    from sphdist._validation import FloatDtype, Number, skip_validation, validated

__all__ = [
    "PARAMS", "SOLVER_PARAMS", "JOB_PARAMS", "STEP_MODES", "MAX_STEP", "POLAR_METHODS",
    "PARTIAL_FORMATS", "Param", "Range", "Choice", "Number", "FloatDtype",
    "validate", "defaults", "validated", "constraints", "skip_validation", "describe",
]

#: Step-size modes of ``lam`` and ``mu`` (see :mod:`sphdist.core.solver`).
STEP_MODES = ("exact", "palm", "theory")
#: Routes of the U-step's polar factor: :data:`sphdist.core.kernels.POLAR_METHODS`.
POLAR_METHODS = ("svd", "gram", "auto")
#: Formats of the X V^T block partials: :data:`sphdist.core.partials.PARTIAL_FORMATS`.
PARTIAL_FORMATS = ("auto", "rows", "dense")

#: Imported from :mod:`sphdist._validation` (so scikit-learn) on first use.
_LAZY = ("Number", "FloatDtype", "validated", "skip_validation")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from sphdist import _validation

        return getattr(_validation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass(frozen=True)
class Range:
    """A number in an interval: the plain data of a :class:`sphdist._validation.Number`.

    Attributes
    ----------
    type : type
        ``numbers.Integral`` (an int; booleans refused) or ``numbers.Real`` (a float).
    left, right : float or None
        The ends; None: unbounded.
    closed : {"left", "right", "both", "neither"}
        Which ends belong to the interval.

    Examples
    --------
    >>> str(Range(Real, 2.0, 2**52, "both"))
    'a float in the range [2.0, 4503599627370496.0]'
    """

    type: type
    left: float | None
    right: float | None
    closed: str

    def __str__(self) -> str:
        """scikit-learn's words for its ``Interval`` (``Interval.__str__``)."""
        integral = self.type is Integral
        left: Any = "-inf" if self.left is None else self.left
        right: Any = "inf" if self.right is None else self.right
        if not integral and isinstance(self.left, Real):
            left = float(left)
        if not integral and isinstance(self.right, Real):
            right = float(right)
        return (
            f"{'an int' if integral else 'a float'} in the range "
            f"{'[' if self.closed in ('left', 'both') else '('}{left}, "
            f"{right}{']' if self.closed in ('right', 'both') else ')'}"
        )


@dataclasses.dataclass(frozen=True)
class Choice:
    """One of some words: the plain data of a ``StrOptions``.

    Attributes
    ----------
    options : frozenset of str
        The words.
    dtype : bool, default False
        The words are float dtypes, also given as a NumPy type or ``numpy.dtype``
        (:class:`sphdist._validation.FloatDtype`).

    Examples
    --------
    >>> str(Choice(frozenset({"svd", "random"})))
    "one of 'random', 'svd'"
    """

    options: frozenset[str]
    dtype: bool = False

    def __str__(self) -> str:
        """The words as :func:`sphdist._validation.describe` writes them."""
        return "one of " + ", ".join(map(repr, sorted(self.options)))


def _constraint(item: Any) -> Any:
    """The scikit-learn constraint of one item of a :attr:`Param.spec`."""
    from sklearn.utils._param_validation import StrOptions

    from sphdist import _validation

    if isinstance(item, Range):
        return _validation.Number(item.type, item.left, item.right, closed=item.closed)
    if isinstance(item, Choice):
        return _validation.FloatDtype() if item.dtype else StrOptions(set(item.options))
    return item  # None, "boolean", a type


@dataclasses.dataclass(frozen=True)
class Param:
    """One fit parameter.

    Attributes
    ----------
    name : str
        Keyword of :func:`sphdist.core.solver.fit` and :class:`sphdist.SphericalPCA`.
    spec : tuple
        What the value may be, as plain data (:class:`Range`, :class:`Choice`, ``None``,
        ``"boolean"``, types); the value must satisfy one.
    default : object
        The default of the estimator and of ``fit_corpus`` (``sphdist fit`` may show another
        where it says so).
    help : str
        One line, also the help of the ``sphdist fit`` option.
    """

    name: str
    spec: tuple[Any, ...]
    default: Any
    help: str

    @functools.cached_property
    def constraints(self) -> tuple[Any, ...]:
        """scikit-learn constraints of :attr:`spec`, built once, on first use.

        Returns
        -------
        tuple
            :class:`sphdist._validation.Number` for a :class:`Range`, ``StrOptions`` (or
            :class:`sphdist._validation.FloatDtype`) for a :class:`Choice`, other items as
            they are.
        """
        return tuple(_constraint(item) for item in self.spec)


def describe(spec: Sequence[Any]) -> str:
    """The values satisfying one item of ``spec``, in :func:`sphdist._validation.describe`'s words.

    :class:`Range`, :class:`Choice` and ``None`` are described without importing scikit-learn
    (the help of ``sphdist fit``); other items by :func:`sphdist._validation.describe`.

    Examples
    --------
    >>> describe(PARAMS["lam"].spec)
    "a float in the range [2.0, 4503599627370496.0] or one of 'exact', 'palm', 'theory'"
    """
    words = []
    for item in spec:
        if isinstance(item, (Range, Choice)):
            words.append(str(item))
        elif item is None:
            words.append("None")
        else:
            from sphdist import _validation

            words.append(_validation.describe([item]))
    return " or ".join(words)


def _at_least(low: int) -> Range:
    """An integer >= ``low`` (:func:`sphdist._validation.at_least`)."""
    return Range(Integral, low, None, "left")


def _finite(left: float) -> Range:
    return Range(Real, left, math.inf, "left")


#: Largest fixed ``lam`` and ``mu``: 2**52 = 1 / eps(float64) (4.5e15).
#:
#: Above it a step computes nothing more: in the V-step ``q = 2 U^T x_j + (lam - 2) v_j`` (Liu
#: et al. 2019, Eq. 3.12) the data term of a unit-norm document, ``|2 U^T x_j| <= 2``, is then
#: within a couple of ulps of the proximal term (``(lam - 2) |v_ij| <= lam``, whose ulp reaches
#: ``lam * eps = 1`` at the bound), so ``v_j`` moves by rounding alone. ``mu`` takes the same
#: bound: the data term of the U-step's ``M = 2 (X V^T - U V V^T) + mu U`` (Eq. 3.11) grows
#: with the number of documents, so it still counts at 2**52. What a larger value does
#: risk is overflow: ``||q||^2 <= (lam + 2 ||U^T x_j||)^2`` leaves float32 above ~1.8e19 (the
#: ``dtype="float32"`` V-step) and float64 above ~1.3e154, and the Gram route of the polar
#: factor squares ``mu`` (``M^T M``); ``lam=1e160`` then made the objective rise and flagged
#: most documents degenerate, ``mu=1e200`` stopped the fit with a LinAlgError. Up to 2**52
#: every step stays finite in both compute dtypes. ``"theory"`` (L_c ~ 2 n) is not bounded.
MAX_STEP = float(2**52)


def _step(left: float) -> Range:
    return Range(Real, left, MAX_STEP, "both")


#: Every parameter of a Spherical PCA fit, in the order of the estimator's signature.
PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("n_components", (_at_least(1),), 2,
          "r, the dimension of the embedding; at most min(features, documents)."),
    Param("lam", (_step(2.0), Choice(frozenset(STEP_MODES))), "exact",
          "Proximal parameter of the V-step (Liu et al. 2019, Eq. 3.12); at most 2**52 (beyond, "
          "the step leaves V as it is, to rounding, and its arithmetic can overflow)."),
    Param("mu", (_step(0.0), Choice(frozenset(STEP_MODES))), "exact",
          "Proximal parameter of the U-step (Liu et al. 2019, Eq. 3.11); exact: U = polar(X V^T); "
          "at most 2**52, as lam."),
    Param("max_iter", (_at_least(0),), 100, "Maximum iterations after the initialisation."),
    Param("tol", (_finite(0.0),), 1e-4,
          "Stop when the relative objective change |f_{k-1} - f_k| / |f_{k-1}| is below this."),
    Param("init", (Choice(frozenset({"random", "svd"})),), "random",
          "Initial U: Haar-random, or the leading left singular vectors (Sun et al. 2011, V0)."),
    Param("random_state", (Range(Integral, 0, 2**32 - 1, "both"),
                           np.random.RandomState, None), 0,
          "Seed of the initialisation; the iterations are deterministic."),
    Param("init_n_iter", (_at_least(0),), 4, "Power iterations of init='svd'."),
    Param("chunk_size", (_at_least(1), None), None,
          "Samples per chunk of NumPy / SciPy input (stored corpora keep their chunks)."),
    Param("split_every", (_at_least(2),), 8, "Fan-in of the reduction tree of the partials."),
    Param("dtype", (Choice(frozenset({"float64", "float32"}), dtype=True),), "float64",
          "Compute dtype of U^T X and of V; partials, objective and U stay float64."),
    Param("polar", (Choice(frozenset(POLAR_METHODS)),), "auto",
          "Route of the U-step's polar factor (auto: the r x r Gram matrix when m >= 64 r)."),
    Param("partials", (Choice(frozenset(PARTIAL_FORMATS)),), "auto",
          "Format of the X V^T block partials (bitwise the same result; auto moves fewer bytes)."),
    Param("max_partials", (_at_least(1),), 8,
          "At most this many (m, r) partials per pass: accumulation chains, each reading its "
          "blocks of consecutive document chunks in turn (memory flat in n)."),
    Param("accelerate", ("boolean",), True,
          "Extrapolated exact U-step with a monotone safeguard (Ang and Gillis 2019): 14-20% "
          "fewer passes to tol; no effect unless lam and mu are exact."),
)}

#: The parameters :func:`sphdist.core.solver.fit` takes (all but the estimator's chunk_size).
SOLVER_PARAMS = tuple(name for name in PARAMS if name != "chunk_size")

#: The fit job's own parameters (:func:`sphdist.jobs.fit.fit_corpus`, ``sphdist fit``).
JOB_PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("checkpoint_every", (_at_least(1),), 1,
          "Write the model every N iterations (and at the end)."),
    Param("retries", (_at_least(0),), 3,
          "Resume from the last checkpoint this many times when a worker dies."),
)}


def validate(
    values: Mapping[str, Any], caller: str, table: Mapping[str, Param] = PARAMS
) -> None:
    """Check every value against its constraints in ``table``, by :mod:`sphdist._validation`.

    Parameters
    ----------
    values : mapping of str to object
        Parameter name -> value; names not in ``table`` are not checked.
    caller : str
        Who validates (``"SphericalPCA"``, ``"sphdist.core.solver.fit"``), for the message.
    table : mapping of str to Param, default PARAMS
        The parameter table.

    Raises
    ------
    sphdist._validation.InvalidParameterValueError
        A :class:`~sphdist.errors.ParameterError` (and scikit-learn's
        ``InvalidParameterError``) naming the first invalid value and its valid range, in
        scikit-learn's words: ``The 'lam' parameter of ... must be ... Got lam=1.5 instead.``
    """
    from sphdist import _validation

    _validation.validate(values, constraints(table, table), caller)


def defaults(names: Sequence[str] = SOLVER_PARAMS) -> dict[str, Any]:
    """The table's defaults of ``names``, as a dict."""
    return {name: PARAMS[name].default for name in names}


def constraints(
    names: Sequence[str], table: Mapping[str, Param] = PARAMS
) -> dict[str, list[Any]]:
    """``_parameter_constraints`` of an estimator taking ``names``, from the table."""
    return {name: list(table[name].constraints) for name in names}
