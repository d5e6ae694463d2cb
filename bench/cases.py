"""Benchmark cases (bench_cases.json) and the routing that splits T rows into G groups."""

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

# Searched in this order: the shared protocol beside the checkout, a shared/
# folder inside it, then the copy kept here so the benchmark also runs on a
# machine where ../shared is absent (the GPU machine receives the repo alone).
CASES_FILE_CANDIDATES = (
    REPO_ROOT.parent / "shared" / "bench_cases.json",
    REPO_ROOT / "shared" / "bench_cases.json",
    BENCH_DIR / "bench_cases.json",
)

ROUTINGS = ("uniform", "skewed")
# Diagnostics may also route "uniform_unaligned" and "uniform_sector_aligned"
# (make_splits: FP8 column-wise group starts off 128-byte lines); the
# benchmark's sections run ROUTINGS only.
ALL_ROUTINGS = ROUTINGS + ("uniform_unaligned", "uniform_sector_aligned")
ROLES = ("fwd", "dgrad", "wgrad")
# The sm90 engine's tile orders (ops.set_tile_order; "" is its automatic choice).
TILE_ORDERS = ("along_m", "along_n", "shorter_side")


@dataclass(frozen=True)
class ThroughputCase:
    name: str
    G: int
    K: int
    N: int
    T: int

    def flops(self) -> int:
        # Every role does the same 2·T·K·N multiply-adds (DESIGN.md).
        return 2 * self.T * self.K * self.N


@dataclass(frozen=True)
class HostCase:
    name: str
    G: int
    K: int
    N: int
    rows_per_group: int

    @property
    def T(self) -> int:
        return self.G * self.rows_per_group


# Without a GPU the default is these small shapes: the CPU reference engine
# is a plain triple loop, so the JSON's real shapes would take hours there.
CPU_THROUGHPUT_CASES = (
    ThroughputCase("cpu_G4", G=4, K=256, N=256, T=512),
    ThroughputCase("cpu_G16", G=16, K=256, N=256, T=1024),
)


@dataclass
class CaseFile:
    path: Path
    throughput: List[ThroughputCase]
    host: List[HostCase]
    routing_text: Dict[str, str]


def find_cases_file(explicit: Optional[str] = None) -> Path:
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise FileNotFoundError(f"--cases-file {explicit}: no such file")
        return path
    for path in CASES_FILE_CANDIDATES:
        if path.is_file():
            return path
    raise FileNotFoundError("bench_cases.json not found; looked at "
                            + ", ".join(str(p) for p in CASES_FILE_CANDIDATES))


def load_cases(explicit: Optional[str] = None) -> CaseFile:
    path = find_cases_file(explicit)
    data = json.loads(path.read_text())
    throughput = [ThroughputCase(c["name"], int(c["G"]), int(c["K"]), int(c["N"]), int(c["T"]))
                  for c in data["throughput_cases"]]
    host = [HostCase(c["name"], int(c["G"]), int(c["K"]), int(c["N"]), int(c["rows_per_group"]))
            for c in data["host_overhead_cases"]]
    return CaseFile(path, throughput, host, dict(data.get("routing", {})))


