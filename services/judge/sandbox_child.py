"""The sandbox child: `python -m services.judge.sandbox_child` (started by sandbox.py, job on stdin).

Reads the job from stdin (there is no job file to find), raises its walls (services.judge.
sandbox_walls), imports what the judge needs, snapshots what must not be patched, then loads the
candidate's kernels behind its op family's wrapper, runs the parent's cases (services.judge.run_cases),
times it on a GPU (or stresses it on CPU), runs the first cases again, and writes the outputs to
`outputs.pt` and its answer (facts, timing figures, walls) to an inherited, already unlinked file
descriptor. It decides nothing: the parent compares the outputs with references it computed itself
(services.judge.verdict). Whatever happens, it writes an answer.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from services.judge import gpu_fence
from services.judge.sandbox import FIRST_PASS_FILE, JUDGE_CACHE, OUTPUTS_FILE
from services.judge.sandbox_walls import (
    AuditWall,
    WallReport,
    drop_root,
    enter_network_namespace,
    install_audit_wall,
    processes_allowed,
    set_limits,
)

CPU_STRESS_CALLS = 48  # CPU stands in for the GPU's timing calls with this many calls before the re-check


def _prepare(job: dict):
    """Everything imported before the audit wall goes up (after it, the judge's own files are unreadable)."""
    import numpy  # noqa: F401  (the interpreter's, imported before the wall)
    import torch
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from services.core import kernels  # noqa: F401
    from services.core.pb import events_pb2 as pb  # noqa: F401
    from services.judge import (  # noqa: F401
        cases,
        module_factory,
        poison,
        run_cases,
        subjects,
        tamper,
    )
    from services.ops import family, judging

    judging(job["family"])  # the family's cases, oracle and subject
    if job["device"] == "cuda":
        import triton.testing  # noqa: F401

        from services.judge import timing  # noqa: F401
    else:  # interpreted: bf16 casts round to nearest, as compiled kernels' do; scalars index on every NumPy
        from services.core import interpreter_rounding, interpreter_scalars

        interpreter_rounding.install()
        interpreter_scalars.install()
    torch.set_grad_enabled(False)
    if family(job["family"]).KIND == "function":  # its module is the namespace the tamper check watches
        return module_factory.import_function(job["class_path"])[0]
    return module_factory.import_class(job["class_path"])


@contextmanager
def _judge_phase(wall: AuditWall | None, scratch: Path) -> Iterator[None]:
    """The judge's own work (compiling baselines): its caches open, Triton writing into them."""
    saved = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(scratch / JUDGE_CACHE / "triton")
    try:
        with wall.judge_phase() if wall is not None else nullcontext():
            yield
    finally:
        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved


def _time(main, candidate, job: dict, shapes, dtype, wall: AuditWall | None, tampered, namespaces, facts, state=()):
    """Prepare the baselines in a judge phase, snapshot again, then time with the poisoning lifted. `state`: what the
    candidate reads besides its input (the module's weight), bit-identical after the timing calls."""
    import secrets

    from services.core.pb import events_pb2 as pb
    from services.judge import tamper
    from services.judge.poison import POISON
    from services.judge.timing import ReplayMismatch, TimedInputModified, prepare_baselines, time_candidate

    try:
        with _judge_phase(wall, Path.cwd()):
            baselines = prepare_baselines(main, shapes, dtype, job["eps"])
        # torch.compile installs global hooks the first time it runs (dynamo patches nn.Module.__init__):
        # the snapshot the timing is checked against is taken after that, and after the candidate was
        # found untampered against the first one.
        before = tamper.snapshot(namespaces)
        with POISON.lifted():  # timing pays nothing for the poisoning
            # the timed inputs' contents come from a nonce of this judging (not the seed the parent records)
            timing = time_candidate(main, candidate, shapes, dtype, baselines, state, nonce=secrets.randbits(62))
    except TimedInputModified as exc:  # wrote its input or the weight in a call no case check saw
        facts.setdefault("call_problems", []).append({"rule": exc.rule, "detail": str(exc)})
        return pb.TimingEvidence(measured=False, reason=f"{exc.rule}: during the timing calls")
    except ReplayMismatch as exc:  # drifted once timing began, or fast only while captured: wrong, not slow
        facts["drift"] = f"right in the checks, wrong in the CUDA graph that was timed: {exc}"
        return pb.TimingEvidence(measured=False, reason="drift: the timed graph's answer was wrong")
    except Exception as exc:  # no figures, but the re-check still judges the candidate
        gpu_fence.exit_on_fault(exc)  # unless the GPU faulted: its context is lost (memory-fault)
        return pb.TimingEvidence(measured=False, reason=f"timing failed: {type(exc).__name__}: {exc}")
    if tampered("during timing", before):
        return pb.TimingEvidence(measured=False, reason="tampered: not believed")
    return timing


AFTER_CASES = 6  # cases run again after the timing (or stress) calls: a kernel right only at first is wrong


def judge(job: dict, cls, report: WallReport, wall: AuditWall | None = None, clock=None):
    """(facts, TimingEvidence) for the job's candidate; the outputs go to `outputs.pt` in scratch.

    Every call of the candidate runs under `clock` (services.judge.run_cases.CallClock: a call past its limit ends
    the judging); without one, a clock whose expiry raises (CallExpired) in this process."""
    import torch

    from services.core import kernels
    from services.core.pb import events_pb2 as pb
    from services.judge import tamper
    from services.judge.module_factory import torch_dtype
    from services.judge.poison import NAN_BYTE, POISON
    from services.judge.run_cases import (
        CallClock,
        Guard,
        Runs,
        fences_stand,
        prefill_pairs,
        recording,
        stress,
        under_answers,
        under_fill,
        under_random_fill,
    )
    from services.judge.sampled_grid import SampledRun
    from services.ops import judging
    from services.ops.launch import INTERPRETER_SMS_ENV
    from services.ops.protocol import ChildContext, operands_from_data

    contract, plan = pb.Contract(), pb.LaunchPlan()
    contract.ParseFromString(base64.b64decode(job["contract"]))
    plan.ParseFromString(base64.b64decode(job["plan"]))
    device = torch.device(job["device"])
    gpu = device.type == "cuda"
    if not gpu and job.get("sms"):  # the fenced pass of a GPU judging: its GPU's program count (services.ops.launch)
        os.environ[INTERPRETER_SMS_ENV] = str(int(job["sms"]))
    dtype = torch_dtype(job["input_dtype"])
    facts: dict = {"loaded": False, "problems": []}
    cases = torch.load(Path.cwd() / "cases.pt", weights_only=True)  # the parent's cases: data only

    POISON.install()  # before the snapshot and the load: the wrapper's torch.empty is filled with NaN too
    namespaces = tamper.watched(cls, gpu=gpu)
    before = tamper.snapshot(namespaces)
    untimed = pb.TimingEvidence(measured=False, reason="the candidate did not load")
    allocate = {"fn": None}  # the output allocator of the call under way: guarded, or filled with a pattern

    def empty(shape, *, dtype, device):
        return (allocate["fn"] or torch.empty)(shape, dtype=dtype, device=device)

    try:
        names = sorted({launch.kernel for launch in plan.launches})
        loaded = kernels.load_kernels(kernels.write_source(Path.cwd() / "kernel", job["source"]), names)
        fam = judging(plan.family)
        operands = operands_from_data(fam.Operands, cases)
        subject = fam.subject(ChildContext(job, cls, plan, loaded, empty, operands, device, contract))
    except Exception as exc:
        facts["load_error"] = f"{type(exc).__name__}: {exc}"
        return facts, untimed
    facts["loaded"] = True

    def tampered(when: str, snapshot: dict | None = None) -> bool:
        names = tamper.changed(snapshot or before, namespaces)
        if names and not facts.get("tampered"):
            shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
            facts["tampered"] = f"{when}, {shown} had been replaced"
        return bool(names)

    if tampered("on import"):
        return facts, pb.TimingEvidence(measured=False, reason="tampered: not timed")
    canary_seed = int(job["seed_base"]) * 7919 + 1  # the guard bytes of this judging, unknown to the kernel
    if clock is None:
        clock = CallClock(job["device"], expire=lambda fact: facts.update(call_timeout=fact))

    def timed_call(what: str, index: int):
        tensors = subject.case_tensors(index)
        return clock.call(what, tuple(tensors[0].shape), 2 * sum(t.nbytes for t in tensors))

    answers: dict[int, list] = {}  # case -> its outputs as the wrapper allocated them (CPU), for the pre-fills
    sampled = {int(i): kind for i, kind in (job.get("sampled") or {}).items()}  # the served range's: a sample

    def run(index: int, fill=None, what: str = "", front: bool = False, keep: bool = True):
        """Case `index` in guarded memory; `fill` the answers its outputs' memory holds (another case's). `front`: the
        fences (a CPU's, a GPU's where it has them) before the tensors' starts (a case run again), not after their ends
        (its first run). `keep`: its outputs kept as the answers later pre-fills hold (not for a run only the fences
        need)."""
        guard = Guard(device, canary_seed, front=front)
        allocated: list = []
        allocate["fn"] = recording(under_answers(guard.empty, fill) if fill else guard.empty, allocated)
        # the served range: a sample of its programs (a run only the fences need looks for no writes)
        kind = sampled.get(index)
        sample = SampledRun(canary_seed + 3, index, kind, subject, allocated if keep else None) if kind else None
        try:
            with timed_call(what or f"case {index}", index), sample.context if sample else nullcontext():
                done = subject.run(index, guard)
        finally:
            allocate["fn"] = None
        done = sample.finish(done, facts, first=not front) if sample else done
        if keep and not done.problem and fill is None:
            answers[index] = [t.detach().cpu().clone() for t in allocated]
        return done

    runs = Runs()
    for index in range(subject.count):
        runs.outputs.append(run(index))
        if runs.outputs[-1].problem:  # stop at the first: a kernel that wrote out of bounds may have hurt us
            break
    facts["problems"] = runs.problems()
    if gpu_fence.status():  # a GPU judging: whether its tensors stood against unmapped addresses, recorded
        report.walls.append(gpu_fence.status())
    saved = {"outputs": [r.output for r in runs.outputs]}
    tampered("during the cases")
    clean = not facts["problems"] and not facts.get("tampered")

    def again(index: int, ghost: bool):
        with timed_call("the ghost call" if ghost else f"case {index} as production calls it", index):
            done = subject.again(index, ghost)
        if done.problem:
            facts["problems"].append(done.fact(index))
        return done.output

    if clean:
        # The first case again as production calls it: no guard bytes, no poison, the weight and input in
        # plain memory, the output's memory holding random bytes. A kernel that behaves only where it sees
        # the judge's canaries or fills answers differently here.
        allocate["fn"] = under_random_fill(canary_seed + 1)
        saved["second"] = again(0, ghost=False)
        # The launch skipped, into memory full of NaN (not the block the last answer was just freed from,
        # which the CUDA caching allocator would hand back): the answer must differ.
        allocate["fn"] = under_fill(NAN_BYTE)
        saved["ghost"] = again(0, ghost=True)
        allocate["fn"] = None
    if clean and not facts["problems"]:
        # Some cases again (drawn from the judging's seed), each output's memory holding another case's answer of the
        # same shape, as production's allocator hands back the block of the last call: the answer must be this
        # case's. A kernel that skips its work where the output already looks plausible returns the other's.
        signatures = [tuple((tuple(t.shape), str(t.dtype)) for t in answers[i]) for i in range(subject.count)]
        pairs = prefill_pairs(canary_seed + 2, signatures)
        saved["prefilled_cases"], saved["prefilled"] = [], []
        for case, donor in pairs:
            done = run(case, fill=answers[donor], what=f"case {case} pre-filled with case {donor}'s answer", front=True)
            if done.problem:
                detail = f"its output pre-filled with case {donor}'s answer: {done.problem[1]}"
                facts["problems"].append({**done.fact(case), "detail": detail})
                break
            saved["prefilled_cases"].append([case, donor])
            saved["prefilled"].append(done.output)
    clean = clean and not facts["problems"]
    torch.save(saved, Path.cwd() / OUTPUTS_FILE)
    (Path.cwd() / FIRST_PASS_FILE).write_text(json.dumps(facts))
    timing = pb.TimingEvidence(measured=False, reason="incorrect: not timed")
    if not clean or not _go_ahead(int(job.get("ready_fd", -1))):
        return facts, timing  # the parent saw the first pass fail (or it failed here): no timing for it
    main, candidate, shapes = subject.timed()
    state = list(getattr(subject, "timed_state", []))
    facts["call_problems"] = []  # calls that are no case (the stress or timing calls): problems as facts too
    if gpu:
        timing = _time(main, candidate, job, shapes, dtype, wall, tampered, namespaces, facts, state)
    else:
        timing = pb.TimingEvidence(measured=False, reason="no GPU: correctness only under TRITON_INTERPRET=1")
        calls, problem = stress(candidate, subject.stress_input(dtype), CPU_STRESS_CALLS, state, clock)
        facts["stress_calls"] = calls
        if problem:
            facts["call_problems"].append(problem)
        tampered("during the further calls")
    # Run again after the timing calls: a kernel that is only right the first few times is wrong.
    after = Runs([run(i, front=True) for i in range(min(AFTER_CASES, subject.count))])
    saved["after"] = [r.output for r in after.outputs]
    facts["after_problems"] = after.problems()
    if fences_stand(device):  # every other case once more, its tensors flush with the zone before them: a read
        # before a tensor's start faults (the child ends) at whatever shape it was drawn, not only at the few run
        # again (memory_underread_one_shape); their answers were checked once already and are not kept
        for index in range(AFTER_CASES, subject.count):
            done = run(index, front=True, keep=False)
            if done.problem:
                facts["after_problems"].append(done.fact(index))
                break
    facts["slowest_call"] = clock.slowest
    torch.save(saved, Path.cwd() / OUTPUTS_FILE)
    return facts, timing


def _go_ahead(ready_fd: int) -> bool:
    """Tell the parent the first pass is on disk and wait for its word: time it, or stop (it was wrong)."""
    if ready_fd < 0:
        return True
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    return sys.stdin.readline().strip() == "time"


def _raise_walls(job: dict, scratch: Path, report: WallReport) -> None:
    walls = job["walls"]
    if walls.get("netns", True):
        enter_network_namespace(report)
    else:
        report.network = "audit-hook"
        report.walls.append("network namespace switched off: sockets refused by the audit hook")
    uid = drop_root(scratch, report, gpu=job["device"] == "cuda") if walls.get("drop_root", True) else None
    if uid is None and not report.user:
        report.user = "same user (root drop switched off)" if os.getuid() == 0 else "same user (not root)"
    set_limits(
        report,
        cpu_s=int(walls["cpu_s"]),
        file_bytes=int(walls["file_bytes"]),
        address_bytes=walls.get("address_bytes"),
        processes=processes_allowed(int(walls["processes"]), uid),
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m services.judge.sandbox_child < job.json (started by the judge)", file=sys.stderr)
        return 2
    job = json.loads(sys.stdin.readline())  # one line; stdin stays open for the parent's go-ahead
    nonce = job.pop("nonce")
    result_fd = int(job.pop("result_fd"))
    scratch = Path.cwd()
    report = WallReport()
    from services.core.pb import events_pb2 as pb

    walls_failed = ""

    def answer(facts: dict, timing) -> None:
        _answer(result_fd, nonce, facts, timing, report, walls_failed)

    def expire(fact: dict) -> None:  # a call ran past its limit (the clock's thread): answer and end, at once
        answer({"loaded": True, "problems": [], "call_timeout": fact},
               pb.TimingEvidence(measured=False, reason="a call ran past its per-call limit"))  # fmt: skip
        os._exit(0)

    try:
        try:
            _raise_walls(job, scratch, report)
        except Exception as exc:  # fail closed: no candidate runs behind walls that did not go up
            walls_failed = f"{type(exc).__name__}: {exc}"
            raise RuntimeError(f"the sandbox could not raise its walls: {walls_failed}") from exc
        cls = _prepare(job)
        from services.judge.run_cases import CallClock

        clock = CallClock(job["device"], expire)
        wall = None
        if job["walls"].get("audit", True):
            wall = install_audit_wall(scratch, [scratch / JUDGE_CACHE], job["device"] == "cuda", report)
        facts, timing = judge(job, cls, report, wall, clock)
    except BaseException as exc:  # whatever went wrong (even SystemExit) is a fact for the parent
        gpu_fence.exit_on_fault(exc)  # but a GPU memory fault (a fence met, at a sync after the call) ends the child
        facts = {"loaded": False, "child_error": f"{type(exc).__name__}: {exc}"[:2000]}
        timing = pb.TimingEvidence(measured=False, reason="the sandbox child failed")
    answer(facts, timing)
    return 0


def _answer(result_fd: int, nonce: str, facts: dict, timing, report: WallReport, walls_failed: str) -> None:
    """The answer, written once to the inherited descriptor of an unlinked file (services.judge.sandbox reads it)."""
    from google.protobuf import json_format

    result = {
        "nonce": nonce,
        "facts": facts,
        "timing": json_format.MessageToDict(timing, preserving_proto_field_name=True),
        "walls": {
            "network": report.network,
            "user": report.user,
            "walls": report.walls,
            "refused": report.refused,
            "failed": walls_failed,
        },
    }
    data = json.dumps(result).encode()
    os.lseek(result_fd, 0, os.SEEK_SET)
    while data:
        data = data[os.write(result_fd, data) :]
    os.close(result_fd)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
