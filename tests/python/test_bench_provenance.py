"""Which commit a benchmark record names: the installed package says what it
was built from (cmake/build_info.cmake), and bench.meta prefers GL_COMMIT,
then that, then the checkout's git, so a record made with a package built
elsewhere names the code that ran, not the measuring machine's checkout."""

import re
import sys
from pathlib import Path

import pytest

import grouped_linear

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import meta  # noqa: E402

COMMIT = re.compile(r"^[0-9a-f]{7,40}(-dirty)?$")


def test_installed_package_names_the_commit_it_was_built_from():
    # Every build through CMake writes _build_info.py; a build from a git
    # checkout (CI's clone included) knows its commit.
    built = Path(grouped_linear.__file__).with_name("_build_info.py")
    assert built.is_file(), f"{built} missing: the package was not installed by CMake"
    info = grouped_linear.build_info
    assert set(info) == {"commit", "sm90_tuning"}
    assert isinstance(info["sm90_tuning"], bool)
    assert info["commit"] == "unknown" or COMMIT.match(info["commit"]), info


@pytest.mark.parametrize("env, built, tree, expected", [
    ("abc1234", "def5678", "0123456", "abc1234"),  # set by whoever copied the code
    (None, "def5678", "0123456", "def5678"),       # the package's own commit
    (None, "def5678-dirty", "0123456", "def5678-dirty"),
    (None, "unknown", "0123456", "0123456"),       # a package that does not say
])
def test_measured_commit_prefers_env_then_package_then_checkout(monkeypatch, env, built, tree,
                                                                expected):
    if env is None:
        monkeypatch.delenv("GL_COMMIT", raising=False)
    else:
        monkeypatch.setenv("GL_COMMIT", env)
    monkeypatch.setattr(grouped_linear, "build_info", {"commit": built, "sm90_tuning": False})
    monkeypatch.setattr(meta, "tree_commit", lambda: tree)
    assert meta.measured_commit() == expected


def test_meta_records_package_and_checkout_commits(monkeypatch):
    import torch
    monkeypatch.delenv("GL_COMMIT", raising=False)
    monkeypatch.setattr(grouped_linear, "build_info", {"commit": "def5678", "sm90_tuning": True})
    monkeypatch.setattr(meta, "tree_commit", lambda: "0123456")
    record = meta.collect(torch.device("cpu"), ["grouped_linear"], "host")
    assert record["commit"] == "def5678"
    assert record["package_build_commit"] == "def5678"
    assert record["package_sm90_tuning"] is True
    assert record["tree_commit"] == "0123456"


def test_tile_order_is_recorded_and_refused_where_it_cannot_apply(capsys):
    import torch
    from bench import __main__ as bench_main
    cpu = torch.device("cpu")
    assert bench_main.apply_tile_order(None, cpu) == "automatic"
    with pytest.raises(SystemExit, match="--tile-order: applies to the sm90_grouped engine"):
        bench_main.apply_tile_order("along_n", cpu)
    with pytest.raises(SystemExit):
        bench_main.parse_args(["--tile-order", "diagonal"])
    assert "invalid choice: 'diagonal'" in capsys.readouterr().err
    assert bench_main.parse_args(["--tile-order", "shorter_side"]).tile_order == "shorter_side"