def uniform_splits(num_groups: int, total_rows: int) -> List[int]:
    """m_i = T // G, remainder to the last group."""
    splits = [total_rows // num_groups] * num_groups
    splits[-1] += total_rows - sum(splits)
    return splits


def skewed_splits(num_groups: int, total_rows: int) -> List[int]:
    """Exactly bench_cases.json's rule: u = torch.rand(G, generator seeded 1);
    w = u**3 + 0.02; m_i = floor(w_i / sum(w) * T); remainder to the last group."""
    u = torch.rand(num_groups, generator=torch.Generator().manual_seed(1))
    w = u ** 3 + 0.02
    shares = w / w.sum() * total_rows
    splits = [int(math.floor(v)) for v in shares.tolist()]
    splits[-1] += total_rows - sum(splits)
    if splits[-1] < 0:  # float rounding could only do this for absurd T; fail loudly
        raise ValueError(f"skewed routing of T={total_rows} over G={num_groups} went negative")
    return splits


def shifted_uniform_splits(num_groups: int, total_rows: int, shift: int) -> List[int]:
    """Uniform, but the first group `shift` rows short and the last `shift`
    long: each later group's FP8 column-wise copies (core/fp8/fp8_tensor.h,
    group starts 16-aligned) start `shift` bytes before a 128-byte line,
    where uniform routing's start on one at the benchmark's shapes, with
    uniform's 128-deep k-tiles but for the last group's one more."""
    splits = uniform_splits(num_groups, total_rows)
    if num_groups > 1 and splits[0] >= shift:
        splits[0] -= shift
        splits[-1] += shift
    return splits


def uniform_unaligned_splits(num_groups: int, total_rows: int) -> List[int]:
    """Group starts 16 bytes before a line, so also inside a 32-byte sector:
    against uniform it separates misaligned group starts from the rest of
    what skewed routing changes."""
    return shifted_uniform_splits(num_groups, total_rows, 16)


def uniform_sector_aligned_splits(num_groups: int, total_rows: int) -> List[int]:
    """Group starts 32 bytes before a line: on a sector boundary, off a line.
    Against uniform_unaligned it tells whether 32-byte group starts would
    do or only 128-byte ones (fp8::kGroupAlign)."""
    return shifted_uniform_splits(num_groups, total_rows, 32)


def make_splits(routing: str, num_groups: int, total_rows: int) -> List[int]:
    if routing == "uniform":
        return uniform_splits(num_groups, total_rows)
    if routing == "skewed":
        return skewed_splits(num_groups, total_rows)
    if routing == "uniform_unaligned":
        return uniform_unaligned_splits(num_groups, total_rows)
    if routing == "uniform_sector_aligned":
        return uniform_sector_aligned_splits(num_groups, total_rows)
    raise ValueError(f"routing {routing!r}: expected one of {ALL_ROUTINGS}")


def splits_summary(splits: Sequence[int]) -> Dict[str, int]:
    return {"min": min(splits), "max": max(splits), "empty_groups": sum(1 for m in splits if m == 0)}


def csv_list(text: Optional[str], allowed=None, what="value") -> Optional[List[str]]:
    """A comma-separated argument as a list (None when not given); with
    `allowed`, an unknown item exits naming the argument and the choices."""
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if allowed is not None:
        bad = [t for t in items if t not in allowed]
        if bad:
            raise SystemExit(f"{what}: unknown {bad}; expected some of {list(allowed)}")
    return items


def positive_ints(text: str) -> Optional[List[int]]:
    """A comma-separated list of positive integers ("8,32,128"), or None
    when it is empty or holds anything else."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        return None
    return values if values and min(values) >= 1 else None


def checked_counts(tool: str, lists: Sequence = (),
                   counts: Sequence = ()) -> Optional[Dict[str, List[int]]]:
    """A diagnostic's numeric arguments, checked before it looks for a GPU:
    `lists` as (option, text) pairs of positive integer lists, `counts` as
    (option, value) pairs of positive counts. The lists parsed, by option;
    or None, after printing to stderr the first bad one and what it expects."""
    parsed = {}
    for option, text in lists:
        parsed[option] = positive_ints(text)
        if parsed[option] is None:
            print(f"{tool}: {option}: expected positive integers like 8,32,128, got {text!r}",
                  file=sys.stderr)
            return None
    for option, value in counts:
        if value < 1:
            print(f"{tool}: {option}: expected a positive count", file=sys.stderr)
            return None
    return parsed


def select_throughput_cases(case_file: CaseFile, on_gpu: bool,
                            names: Optional[Sequence[str]]) -> List[ThroughputCase]:
    """The JSON cases on a GPU, the small CPU cases otherwise; `names` picks
    from both lists (so a JSON case can still be run on the CPU on purpose)."""
    if not names:
        return list(case_file.throughput) if on_gpu else list(CPU_THROUGHPUT_CASES)
    known = {c.name: c for c in list(case_file.throughput) + list(CPU_THROUGHPUT_CASES)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; known: {sorted(known)}")
    return [known[n] for n in names]
