"""The methods as scikit-learn estimators, built on :mod:`sphdist.core`.

Spherical PCA (Liu et al. 2019), Angular Decomposition and BAE (Sun et al. 2011), Li & Dunson's
spherical PCA, and the R1-PCA and K-SVD baselines of Liu et al. (2019), Table 1.
"""
