"""The array-module seam (issue 30): device resolution, its errors, and the chunk kernels on
the device route.

Host-side logic runs everywhere, with NumPy standing in for CuPy where the device route is
exercised (``numpy_as_cuda``: the route's row gather, one copy per chunk, results back on the
host). Tests marked ``gpu`` need CuPy and a CUDA device and are skipped without them; they
compare the CuPy route with the NumPy reference (Liu et al. 2019, Eq. 3.11-3.12) and run in
``pipelines/gpu_check.sh``.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp

from sphdist.cli import main
from sphdist.core import _device, graph, kernels, params
from sphdist.errors import DeviceError, ParameterError
from sphdist.jobs import fit

from ..reference import random_corpus


def _cuda_available() -> tuple[bool, bool]:
    """(CuPy imports, it sees a CUDA device)."""
    try:
        import cupy
    except Exception:
        return False, False
    try:
        return True, int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:
        return True, False


CUPY, CUDA = _cuda_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs CuPy and a CUDA device")


@pytest.fixture
def no_cupy(monkeypatch):
    """CuPy cannot be imported (as on CI), whether or not this machine has it."""
    for name in ("cupy", "cupyx", "cupyx.scipy", "cupyx.scipy.sparse"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def numpy_as_cuda(monkeypatch):
    """``device="cuda"`` takes the device route with NumPy/SciPy standing in for CuPy."""
    monkeypatch.setattr(_device, "cupy_module", lambda: np)
    monkeypatch.setattr(_device, "to_device", lambda x, device: x)
    monkeypatch.setattr(_device, "check_device", lambda device: device)


def _fake_cupy(monkeypatch, get_device_count):
    """A CuPy whose runtime answers ``getDeviceCount`` with ``get_device_count``."""
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDeviceCount=get_device_count))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    for name in ("cupyx", "cupyx.scipy", "cupyx.scipy.sparse"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))


# -- the parameter and its resolution -----------------------------------------------------------


def test_the_devices_are_one_list():
    assert _device.DEVICES == params.DEVICES
    assert params.PARAMS["device"].default == "cpu"
    assert not params.PARAMS["device"].resume  # a fit resumes on either device
    assert params.FitConfig.build(n_components=2, device="cuda").device == "cuda"


def test_unknown_device_is_a_parameter_error():
    with pytest.raises(ParameterError, match="device"):
        params.FitConfig.build(n_components=2, device="gpu")
    with pytest.raises(ValueError, match="device must be one of"):
        _device.check_device("gpu")


def test_cpu_needs_nothing(no_cupy):
    assert _device.check_device("cpu") == "cpu"


def test_cuda_without_cupy_says_how_to_install_it(no_cupy):
    with pytest.raises(DeviceError) as info:
        _device.check_device("cuda")
    message = str(info.value)
    assert "pip install 'sphdist[gpu]'" in message and "device='cpu'" in message  # keywords
    assert isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("count", [lambda: 0, lambda: (_ for _ in ()).throw(
    RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"))])
def test_cuda_without_a_device_says_so(monkeypatch, count):
    _fake_cupy(monkeypatch, count)
    with pytest.raises(DeviceError, match="no CUDA device is usable") as info:
        _device.check_device("cuda")
    assert "nvidia-smi" in str(info.value) and "device='cpu'" in str(info.value)


@pytest.mark.skipif(not CUPY or CUDA, reason="needs CuPy on a machine without a CUDA device")
def test_real_cupy_without_a_device_says_so():
    """The CUDA runtime's own answer (cudaErrorInsufficientDriver, no device) is refused."""
    with pytest.raises(DeviceError, match="no CUDA device is usable") as info:
        _device.check_device("cuda")
    assert "device='cpu'" in str(info.value)


