"""Shared fixtures of the grouped_linear Python tests.

* `device`: every numerics test runs on "cpu" (once per CPU engine) and on
  "cuda" once per CUDA engine from `grouped_linear.ops.engine_names("cuda")`,
  each engine pinned with `ops.set_engine_override` for the duration of the
  test and restored to automatic choice afterwards. Without a GPU the "cuda"
  case is collected and skipped, so the summary shows it.
* `gen`: a torch.Generator seeded per test (from the test id, or from the
  environment variable GL_TEST_SEED); the seed is printed, and appended to the
  report of a failed test.

Tolerances (relative error ||out - ref|| / ||ref||, the reference computed in
float64 on the CPU from the very same low-precision values, so that only the
library's own rounding and accumulation are measured):

* float32: 1e-5. Products accumulate in float32 (unit roundoff 2^-24 ~ 6e-8);
  with K, N, T below a few hundred the accumulated relative error stays well
  below 1e-5. On CUDA this assumes true fp32 GEMMs: cuBLAS with
  CUBLAS_DEFAULT_MATH (the engine sets it) and no TF32, whose 10-bit mantissa
  would give ~1e-3 and fail this bound, as it should.
* float16: 2e-3. Each result (output, dX, dW, db) is computed in float32 and
  rounded once to float16: half an ulp is 2^-11 ~ 4.9e-4 relative; the float32
  accumulation adds little. 2e-3 leaves a 4x margin, while a wrong operand,
  row, group or a missing bias gives errors of order 0.1 to 1.
* bfloat16: 1e-2. bfloat16 keeps 8 significant bits (7 stored): the ulp is
  2^-7 relative and the single output rounding costs at most half of it,
  2^-8 ~ 3.9e-3 (norm-wise ~2e-3 is typical); 1e-2 leaves room for the
  accumulation and still catches any wrong row, group or operand.
"""

import atexit
import os
import shutil
import tempfile
import zlib

# torch.compile's on-disk caches key a compiled graph on the graph, not on
# this extension's build, so one left by an older build (whose ops' meta
# shapes differed: the FP8 column-wise copies' width, say) would run stale
# code. Each test session compiles into a fresh cache of its own.
_INDUCTOR_CACHE = tempfile.mkdtemp(prefix="gl_test_inductor_")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE
atexit.register(shutil.rmtree, _INDUCTOR_CACHE, ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

import grouped_linear  # noqa: E402
from grouped_linear import ops  # noqa: E402

TOLERANCE = {
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1e-2,
}

# The reference runs on the CPU in float64; keep any torch CUDA matmul in tests
# (there is none in the reference path) free of TF32 too.
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def _device_params():
    params = []
    for name in ops.engine_names("cpu"):
        params.append(pytest.param(("cpu", name), id=f"cpu-{name}"))
    if torch.cuda.is_available() and grouped_linear.with_cuda:
        names = ops.engine_names("cuda")
        for name in names:
            params.append(pytest.param(("cuda", name), id=f"cuda-{name}"))
        if not names:
            params.append(pytest.param(("cuda", None), id="cuda",
                                       marks=pytest.mark.skip(reason="no CUDA engine built")))
    else:
        reason = ("CUDA is not available" if not torch.cuda.is_available()
                  else "grouped_linear was built without CUDA")
        params.append(pytest.param(("cuda", None), id="cuda",
                                   marks=pytest.mark.skip(reason=reason)))
    return params


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", _device_params(), indirect=True)
    if "cuda_engine" in metafunc.fixturenames:
        params = [p for p in _device_params() if p.values[0][0] == "cuda"]
        metafunc.parametrize("cuda_engine", params, indirect=True)


@pytest.fixture
def device(request):
    """'cpu' or 'cuda', with the parametrised engine pinned for the test."""
    device_type, engine = request.param
    ops.set_engine_override(device_type, engine)
    request.addfinalizer(lambda: ops.set_engine_override(device_type, ""))
    assert grouped_linear.engine_for(device_type) == engine
    return device_type


@pytest.fixture
def cuda_engine(request):
    """For the CUDA-only tests: the name of the pinned CUDA engine (device 'cuda')."""
    device_type, engine = request.param
    ops.set_engine_override(device_type, engine)
    request.addfinalizer(lambda: ops.set_engine_override(device_type, ""))
    return engine


@pytest.fixture
def cuda_device():
    """For the CUDA-only tests: 'cuda', skipping where there is none."""
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if not grouped_linear.with_cuda:
        pytest.skip("grouped_linear was built without CUDA")
    return "cuda"


@pytest.fixture(params=["along_m", "along_n"])
def tile_order(request):
    """The order in which the sm90 engine's CTAs walk each group's tiles
    (ops.set_tile_order) for the test: along M and along N (the automatic
    choice takes one of them per launch); every kernel must be right under both."""
    if not grouped_linear.with_cuda or "sm90_grouped" not in ops.engine_names("cuda"):
        pytest.skip("grouped_linear was built without the sm90_grouped engine")
    ops.set_tile_order("cuda", "sm90_grouped", request.param)
    request.addfinalizer(lambda: ops.set_tile_order("cuda", "sm90_grouped", ""))
    return request.param


@pytest.fixture(autouse=True)
def _no_engine_override_leaks():
    """Every test starts and ends with automatic engine choice."""
    yield
    for device_type in ("cpu", "cuda"):
        ops.set_engine_override(device_type, "")


@pytest.fixture
def seed(request):
    env = os.environ.get("GL_TEST_SEED")
    value = int(env) if env else zlib.crc32(request.node.nodeid.encode()) & 0x7FFFFFFF
    request.node.gl_seed = value
    print(f"seed={value} (rerun with GL_TEST_SEED={value})")
    return value


@pytest.fixture
def gen(seed):
    """A CPU generator for the test's random inputs (moved to the device after)."""
    g = torch.Generator()
    g.manual_seed(seed)
    return g


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    value = getattr(item, "gl_seed", None)
    if value is not None and report.failed:
        report.sections.append(("random seed", f"seed={value}; rerun with GL_TEST_SEED={value}"))
