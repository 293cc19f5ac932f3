"""The parameters of a Spherical PCA fit, each defined once: constraint, default, help.

:data:`PARAMS` is the one table the fit paths read: :func:`sphdist.core.solver.check_params`
validates against it, :class:`sphdist.SphericalPCA` derives its ``_parameter_constraints`` from
it, and ``sphdist fit`` derives its option types and help text from it. The constraints are
scikit-learn's (``sklearn.utils._param_validation``): :class:`~sklearn.utils._param_validation.
Interval`, :class:`~sklearn.utils._param_validation.StrOptions`, ``None`` and types; a parameter
is valid when it satisfies one constraint of its list.

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
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.utils._param_validation import StrOptions

from sphdist import _validation
from sphdist._validation import Number, at_least, skip_validation, validated
from sphdist.core import kernels, partials

__all__ = [
    "PARAMS", "SOLVER_PARAMS", "JOB_PARAMS", "STEP_MODES", "MAX_STEP", "Param", "Number",
    "FloatDtype",
    "validate", "defaults", "validated", "constraints", "skip_validation",
]

#: Step-size modes of ``lam`` and ``mu`` (see :mod:`sphdist.core.solver`).
STEP_MODES = ("exact", "palm", "theory")


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


@dataclasses.dataclass(frozen=True)
class Param:
    """One fit parameter.

    Attributes
    ----------
    name : str
        Keyword of :func:`sphdist.core.solver.fit` and :class:`sphdist.SphericalPCA`.
    constraints : tuple
        scikit-learn constraints; the value must satisfy one.
    default : object
        The default of the estimator and of ``fit_corpus`` (``sphdist fit`` may show another
        where it says so).
    help : str
        One line, also the help of the ``sphdist fit`` option.
    """

    name: str
    constraints: tuple[Any, ...]
    default: Any
    help: str


def _finite(left: float) -> Number:
    return Number(Real, left, np.inf, closed="left")


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


def _step(left: float) -> Number:
    return Number(Real, left, MAX_STEP, closed="both")


#: Every parameter of a Spherical PCA fit, in the order of the estimator's signature.
PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("n_components", (at_least(1),), 2,
          "r, the dimension of the embedding; at most min(features, documents)."),
    Param("lam", (_step(2.0), StrOptions(set(STEP_MODES))), "exact",
          "Proximal parameter of the V-step (Liu et al. 2019, Eq. 3.12); at most 2**52 (beyond, "
          "the step leaves V as it is, to rounding, and its arithmetic can overflow)."),
    Param("mu", (_step(0.0), StrOptions(set(STEP_MODES))), "exact",
          "Proximal parameter of the U-step (Liu et al. 2019, Eq. 3.11); exact: U = polar(X V^T); "
          "at most 2**52, as lam."),
    Param("max_iter", (at_least(0),), 100, "Maximum iterations after the initialisation."),
    Param("tol", (_finite(0.0),), 1e-4,
          "Stop when the relative objective change |f_{k-1} - f_k| / |f_{k-1}| is below this."),
    Param("init", (StrOptions({"random", "svd"}),), "random",
          "Initial U: Haar-random, or the leading left singular vectors (Sun et al. 2011, V0)."),
    Param("random_state", (Number(Integral, 0, 2**32 - 1, closed="both"),
                           np.random.RandomState, None), 0,
          "Seed of the initialisation; the iterations are deterministic."),
    Param("init_n_iter", (at_least(0),), 4, "Power iterations of init='svd'."),
    Param("chunk_size", (at_least(1), None), None,
          "Samples per chunk of NumPy / SciPy input (stored corpora keep their chunks)."),
    Param("split_every", (at_least(2),), 8, "Fan-in of the reduction tree of the partials."),
    Param("dtype", (FloatDtype(),), "float64",
          "Compute dtype of U^T X and of V; partials, objective and U stay float64."),
    Param("polar", (StrOptions(set(kernels.POLAR_METHODS)),), "auto",
          "Route of the U-step's polar factor (auto: the r x r Gram matrix when m >= 64 r)."),
    Param("partials", (StrOptions(set(partials.PARTIAL_FORMATS)),), "auto",
          "Format of the X V^T block partials (bitwise the same result; auto moves fewer bytes)."),
    Param("max_partials", (at_least(1),), 8,
          "At most this many (m, r) partials per pass: blocks of consecutive document chunks."),
    Param("accelerate", ("boolean",), True,
          "Extrapolated exact U-step with a monotone safeguard (Ang and Gillis 2019): 14-20% "
          "fewer passes to tol; no effect unless lam and mu are exact."),
)}

#: The parameters :func:`sphdist.core.solver.fit` takes (all but the estimator's chunk_size).
SOLVER_PARAMS = tuple(name for name in PARAMS if name != "chunk_size")

#: The fit job's own parameters (:func:`sphdist.jobs.fit.fit_corpus`, ``sphdist fit``).
JOB_PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("checkpoint_every", (at_least(1),), 1,
          "Write the model every N iterations (and at the end)."),
    Param("retries", (at_least(0),), 3,
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
    _validation.validate(values, constraints(table, table), caller)


def defaults(names: Sequence[str] = SOLVER_PARAMS) -> dict[str, Any]:
    """The table's defaults of ``names``, as a dict."""
    return {name: PARAMS[name].default for name in names}


def constraints(
    names: Sequence[str], table: Mapping[str, Param] = PARAMS
) -> dict[str, list[Any]]:
    """``_parameter_constraints`` of an estimator taking ``names``, from the table."""
    return {name: list(table[name].constraints) for name in names}
