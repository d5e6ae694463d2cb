"""torch.nn.parallel.DistributedDataParallel over GroupedLinear, two CPU
processes (gloo): each rank's gradient is the mean of the ranks' own
gradients, computed here one by one without DDP."""

import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import grouped_linear

SPLITS = [5, 0, 7]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _module():
    torch.manual_seed(0)  # the same parameters on every rank
    return grouped_linear.GroupedLinear(3, 16, 8, device="cpu")  # (default: cuda where present)


def _rank_input(rank):
    return torch.randn(12, 16, generator=torch.Generator().manual_seed(100 + rank))


def _rank(rank, world, port, results):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        module = _module()
        model = torch.nn.parallel.DistributedDataParallel(module)
        model(_rank_input(rank), SPLITS).sum().backward()
        results.put((rank, module.weight.grad.numpy().copy(), module.bias.grad.numpy().copy()))
        # Teardown in order: DDP's reducer (which holds the process group)
        # first, then a barrier, so that neither rank destroys its group, or
        # rank 0 its rendezvous store, while the other still talks to it. A
        # rank once aborted in teardown ("terminate called without an active
        # exception") after its gradients had arrived, in a loaded CI run.
        del model
        dist.barrier()
    except Exception:  # reported to the test at once, not as a queue timeout
        results.put((rank, traceback.format_exc(), None))
        raise
    finally:
        dist.destroy_process_group()


def test_ddp_averages_the_ranks_gradients():
    world = 2
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()  # the rendezvous, one for both ranks
    procs = [ctx.Process(target=_rank, args=(r, world, port, results)) for r in range(world)]
    for p in procs:
        p.start()
    got = sorted((results.get(timeout=120) for _ in procs), key=lambda t: t[0])
    for rank, dw, _ in got:
        assert not isinstance(dw, str), f"rank {rank} failed:\n{dw}"
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    module = _module()
    expected_w, expected_b = 0, 0
    for rank in range(world):
        module.zero_grad(set_to_none=True)
        module(_rank_input(rank), SPLITS).sum().backward()
        expected_w = expected_w + module.weight.grad / world
        expected_b = expected_b + module.bias.grad / world
    for rank, dw, db in got:
        torch.testing.assert_close(torch.from_numpy(dw), expected_w, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(torch.from_numpy(db), expected_b, rtol=1e-6, atol=1e-6)