def test_host_arrays_never_import_cupy(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    X = sp.csc_matrix(np.eye(3))
    for x in (X, np.zeros(2), 1.5):
        assert not _device.on_device(x)
        assert _device.to_host(x) is x
    assert _device.array_module(np.zeros(2)) is np
    assert _device.issparse(X) and not _device.issparse(np.zeros((2, 2)))
    assert _device.to_device(X, "cpu") is X
    assert "cupy" not in sys.modules


def test_out_of_memory_is_told_apart_by_the_type_module():
    class OutOfMemoryError(MemoryError):
        pass

    class CuSparseError(RuntimeError):
        pass

    OutOfMemoryError.__module__ = "cupy.cuda.memory"
    CuSparseError.__module__ = "cupy_backends.cuda.libs.cusparse"
    assert _device.is_out_of_memory(OutOfMemoryError("Out of memory allocating 1,024 bytes"))
    assert _device.is_out_of_memory(CuSparseError("CUSPARSE_STATUS_ALLOC_FAILED"))
    assert not _device.is_out_of_memory(CuSparseError("CUSPARSE_STATUS_INVALID_VALUE"))
    assert not _device.is_out_of_memory(MemoryError("host memory"))


def test_shared_copy_is_made_once_per_operand(monkeypatch):
    copies = []
    monkeypatch.setattr(_device, "to_device", lambda x, device: copies.append(x) or x.copy())
    monkeypatch.setattr(_device, "_SHARED", [None, None, None])
    U, W = np.ones((4, 2)), np.zeros((4, 2))
    first = _device.shared_copy(U, "cuda")
    assert _device.shared_copy(U, "cuda") is first  # the tasks of one pass share it
    assert _device.shared_copy(W, "cuda") is not first  # the next pass's U replaces it
    assert [id(x) for x in copies] == [id(U), id(W)]
    np.testing.assert_array_equal(first, U)


# -- the device route of the kernels, NumPy standing in for CuPy --------------------------------


def _dense_pass(X, U, V_prev, lam):
    """Liu et al. (2019) Eq. 3.12 and the partials of Eq. 3.11, dense NumPy."""
    q = 2 * (U.T @ X) + (0 if V_prev is None else (lam - 2) * V_prev)
    norms = np.linalg.norm(q, axis=0)
    V = q / np.where(norms == 0, 1, norms)
    V[:, norms == 0] = V_prev[:, norms == 0] if V_prev is not None else np.eye(len(U.T))[:, :1]
    return V, X @ V.T, V @ V.T


@pytest.mark.parametrize("partials", ["rows", "dense"])
@pytest.mark.parametrize("lam", [2.0, 3.0])
def test_device_route_matches_the_host_route_and_eq_3_11_3_12(numpy_as_cuda, partials, lam):
    X = random_corpus(80, 30, density=0.05, seed=1, n_empty=2)
    blocks = [X[:, :13], X[:, 13:14], X[:, 14:]]  # irregular, one chunk of one document
    U = kernels.random_orthonormal(80, 3, np.random.RandomState(0))
    V_prev = None
    if lam != 2.0:
        V_prev, _ = kernels.v_step(U.T @ X.toarray(), None, 2.0)
    prev = None if V_prev is None else [V_prev[:, :13], V_prev[:, 13:14], V_prev[:, 14:]]
    host = kernels.pass_block(blocks, U, prev, lam=lam, partials=partials)
    dev = kernels.pass_block(blocks, U, prev, lam=lam, partials=partials, device="cuda")
    V_ref, XVt_ref, VVt_ref = _dense_pass(X.toarray(), U, V_prev, lam)
    for part in (host, dev):
        V = np.concatenate(part["V"], axis=1)
        np.testing.assert_allclose(V, V_ref, atol=1e-14)
        np.testing.assert_allclose(graph.densify(part["XVt"]), XVt_ref, atol=1e-13)
        np.testing.assert_allclose(part["VVt"], VVt_ref, atol=1e-13)
        assert part["n_degenerate"] == (2 if V_prev is None else 0)  # q = 0: the empty ones
        assert part["sq_norm_X"] == pytest.approx(sp.linalg.norm(X) ** 2, rel=1e-14)
    # the same arithmetic in the same order: bitwise the host route
    np.testing.assert_array_equal(np.concatenate(dev["V"], axis=1),
                                  np.concatenate(host["V"], axis=1))
    np.testing.assert_array_equal(graph.densify(dev["XVt"]), graph.densify(host["XVt"]))


def test_device_embed_block_is_the_pass_v(numpy_as_cuda):
    X = random_corpus(50, 12, density=0.1, seed=2, n_empty=1)
    U = kernels.random_orthonormal(50, 4, np.random.RandomState(1))
    V = kernels.embed_block(X, U, device="cuda")
    np.testing.assert_array_equal(V, kernels.pass_block([X], U, device="cuda")["V"][0])


def test_estimator_device_route_reaches_the_cpu_fit(numpy_as_cuda):
    from sphdist import SphericalPCA

    X = random_corpus(60, 90, density=0.1, seed=4, n_empty=0).T.tocsr()
    kwargs = dict(n_components=3, random_state=0, chunk_size=25, tol=0.0, max_iter=5)
    cpu = SphericalPCA(**kwargs).fit(X)
    cuda = SphericalPCA(device="cuda", **kwargs).fit(X)
    np.testing.assert_array_equal(cuda.objective_, cpu.objective_)
    np.testing.assert_array_equal(cuda.embedding_, cpu.embedding_)


def test_estimator_cuda_without_cupy_fails_before_any_work(no_cupy):
    from sphdist import SphericalPCA

    with pytest.raises(DeviceError, match="sphdist\\[gpu\\]"):
        SphericalPCA(device="cuda").fit(np.eye(4))
    with pytest.raises(ParameterError, match="device"):
        SphericalPCA(device="tpu").fit(np.eye(4))


# -- the command line: one Error line, the checkpoint intact, the resume printed ----------------


# runner, corpus and connects: tests/_fit_cli.py (fixtures of every test module)


def _error_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("command", ["fit", "transform"])
def test_cli_device_cuda_without_cupy_is_one_error_line(runner, corpus, connects, no_cupy,
                                                        tmp_path, command):
    if command == "fit":
        args = ["fit", "-i", str(corpus), "-o", str(tmp_path / "m.zarr"), "-r", "2"]
    else:
        model = tmp_path / "m.zarr"
        assert runner.invoke(main, ["--quiet", "fit", "-i", str(corpus), "-o", str(model),
                                    "-r", "2", "--max-iter", "2"]).exit_code == 0
        connects.clear()
        args = ["transform", "-m", str(model), "-i", str(corpus), "-o", str(tmp_path / "e.zarr")]
    result = runner.invoke(main, ["--quiet", *args, "--device", "cuda"])
    assert result.exit_code == 1
    line = _error_line(result)
    assert "pip install 'sphdist[gpu]'" in line and "--device cpu" in line, line
    assert "(device='cpu')" not in line  # the command line shows the flag alone
    assert connects == []  # refused before any cluster starts
    assert not (tmp_path / ("m.zarr" if command == "fit" else "e.zarr")).exists()


def test_device_out_of_memory_keeps_the_checkpoint_and_prints_the_resume(
    runner, corpus, connects, numpy_as_cuda, monkeypatch, tmp_path
):
    from sphdist.io.model import open_model

    class OutOfMemoryError(MemoryError):
        pass

    OutOfMemoryError.__module__ = "cupy.cuda.memory"
    out, reference = tmp_path / "m.zarr", tmp_path / "ref.zarr"
    args = ["-r", "2", "--max-iter", "6", "--tol", "0"]
    assert runner.invoke(main, ["--quiet", "fit", "-i", str(corpus), "-o", str(reference),
                                *args]).exit_code == 0
    save, pass_onto, full = fit.save_checkpoint, kernels.pass_onto, []

    def saved(path, state, **kwargs):  # the device fills up after the checkpoint of 3
        save(path, state, **kwargs)
        full.append(state.iteration == 3)

    def passes(*a, **k):
        if any(full):
            raise OutOfMemoryError("Out of memory allocating 209,715,200 bytes")
        return pass_onto(*a, **k)

    monkeypatch.setattr(fit, "save_checkpoint", saved)
    monkeypatch.setattr(kernels, "pass_onto", passes)
    result = runner.invoke(main, ["--quiet", "fit", "-i", str(corpus), "-o", str(out), *args,
                                  "--device", "cuda", "--checkpoint-interval", "0"])
    assert result.exit_code == 1
    line = _error_line(result)
    assert "ran out of memory" in line and "iteration 3, intact" in line, line
    on_cpu, on_cuda = (word for word in line.split("`")[1::2] if word.startswith("sphdist fit"))
    assert "--resume" in on_cpu and "--device" not in on_cpu, line
    assert "--resume" in on_cuda and "--device cuda" in on_cuda, line
    assert open_model(out).n_iter == 3
    monkeypatch.undo()
    again = runner.invoke(main, ["--quiet", *on_cpu.split()[1:]])
    assert again.exit_code == 0, again.output
    # resumed on the CPU: the same iterates as the uninterrupted fit (one model format)
    np.testing.assert_array_equal(open_model(out).objective, open_model(reference).objective)


def test_transform_on_the_device_route_and_out_of_memory(runner, corpus, connects,
                                                        numpy_as_cuda, monkeypatch, tmp_path):
    from sphdist.io.embedding import open_embedding
    from sphdist.io.model import open_model

    model = tmp_path / "m.zarr"
    assert runner.invoke(main, ["--quiet", "fit", "-i", str(corpus), "-o", str(model),
                                "-r", "2", "--max-iter", "3"]).exit_code == 0
    ok = runner.invoke(main, ["--quiet", "transform", "-m", str(model), "-i", str(corpus),
                              "-o", str(tmp_path / "e.zarr"), "--device", "cuda"])
    assert ok.exit_code == 0, ok.output
    V = np.asarray(open_embedding(tmp_path / "e.zarr").V)
    np.testing.assert_array_equal(V, np.asarray(open_model(model).V()))  # Eq. 3.12, lam = 2

    class OutOfMemoryError(MemoryError):
        pass

    OutOfMemoryError.__module__ = "cupy.cuda.memory"

    def full(*args, **kwargs):
        raise OutOfMemoryError("Out of memory allocating 1,048,576 bytes")

    monkeypatch.setattr(kernels, "v_step", full)
    out = tmp_path / "f.zarr"
    result = runner.invoke(main, ["--quiet", "transform", "-m", str(model), "-i", str(corpus),
                                  "-o", str(out), "--device", "cuda"])
    assert result.exit_code == 1
    line = _error_line(result)
    assert "ran out of memory" in line and "nothing was written" in line, line
    again = next(w for w in line.split("`")[1::2] if w.startswith("sphdist transform"))
    assert not out.exists() and not list(tmp_path.glob("f.zarr*")), list(tmp_path.iterdir())
    monkeypatch.undo()
    assert runner.invoke(main, ["--quiet", *again.split()[1:]]).exit_code == 0
    np.testing.assert_array_equal(np.asarray(open_embedding(out).V), V)


# -- on a CUDA device (pipelines/gpu_check.sh) --------------------------------------------------


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gpu_pass_matches_the_numpy_reference(dtype):
    X = random_corpus(400, 300, density=0.03, seed=5, n_empty=3)
    blocks = [X[:, :128], X[:, 128:129], X[:, 129:]]
    U = kernels.random_orthonormal(400, 8, np.random.RandomState(0))
    host = kernels.pass_block(blocks, U, dtype=dtype)
    dev = kernels.pass_block(blocks, U, dtype=dtype, device="cuda")
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for key in ("XVt", "VVt"):
        np.testing.assert_allclose(graph.densify(dev[key]), graph.densify(host[key]), atol=tol)
    np.testing.assert_allclose(np.concatenate(dev["V"], 1), np.concatenate(host["V"], 1),
                               atol=tol)
    assert dev["n_degenerate"] == host["n_degenerate"] == 3
    assert isinstance(dev["VVt"], np.ndarray) and dev["V"][0].dtype == dtype


@pytest.mark.gpu
@gpu
def test_gpu_pass_is_deterministic():
    """A GPU resume is bitwise a GPU uninterrupted run iff a pass repeats bitwise."""
    X = random_corpus(2000, 3000, density=0.01, seed=6, n_empty=0)
    blocks = [X[:, i:i + 1000] for i in range(0, 3000, 1000)]
    U = kernels.random_orthonormal(2000, 16, np.random.RandomState(1))
    a, b = (kernels.pass_block(blocks, U, device="cuda") for _ in range(2))
    np.testing.assert_array_equal(graph.densify(a["XVt"]), graph.densify(b["XVt"]))
    np.testing.assert_array_equal(np.concatenate(a["V"], 1), np.concatenate(b["V"], 1))
    # the final embedding's kernel (full rows of U) gives the pass's V (U on a block's rows)
    np.testing.assert_array_equal(kernels.embed_block(blocks[1], U, device="cuda"), a["V"][1])


def _fits_and_scores(corpus, devices):
    """SphericalPCA on a stored corpus on each device; k-means accuracy and NMI, 3 digits."""
    import dask
    from sklearn.cluster import KMeans

    from sphdist import SphericalPCA
    from sphdist.io.corpus import open_input
    from sphdist.metrics import clustering_accuracy, normalized_mutual_info

    source = open_input(corpus)
    X = sp.hstack(dask.compute(*source.to_dask().to_delayed().ravel()), format="csc").T.tocsr()
    labels = np.asarray(source.labels)
    out = {}
    for device in devices:
        model = SphericalPCA(n_components=5, random_state=0, device=device).fit(X)
        pred = KMeans(n_clusters=5, n_init=10, random_state=0).fit_predict(model.embedding_)
        out[device] = (model, (round(clustering_accuracy(labels, pred), 3),
                               round(normalized_mutual_info(labels, pred), 3)))
    return out


def test_fits_and_scores_helper_on_the_device_route(numpy_as_cuda, corpus):
    """The helper of the 20 Newsgroups GPU test, on the CPU: the two routes agree bitwise."""
    fits = _fits_and_scores(corpus, ("cpu", "cuda"))
    np.testing.assert_array_equal(fits["cuda"][0].objective_, fits["cpu"][0].objective_)
    assert fits["cuda"][1] == fits["cpu"][1] and 0 < fits["cpu"][1][0] <= 1


@pytest.mark.gpu
@gpu
def test_gpu_fit_agrees_with_the_cpu_fit_on_20_newsgroups(newsgroups5):
    fits = _fits_and_scores(newsgroups5, ("cpu", "cuda"))
    (cpu, cpu_scores), (cuda, cuda_scores) = fits["cpu"], fits["cuda"]
    assert cuda.n_iter_ == cpu.n_iter_
    np.testing.assert_allclose(cuda.objective_, cpu.objective_, rtol=1e-9)
    assert cuda_scores == cpu_scores  # accuracy and NMI to 3 digits


def _resumed_across_devices(corpus, tmp_path):
    """A fit of 6 iterations uninterrupted on the CPU, and cuda 2 -> cpu 4 -> cuda 6."""
    from sphdist.io.model import open_model
    from sphdist.jobs import run
    from sphdist.jobs.fit import FitRequest

    common = dict(n_components=2, tol=0.0, callback=None)
    ref = run(FitRequest(corpus, tmp_path / "ref.zarr", max_iter=6, **common))
    out = tmp_path / "m.zarr"
    run(FitRequest(corpus, out, max_iter=2, device="cuda", **common))
    run(FitRequest(corpus, out, max_iter=4, resume=True, device="cpu", **common))
    run(FitRequest(corpus, out, max_iter=6, resume=True, device="cuda", **common))
    return open_model(out), ref


def test_a_checkpoint_resumes_on_either_device(numpy_as_cuda, corpus, tmp_path):
    """device is no resume parameter: the job resumes a cuda checkpoint on the cpu and back."""
    model, ref = _resumed_across_devices(corpus, tmp_path)
    assert model.n_iter == 6 and model.params["device"] == "cuda"
    np.testing.assert_array_equal(model.objective, ref.objective)  # NumPy stands in: bitwise


@pytest.mark.gpu
@gpu
def test_gpu_checkpoint_resumes_on_the_cpu_and_back(corpus, tmp_path):
    model, ref = _resumed_across_devices(corpus, tmp_path)
    assert model.n_iter == 6
    np.testing.assert_allclose(model.objective, ref.objective, rtol=1e-9)
