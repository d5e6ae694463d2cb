"""The grouping of the sm90 kernel sources into unity units (cmake/sm90_unity.cmake).

Runs the CMake function in script mode on made-up kernel names: every
kernel lands in exactly one unit, in name order, with at most the asked-for
number a unit and sizes that differ by at most one; one kernel a unit gives
back the sources themselves; a bad setting is refused, naming the option.
"""
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CMAKE = shutil.which("cmake")
pytestmark = pytest.mark.skipif(CMAKE is None, reason="cmake is not installed")


def group(tmp_path, names, per_unit):
    """Runs gl_sm90_unity_sources on `names`; returns (returncode, output, units)."""
    script = tmp_path / "group.cmake"
    sources = " ".join(f"/somewhere/kernels/{n}.cu" for n in names)
    script.write_text(
        f'set(CMAKE_CURRENT_BINARY_DIR "{tmp_path.as_posix()}")\n'
        f'set(GL_SM90_KERNELS_PER_TU "{per_unit}" CACHE STRING "")\n'
        f'include("{(ROOT / "cmake" / "sm90_unity.cmake").as_posix()}")\n'
        f"gl_sm90_unity_sources(out kernels {sources})\n"
        'message(STATUS "units=${out}")\n')
    run = subprocess.run([CMAKE, "-P", str(script)], capture_output=True, text=True, timeout=60)
    output = run.stdout + run.stderr
    match = re.search(r"units=(.*)", output)
    units = [u for u in match.group(1).strip().split(";") if u] if match else []
    return run.returncode, output, units


def included(unit):
    return re.findall(r'#include "core/cuda/sm90/kernels/(\w+)\.cu"', pathlib.Path(unit).read_text())


@pytest.mark.parametrize("count,per_unit", [(62, 6), (13, 6), (6, 6), (7, 3), (5, 2), (1, 6)])
def test_every_kernel_in_exactly_one_unit_in_name_order(tmp_path, count, per_unit):
    names = [f"k{i:03d}" for i in range(count)][::-1]  # given out of order
    rc, output, units = group(tmp_path, names, per_unit)
    assert rc == 0, output
    contents = [included(u) for u in units]
    assert [n for c in contents for n in c] == sorted(names)
    sizes = [len(c) for c in contents]
    assert max(sizes) <= per_unit and max(sizes) - min(sizes) <= 1
    assert len(units) == -(-count // per_unit)
    assert all(pathlib.Path(u).parent == tmp_path / "sm90_unity" for u in units)


def test_auto_takes_at_most_six_a_unit(tmp_path):
    rc, output, units = group(tmp_path, [f"k{i:02d}" for i in range(62)], "AUTO")
    assert rc == 0, output
    sizes = [len(included(u)) for u in units]
    assert sum(sizes) == 62 and max(sizes) <= 6


def test_one_a_unit_gives_back_the_sources(tmp_path):
    rc, output, units = group(tmp_path, ["b", "a", "c"], 1)
    assert rc == 0, output
    assert units == [f"/somewhere/kernels/{n}.cu" for n in ("a", "b", "c")]
    assert not (tmp_path / "sm90_unity").exists()


def test_reconfiguring_leaves_unchanged_units_untouched(tmp_path):
    names = [f"k{i:02d}" for i in range(12)]
    assert group(tmp_path, names, 6)[0] == 0
    units = sorted((tmp_path / "sm90_unity").iterdir())
    stamps = [u.stat().st_mtime_ns for u in units]
    rc, output, _ = group(tmp_path, names, 6)
    assert rc == 0, output
    # The same text is not written again, so the build does not recompile it.
    assert [u.stat().st_mtime_ns for u in units] == stamps
    rc, output, again = group(tmp_path, names + ["k99"], 6)
    assert rc == 0, output
    assert [n for u in again for n in included(u)] == names + ["k99"]


@pytest.mark.parametrize("bad", ["0", "x", "-2", "6.5"])
def test_bad_setting_is_refused_naming_the_option(tmp_path, bad):
    rc, output, _ = group(tmp_path, ["a", "b"], bad)
    assert rc != 0
    assert "GL_SM90_KERNELS_PER_TU" in output and f"got '{bad}'" in output
    assert "expected AUTO or a positive whole number" in output
