"""The papers' printed numbers, to set the reproductions beside (pipelines only).

References
----------
Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical principal component analysis.
    Proc. SIAM International Conference on Data Mining, 387-395 (Tables 1 and 2).
Sun, J., Xie, Y., Zhang, H. and Faloutsos, C. (2011). Less is more: sparse graph mining with
    compact matrix decomposition. Statistical Analysis and Data Mining 1, 6-22 (Table 1).
"""

from __future__ import annotations

__all__ = ["LIU_TABLE1", "LIU_TABLE2", "SUN_TABLE1"]

#: Liu et al. 2019, Table 1 (20 Newsgroups): groups -> method -> (accuracy, NMI). Means of 10
#: repetitions; the paper prints no standard deviations.
LIU_TABLE1: dict[int, dict[str, tuple[float, float]]] = {
    5: {"kmeans": (0.651, 0.621), "nmf": (0.674, 0.614), "pca": (0.703, 0.628),
        "r1pca": (0.745, 0.647), "ksvd": (0.789, 0.673), "spca": (0.838, 0.695)},
    10: {"kmeans": (0.487, 0.316), "nmf": (0.478, 0.320), "pca": (0.502, 0.383),
         "r1pca": (0.535, 0.398), "ksvd": (0.527, 0.394), "spca": (0.588, 0.401)},
    15: {"kmeans": (0.398, 0.307), "nmf": (0.387, 0.301), "pca": (0.412, 0.319),
         "r1pca": (0.423, 0.320), "ksvd": (0.461, 0.377), "spca": (0.486, 0.385)},
    20: {"kmeans": (0.315, 0.242), "nmf": (0.314, 0.221), "pca": (0.362, 0.248),
         "r1pca": (0.394, 0.260), "ksvd": (0.412, 0.280), "spca": (0.431, 0.294)},
}

#: Liu et al. 2019, Table 2 (UCI): data set name -> (number of classes, method -> (acc, NMI)).
LIU_TABLE2: dict[str, tuple[int, dict[str, tuple[float, float]]]] = {
    "glass": (6, {"kmeans": (0.687, 0.566), "nmf": (0.692, 0.574), "pca": (0.732, 0.608),
                  "r1pca": (0.769, 0.626), "ksvd": (0.801, 0.648), "spca": (0.788, 0.635)}),
    "diabetes": (2, {"kmeans": (0.775, 0.632), "nmf": (0.788, 0.654), "pca": (0.761, 0.613),
                     "r1pca": (0.808, 0.631), "ksvd": (0.827, 0.672),
                     "spca": (0.832, 0.680)}),
    "mfeat": (10, {"kmeans": (0.365, 0.223), "nmf": (0.358, 0.211), "pca": (0.371, 0.225),
                   "r1pca": (0.431, 0.342), "ksvd": (0.412, 0.328), "spca": (0.425, 0.330)}),
    "isolet": (26, {"kmeans": (0.267, 0.198), "nmf": (0.253, 0.181), "pca": (0.262, 0.182),
                    "r1pca": (0.324, 0.201), "ksvd": (0.357, 0.246), "spca": (0.373, 0.250)}),
}

#: Sun et al. 2011, Table 1: data set -> residuals (BAE vector, AD vector, BAE graph, AD graph).
SUN_TABLE1: dict[str, tuple[float, float, float, float]] = {
    "at&t": (3.949, 2.302, 17.396, 16.612),
    "binalp": (16.579, 14.183, 24.060, 23.026),
    "mnist": (10.328, 9.583, 24.590, 22.869),
    "news": (18.664, 15.110, 34.023, 29.012),
    "lung": (1.887, 0.956, 18.600, 16.429),
    "glass": (4.206, 2.798, 14.210, 12.643),
}
